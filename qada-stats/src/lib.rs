//! Statistics of attention keys for QAdA (query-adaptive attention).
//!
//! - [`KeyMoments`]: streaming mean and population covariance of d-dimensional keys
//!   (Welford / Chan et al.), f64 accumulators, f32 keys in.
//! - [`GaussianScore`]: the Gaussian score model of the paper (eq. 6): for a query `q` and key
//!   moments `(mu_K, Sigma_K)`, `mu_s = q . mu_K / sqrt(d)`, `sigma_s^2 = q Sigma_K q^T / d` and
//!   `log A_bulk_hat = ln T_bulk + mu_s + sigma_s^2 / 2`.
//! - [`MomentTable`]: calibration moments (the paper's option 2) per layer and KV head at
//!   checkpoints, saved in a versioned, checksummed binary file tied to a [`ModelSignature`].
//!
//! This crate depends on nothing else in the workspace and never prints.

pub mod codec;
mod error;
mod factored;
mod moments;
mod packed;
mod rows;
mod score;
mod signature;
pub mod simd;
mod table;

pub use error::{Result, StatsError};
pub use factored::FactoredMoments;
pub use half::f16;
pub use moments::KeyMoments;
pub use rows::Rows;
pub use score::{GaussianScore, KeyDistribution};
pub use signature::ModelSignature;
pub use table::{Checkpoint, MomentTable, DEFAULT_TABLE_OFFSET};

// Types users share across threads.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<KeyMoments>();
    send_sync::<FactoredMoments>();
    send_sync::<MomentTable>();
    send_sync::<GaussianScore>();
    send_sync::<ModelSignature>();
    send_sync::<Rows<'static>>();
};
