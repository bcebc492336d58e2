//! The heart of QAdA: for one query head at one decoding step, decide whether attention can be
//! restricted to the local window (sink + recent tokens), and compute that attention.
//!
//! - [`LocalityCriterion`]: one required method, [`LocalityCriterion::decide`], from a small
//!   [`HeadInput`]. Implementations, each in its own module: [`Oracle`] (exact, needs every
//!   score), [`Approx`] (QAdA, Gaussian model of the bulk keys), [`Static`] (fixed label per
//!   head), [`Dense`] (never local) and [`Window`] (always local, StreamingLLM).
//! - [`attention`]: dense, local and merged softmax attention over borrowed key/value slices.
//! - [`adaptive`]: one decoding step of a whole layer: local scores once, decide, then local or
//!   dense attention per head, reusing the local scores.
//! - [`Accounting`]: decisions, sparsity, attention FLOPs and K/V bytes against dense.
//!
//! This crate knows nothing of GGUF, tokenizers, the model or the cache layout: it reads
//! borrowed slices ([`KvSegments`]) and never prints.

pub mod accounting;
pub mod adaptive;
pub mod analysis;
pub mod attention;
pub mod criteria;
mod criterion;
mod error;
pub mod lse;
pub mod metrics;

pub use accounting::{Accounting, HeadCounts};
pub use adaptive::{attend_layer, LayerKv, LayerScratch};
pub use attention::KvSegments;
pub use criteria::{
    approx::Approx,
    dense::Dense,
    oracle::Oracle,
    static_heads::{Static, StaticCalibrator, StaticTable},
    window::Window,
};
pub use criterion::{Decision, HeadInput, LocalityCriterion, Tau};
pub use error::{CoreError, Result};

// Types users share across threads.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Oracle>();
    send_sync::<Approx>();
    send_sync::<Static>();
    send_sync::<StaticTable>();
    send_sync::<Dense>();
    send_sync::<Window>();
    send_sync::<Box<dyn LocalityCriterion>>();
    send_sync::<Accounting>();
    send_sync::<KvSegments<'static>>();
    send_sync::<LayerScratch>();
};
