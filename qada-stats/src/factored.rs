//! A factored covariance for fixed moments: `Sigma ~ sum_{i < r} f_i f_i^T` with
//! `f_i = sqrt(lambda_i) u_i` over the leading eigenpairs, so that
//! `q Sigma q^T ~ sum_i (f_i . q)^2` costs `r d` instead of `d^2 / 2`.
//!
//! The rank `r` is the smallest whose dropped eigenvalues sum to at most `rel_tol` of the
//! trace; then `|q Sigma q^T - sum_i (f_i . q)^2| <= lambda_r |q|^2 <= rel_tol trace(Sigma) |q|^2`.
//! Worth it when the moments stay fixed for many steps (frozen or calibration moments): the
//! eigendecomposition (faer) costs `O(d^3)` once.
//!
//! Linear algebra: the crate's boundary speaks `ndarray` (keys in, mean and covariance out),
//! but the eigendecomposition runs in faer, converted here and only here: the covariance array
//! is copied into a faer `Mat` and the factors come back as f32 slices for the kernel. faer
//! rather than ndarray-linalg, which needs a system LAPACK (OpenBLAS, MKL) at build and run
//! time; faer is pure Rust on `gemm`, so the crate builds anywhere `cargo` does.

use faer::{Mat, Side};

use crate::{KeyDistribution, KeyMoments, Result, StatsError};

/// Mean and low-rank covariance factors of a key distribution.
#[derive(Clone, Debug)]
pub struct FactoredMoments {
    dim: usize,
    count: u64,
    mean: Vec<f64>,
    /// `rank x dim`, row `i` is `sqrt(lambda_i) u_i`.
    factors: Vec<f32>,
    rank: usize,
    dropped: f64,
    trace: f64,
}

impl FactoredMoments {
    /// Factor `m`'s covariance, keeping the leading eigenpairs that leave at most `rel_tol` of
    /// the trace out.
    pub fn new(m: &KeyMoments, rel_tol: f64) -> Result<Self> {
        if !(0.0..1.0).contains(&rel_tol) {
            return Err(StatsError::Invalid {
                what: "relative tolerance",
                offset: 0,
                reason: format!("{rel_tol} is not in [0, 1)"),
            });
        }
        let d = m.dim();
        // ndarray -> faer, at this boundary only
        let cov = m.covariance_array();
        let a = Mat::<f64>::from_fn(d, d, |i, j| cov[[i, j]]);
        let evd = a.selfadjoint_eigendecomposition(Side::Lower);
        let s = evd.s().column_vector();
        let u = evd.u();
        let mut order: Vec<usize> = (0..d).collect();
        order.sort_by(|&i, &j| s.read(j).total_cmp(&s.read(i)));
        let lambda: Vec<f64> = order.iter().map(|&i| s.read(i).max(0.0)).collect();
        let trace: f64 = lambda.iter().sum();
        let mut rank = d;
        let mut dropped = 0.0;
        while rank > 0 && dropped + lambda[rank - 1] <= rel_tol * trace {
            dropped += lambda[rank - 1];
            rank -= 1;
        }
        let mut factors = Vec::with_capacity(rank * d);
        for &i in order.iter().take(rank) {
            let sq = s.read(i).max(0.0).sqrt();
            factors.extend((0..d).map(|r| (sq * u.read(r, i)) as f32));
        }
        Ok(FactoredMoments {
            dim: d,
            count: m.count(),
            mean: m.mean().to_vec(),
            factors,
            rank,
            dropped,
            trace,
        })
    }

    /// Number of factors kept.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Sum of the eigenvalues left out.
    pub fn dropped(&self) -> f64 {
        self.dropped
    }

    /// Trace of the covariance.
    pub fn trace(&self) -> f64 {
        self.trace
    }
}

impl KeyDistribution for FactoredMoments {
    fn dim(&self) -> usize {
        self.dim
    }
    fn count(&self) -> u64 {
        self.count
    }
    fn mean_dot(&self, q: &[f32]) -> Result<f64> {
        if q.len() != self.dim {
            return Err(StatsError::DimensionMismatch {
                expected: self.dim,
                found: q.len(),
            });
        }
        Ok(crate::moments::dot_f64(q, &self.mean))
    }
    fn quad_form(&self, q: &[f32]) -> Result<f64> {
        if q.len() != self.dim {
            return Err(StatsError::DimensionMismatch {
                expected: self.dim,
                found: q.len(),
            });
        }
        if self.dim == 0 {
            return Ok(0.0);
        }
        Ok(self
            .factors
            .chunks_exact(self.dim)
            .map(|f| {
                let mut acc = [0.0f32; 8];
                let (fc, qc) = (f.chunks_exact(8), q.chunks_exact(8));
                let mut p: f32 = fc
                    .remainder()
                    .iter()
                    .zip(qc.remainder())
                    .map(|(a, b)| a * b)
                    .sum();
                for (a, b) in fc.zip(qc) {
                    for k in 0..8 {
                        acc[k] += a[k] * b[k];
                    }
                }
                p += acc.iter().sum::<f32>();
                (p as f64) * (p as f64)
            })
            .sum())
    }
}
