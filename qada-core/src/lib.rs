//! The heart of QAdA: for one query head at one decoding step, decide whether attention can be
//! restricted to the local window (sink + recent tokens), and compute that attention.
//!
//! - [`LocalityCriterion`]: one required method, [`LocalityCriterion::decide`], from a small
//!   [`HeadInput`]. Implementations, each in its own module: [`Oracle`] (exact, needs every
//!   score), [`Approx`] (QAdA, Gaussian model of the bulk keys), [`Static`] (fixed label per
//!   head), [`Dense`] (never local) and [`Window`] (always local, StreamingLLM); and three
//!   that read summaries of the bulk the cache keeps when they ask
//!   ([`LocalityCriterion::bulk_summaries`]): [`Bound`] (an upper bound of the bulk mass from
//!   page bounds: never local where the oracle says long), [`Mixture`] (QAdA over `k` key
//!   clusters) and [`Hybrid`] (QAdA, its close local calls checked by the bound).
//! - [`dense_attention`] and [`local_attention`]: softmax attention over borrowed key/value
//!   slices, the reference the adaptive step is tested against.
//! - [`attend_layer`]: one decoding step of a whole layer: local scores once, decide, then
//!   local, selected or dense attention per head, reusing the local scores.
//! - [`Accounting`]: decisions, sparsity, attention FLOPs and K/V bytes against dense.
//!
//! - [`decide_query`] and [`compare_query`]: one query head given as `ndarray` views (query,
//!   local keys, bulk keys or moments), decided with no model and no cache.
//!
//! This crate knows nothing of GGUF, tokenizers, the model or the cache layout: it reads
//! borrowed slices ([`KvSegments`]) and never prints.
//!
//! # Example: the oracle and QAdA on a few keys
//!
//! One query of dimension 2, a local set (a sink key along the query, one window key) and a
//! bulk of four keys with small scores: about 94% of the softmax mass is local, so at
//! `tau = 0.9` both call the head local, and at `tau = 0.95` both call it long-context.
//!
//! ```
//! use ndarray::array;
//! use qada_core::{compare_query, decide_query, Approx, Bulk, HeadQuery, Oracle};
//!
//! let query = array![2.0f32, 0.0];
//! let local_keys = array![[3.0f32, 0.0], [0.0, 1.0]];
//! let bulk_keys = array![[0.0f32, 1.0], [0.0, -1.0], [-0.5, 0.5], [0.5, -0.5]];
//! let head = HeadQuery {
//!     query: query.view(),
//!     local_keys: local_keys.view(),
//!     bulk: Bulk::Keys(bulk_keys.view()), // or Bulk::Moments(&moments): QAdA needs no keys
//!     scale: None,                        // 1 / sqrt(d)
//! };
//!
//! let oracle = decide_query(&Oracle::new(0.9)?, &head)?;
//! let approx = decide_query(&Approx::new(0.9)?, &head)?;
//! assert!(oracle.local && approx.local);
//! let share = oracle.log_local_share.unwrap().exp();
//! assert!((share - 0.9398).abs() < 1e-4, "{share}");
//!
//! // both decisions, both shares and the Gaussian error ln A_bulk_hat - ln A_bulk at once
//! let c = compare_query(0.95, &head)?;
//! assert!(!c.oracle.local && !c.approx.local);
//! assert!((c.approx_share().exp() - 0.9397).abs() < 1e-4);
//! assert!(c.gaussian_error().abs() < 0.01);
//! # Ok::<(), qada_core::CoreError>(())
//! ```

#![warn(missing_docs)]

mod accounting;
mod adaptive;
// The kernels qada-model runs: public for it, not part of the API (see the module's doc).
#[doc(hidden)]
pub mod attention;
mod criteria;
mod criterion;
mod error;
mod group;
pub mod lse;
mod query;
mod reuse;
mod selection;

pub use accounting::{Accounting, DecisionCost, HeadCounts, PhaseTimes};
pub use adaptive::{attend_layer, LayerKv, LayerScratch};
pub use attention::{dense_attention, local_attention, KvSegments, ScoreMap};
pub use criteria::{
    approx::Approx,
    bound::Bound,
    by_name::{by_name, CriterionParams, CRITERION_NAMES, SELECTING_NAMES},
    dense::Dense,
    dense_below::DenseBelow,
    hybrid::Hybrid,
    mixture::Mixture,
    oracle::Oracle,
    pages::{HeadPages, PageRule, Pages},
    per_head::{calibrate_head_taus, HeadObservation, HeadTaus, PerHead},
    static_heads::{Static, StaticCalibrator, StaticTable},
    window::Window,
};
pub use criteria::{
    bound::DEFAULT_PAGE,
    by_name::{DEFAULT_CHANNELS, DEFAULT_QUEST_TOKENS},
    hybrid::DEFAULT_MARGIN,
    mixture::DEFAULT_CLUSTERS,
    pages::DEFAULT_SELECT_PAGE,
};
pub use criterion::{Decision, HeadInput, LocalityCriterion, Tau};
pub use error::{CoreError, Result};
pub use group::{GroupMode, Grouped};
pub use query::{
    compare_query, decide_query, Bulk, BulkSummaryData, Comparison, HeadQuery, PreparedQuery,
};
pub use reuse::{Reuse, ReusePages};
pub use selection::{GroupRead, LayerReads, PageSelection};

// Types users share across threads.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Oracle>();
    send_sync::<Approx>();
    send_sync::<Bound>();
    send_sync::<Mixture>();
    send_sync::<Hybrid>();
    send_sync::<Static>();
    send_sync::<StaticTable>();
    send_sync::<HeadTaus>();
    send_sync::<PerHead<Approx>>();
    send_sync::<Dense>();
    send_sync::<Window>();
    send_sync::<Box<dyn LocalityCriterion>>();
    send_sync::<Accounting>();
    send_sync::<KvSegments<'static>>();
    send_sync::<LayerScratch>();
};
