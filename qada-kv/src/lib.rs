//! The KV cache of a decoder: per layer and KV head, contiguous key and value rows (f32, f16 or
//! 8-bit blocks, [`KvDtype`]), split into the three index sets of QAdA:
//!
//! - the **sink**: the first `T_sink` tokens,
//! - the **window**: the last `T_local - T_sink` tokens,
//! - the **bulk**: everything between, `T_bulk = T - T_local` tokens (none when `T <= T_local`).
//!
//! Sink and window together are the local set `I` of the paper. The cache also keeps the
//! moments `(mu_K, Sigma_K)` of every head's bulk keys, as the paper's option 1 (moments of the
//! current prompt, updated as keys leave the window, or frozen after prefill) or option 2
//! (moments from a calibration table).
//!
//! When a criterion asks for them ([`KvCache::set_bulk_summaries`]), each full layer's bulk
//! is also kept as page bounds and as cluster moments (see [`qada_stats::BulkSummaries`]).
//!
//! All views borrow the cache's storage: no key or value is ever copied to build one.
//!
//! # Layer spans
//!
//! Every layer has a [`LayerSpan`] ([`KvCache::with_spans`]; [`KvCache::new`] makes them all
//! `Full`). A `Sliding(W)` layer, like Gemma 3's local layers, serves queries that see only the
//! last `W` positions, so it keeps only those rows: its length still counts every position
//! appended, but its storage starts at [`HeadView::first_position`] and stays within
//! `max(2W, W - 1 + n)` rows (`n` the tokens of the last append), whatever the context length.
//! It is all window (sink and bulk empty) and keeps no bulk moments; checkpoints copy its kept
//! rows. Layer indices stay the model's, so calibration tables and reports keep theirs.
//!
//! # Example
//!
//! A one-layer cache with one KV head of length 2, a sink of 1 token and a local set of 3
//! (sink plus a window of 2); six tokens appended, then the three segments and the moments of
//! the bulk:
//!
//! ```
//! use qada_kv::{CacheShape, KvCache, KvDtype, MomentsMode, WindowConfig};
//! use qada_stats::Rows;
//!
//! let shape = CacheShape { n_layers: 1, n_kv_heads: 1, head_dim: 2, capacity: 16, dtype: KvDtype::F32 };
//! let mut cache = KvCache::new(shape, WindowConfig::new(1, 3)?, MomentsMode::Update)?;
//! // token t has key (t, 0) and value (0, t)
//! let keys: Vec<f32> = (0..6).flat_map(|t| [t as f32, 0.0]).collect();
//! let values: Vec<f32> = (0..6).flat_map(|t| [0.0, t as f32]).collect();
//! cache.append(0, &keys, &values)?;
//!
//! let head = cache.head(0, 0)?;
//! assert_eq!(head.len(), 6);
//! let f32s = |r: Rows<'_>| match r {
//!     Rows::F32(x) => x.to_vec(),
//!     _ => unreachable!("an f32 cache"),
//! };
//! // sink: token 0; bulk: tokens 1..4; window: tokens 4 and 5
//! assert_eq!((head.sink().start, f32s(head.sink().keys)), (0, vec![0.0, 0.0]));
//! assert_eq!((head.bulk().start, head.bulk().len(2)), (1, 3));
//! assert_eq!(f32s(head.window().keys), vec![4.0, 0.0, 5.0, 0.0]);
//! // the bulk moments follow the keys that left the window: tokens 1, 2, 3
//! assert_eq!(head.bulk_moments().count(), 3);
//! assert_eq!(head.bulk_moments().mean(), &[2.0, 0.0]);
//! # Ok::<(), qada_kv::KvError>(())
//! ```

#![warn(missing_docs)]

mod cache;
mod checkpoint;
mod error;
mod exact;
mod moments_mode;
mod span;
mod store;
mod summaries;
mod views;
mod window;

pub use cache::{CacheShape, KvCache};
pub use checkpoint::CacheCheckpoint;
pub use error::{KvError, Result};
pub use moments_mode::{MomentsMode, MomentsSource, FACTOR_TOLERANCE};
pub use span::LayerSpan;
pub use store::KvDtype;
pub use views::{HeadView, LayerView, Segment};
pub use window::{Split, WindowConfig};

// Types users share across threads.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<KvCache>();
    send_sync::<CacheCheckpoint>();
    send_sync::<HeadView<'static>>();
    send_sync::<WindowConfig>();
};
