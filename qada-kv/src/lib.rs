//! The KV cache of a decoder: per layer and KV head, contiguous f32 key and value rows, split
//! into the three index sets of QAdA:
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
//! All views borrow the cache's storage: no key or value is ever copied to build one.

mod cache;
mod error;
mod window;

pub use cache::{
    CacheCheckpoint, CacheShape, HeadView, KvCache, KvDtype, LayerView, MomentsMode, Segment,
    FACTOR_TOLERANCE,
};
pub use error::{KvError, Result};
pub use window::{Split, WindowConfig};

// Types users share across threads.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<KvCache>();
    send_sync::<CacheCheckpoint>();
    send_sync::<HeadView<'static>>();
    send_sync::<WindowConfig>();
};
