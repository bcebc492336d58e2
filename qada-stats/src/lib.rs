//! Statistics of attention keys for QAdA (query-adaptive attention).
//!
//! - [`KeyMoments`]: streaming mean and population covariance of d-dimensional keys
//!   (Welford / Chan et al.), f64 accumulators, f32 keys in.
//! - [`GaussianScore`]: the Gaussian score model of the paper (eq. 6): for a query `q` and key
//!   moments `(mu_K, Sigma_K)`, `mu_s = q . mu_K / sqrt(d)`, `sigma_s^2 = q Sigma_K q^T / d` and
//!   `log A_bulk_hat = ln T_bulk + mu_s + sigma_s^2 / 2`.
//! - [`PageBounds`] and [`ClusterMoments`]: the bulk in pages with elementwise bounds (an
//!   upper bound of the bulk mass) and in k-means clusters with moments each (a mixture
//!   estimate), kept by a cache when a criterion asks for them ([`BulkSummaries`]).
//! - [`MomentTable`]: calibration moments (the paper's option 2) per layer and KV head at
//!   checkpoints, saved in a versioned, checksummed binary file tied to a [`ModelSignature`].
//!
//! This crate depends on nothing else in the workspace and never prints. Keys enter as
//! `ndarray` views or row-major slices; the kernels run on slices.
//!
//! # Example
//!
//! Moments of four bulk keys (`d = 2`, one key a row), then the Gaussian estimate of the bulk
//! mass for a query:
//!
//! ```
//! use ndarray::array;
//! use qada_stats::{GaussianScore, KeyMoments};
//!
//! let keys = array![[1.0f32, 0.0], [3.0, 0.0], [1.0, 2.0], [3.0, 2.0]];
//! let moments = KeyMoments::from_keys(keys.view())?;
//! assert_eq!(moments.mean_array(), array![2.0, 1.0]);
//! // population covariance: variance 1 on each axis, no correlation
//! assert_eq!(moments.covariance_array(), array![[1.0, 0.0], [0.0, 1.0]]);
//!
//! let q = array![2.0f32, 4.0];
//! let scale = 1.0 / 2f64.sqrt(); // 1 / sqrt(d)
//! let score = GaussianScore::of_query(q.view(), &moments, scale)?;
//! // mu_s = scale q . mu_K = 8 scale, sigma_s^2 = scale^2 q Sigma_K q^T = 20 scale^2
//! assert!((score.mu_s - 8.0 * scale).abs() < 1e-12);
//! assert!((score.sigma2_s - 10.0).abs() < 1e-12);
//! // log A_bulk_hat = ln T_bulk + mu_s + sigma_s^2 / 2, here for T_bulk = 1000 keys
//! let log_a_bulk = score.log_bulk_mass(1000);
//! assert!((log_a_bulk - (1000f64.ln() + 8.0 * scale + 5.0)).abs() < 1e-12);
//! # Ok::<(), qada_stats::StatsError>(())
//! ```

#![warn(missing_docs)]

mod channel_keys;
mod clusters;
pub mod codec;
mod error;
mod factored;
mod moments;
mod packed;
mod pages;
mod q8;
mod quad;
mod rows;
mod score;
mod signature;
pub mod simd;
mod summary;
mod table;

pub use channel_keys::{ChannelColumn, ChannelKeys};
pub use clusters::{ClusterMoments, KMEANS_ITERATIONS};
pub use error::{Result, StatsError};
pub use factored::FactoredMoments;
pub use half::f16;
pub use moments::KeyMoments;
pub use pages::PageBounds;
pub use q8::{Q8Block, Q8_BLOCK};
pub use rows::Rows;
pub use score::{GaussianScore, KeyDistribution};
pub use signature::ModelSignature;
pub use summary::BulkSummaries;
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
    send_sync::<PageBounds>();
    send_sync::<ClusterMoments>();
};
