//! The Gaussian score model (paper eq. 5-7).
//!
//! If bulk keys follow `k ~ N(mu_K, Sigma_K)`, the score `s = c q . k` (with `c = 1/sqrt(d)`)
//! is Gaussian with `mu_s = c q . mu_K` and `sigma_s^2 = c^2 q Sigma_K q^T`, so `exp(s)` is
//! log-normal with mean `exp(mu_s + sigma_s^2 / 2)`. The bulk mass is then estimated as
//! `A_bulk_hat = T_bulk exp(mu_s + sigma_s^2 / 2)`, kept in the log domain:
//! `log A_bulk_hat = ln T_bulk + mu_s + sigma_s^2 / 2`.
//!
//! Queries enter as slices (the decoding kernels' form) or as `ndarray` views
//! ([`GaussianScore::of_query`], [`KeyDistribution::mean_dot_view`]); a view that is not
//! contiguous is copied to a contiguous row first.

use ndarray::ArrayView1;

use crate::{KeyMoments, Result};

/// Queries [`GaussianScore::batch`] scores per call of [`KeyDistribution::quad_forms`].
const BATCH: usize = 8;

/// Up to this length a non-contiguous query view is copied on the stack.
const STACK_QUERY: usize = 256;

/// Call `f` with the query as a contiguous slice: the view's own memory when it is contiguous,
/// else a copy (on the stack up to [`STACK_QUERY`] values).
fn with_query<T>(q: ArrayView1<'_, f32>, f: impl FnOnce(&[f32]) -> T) -> T {
    if let Some(x) = q.as_slice() {
        return f(x);
    }
    if q.len() <= STACK_QUERY {
        let mut buf = [0.0f32; STACK_QUERY];
        let buf = &mut buf[..q.len()];
        buf.iter_mut().zip(q.iter()).for_each(|(b, &x)| *b = x);
        f(buf)
    } else {
        f(&q.to_vec())
    }
}

/// A distribution of keys seen through a query: what the Gaussian score model needs.
///
/// [`KeyMoments`] implements it with an `O(d^2)` quadratic form; a factored covariance
/// (Cholesky or low rank, `Sigma = L L^T`, `q Sigma q^T = |L^T q|^2`) can implement it with a
/// cheaper product without touching the callers.
pub trait KeyDistribution: Send + Sync + std::fmt::Debug {
    /// Key length `d`.
    fn dim(&self) -> usize;
    /// Number of keys the moments summarize (0: nothing to estimate from).
    fn count(&self) -> u64;
    /// `q . mu_K`.
    fn mean_dot(&self, q: &[f32]) -> Result<f64>;
    /// `q Sigma_K q^T`.
    fn quad_form(&self, q: &[f32]) -> Result<f64>;
    /// `out[h] = q_h Sigma_K q_h^T` for a batch of queries (the query heads of a GQA group);
    /// each value equals [`KeyDistribution::quad_form`] of its query. Query by query unless
    /// overridden ([`KeyMoments`] reads its matrix once a batch).
    fn quad_forms(&self, qs: &[&[f32]], out: &mut [f64]) -> Result<()> {
        if qs.len() != out.len() {
            return Err(crate::StatsError::ShapeMismatch {
                what: "quadratic forms: outputs vs queries",
                expected: qs.len(),
                found: out.len(),
            });
        }
        for (q, o) in qs.iter().zip(out.iter_mut()) {
            *o = self.quad_form(q)?;
        }
        Ok(())
    }
    /// `q . mu_K` for a query given as an `ndarray` view (of any stride).
    fn mean_dot_view(&self, q: ArrayView1<'_, f32>) -> Result<f64> {
        with_query(q, |q| self.mean_dot(q))
    }
    /// `q Sigma_K q^T` for a query given as an `ndarray` view (of any stride).
    fn quad_form_view(&self, q: ArrayView1<'_, f32>) -> Result<f64> {
        with_query(q, |q| self.quad_form(q))
    }
}

impl KeyDistribution for KeyMoments {
    fn dim(&self) -> usize {
        KeyMoments::dim(self)
    }
    fn count(&self) -> u64 {
        KeyMoments::count(self)
    }
    fn mean_dot(&self, q: &[f32]) -> Result<f64> {
        KeyMoments::mean_dot(self, q)
    }
    fn quad_form(&self, q: &[f32]) -> Result<f64> {
        KeyMoments::quad_form(self, q)
    }
    fn quad_forms(&self, qs: &[&[f32]], out: &mut [f64]) -> Result<()> {
        KeyMoments::quad_forms(self, qs, out)
    }
}

impl<D: KeyDistribution + ?Sized> KeyDistribution for &D {
    fn dim(&self) -> usize {
        (**self).dim()
    }
    fn count(&self) -> u64 {
        (**self).count()
    }
    fn mean_dot(&self, q: &[f32]) -> Result<f64> {
        (**self).mean_dot(q)
    }
    fn quad_form(&self, q: &[f32]) -> Result<f64> {
        (**self).quad_form(q)
    }
    fn quad_forms(&self, qs: &[&[f32]], out: &mut [f64]) -> Result<()> {
        (**self).quad_forms(qs, out)
    }
    fn mean_dot_view(&self, q: ArrayView1<'_, f32>) -> Result<f64> {
        (**self).mean_dot_view(q)
    }
    fn quad_form_view(&self, q: ArrayView1<'_, f32>) -> Result<f64> {
        (**self).quad_form_view(q)
    }
}

/// Mean and variance of the score `s = scale * q . k` under a Gaussian key model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GaussianScore {
    /// `mu_s = scale * q . mu_K`.
    pub mu_s: f64,
    /// `sigma_s^2 = scale^2 * q Sigma_K q^T` (never negative: rounding below zero is clamped).
    pub sigma2_s: f64,
}

impl GaussianScore {
    /// The score of zero mean and variance.
    pub const ZERO: GaussianScore = GaussianScore {
        mu_s: 0.0,
        sigma2_s: 0.0,
    };

    /// Score moments of query `q` under `keys`, with the attention scale (usually
    /// `1 / sqrt(d)`).
    pub fn new<D: KeyDistribution + ?Sized>(q: &[f32], keys: &D, scale: f64) -> Result<Self> {
        let mut out = [GaussianScore::ZERO];
        GaussianScore::batch(&[q], keys, scale, &mut out)?;
        Ok(out[0])
    }

    /// [`GaussianScore::new`] for a batch of queries against one key distribution (the query
    /// heads of a GQA group and their KV head's moments): the quadratic forms go through
    /// [`KeyDistribution::quad_forms`], so each score equals its query's alone, bit for bit.
    pub fn batch<D: KeyDistribution + ?Sized>(
        qs: &[&[f32]],
        keys: &D,
        scale: f64,
        out: &mut [GaussianScore],
    ) -> Result<()> {
        if qs.len() != out.len() {
            return Err(crate::StatsError::ShapeMismatch {
                what: "Gaussian scores: outputs vs queries",
                expected: qs.len(),
                found: out.len(),
            });
        }
        let mut quad = [0.0f64; BATCH];
        for (qs, out) in qs.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            let quad = &mut quad[..qs.len()];
            keys.quad_forms(qs, quad)?;
            for ((q, o), &qf) in qs.iter().zip(out.iter_mut()).zip(quad.iter()) {
                *o = GaussianScore {
                    mu_s: scale * keys.mean_dot(q)?,
                    sigma2_s: (scale * scale * qf).max(0.0),
                };
            }
        }
        Ok(())
    }

    /// [`GaussianScore::new`] for a query given as an `ndarray` view of length `d` (of any
    /// stride; a non-contiguous view is copied once).
    pub fn of_query<D: KeyDistribution + ?Sized>(
        q: ArrayView1<'_, f32>,
        keys: &D,
        scale: f64,
    ) -> Result<Self> {
        with_query(q, |q| GaussianScore::new(q, keys, scale))
    }

    /// `ln E[exp(s)] = mu_s + sigma_s^2 / 2`, the log of the log-normal mean.
    pub fn log_mean_exp(&self) -> f64 {
        self.mu_s + 0.5 * self.sigma2_s
    }

    /// `log A_bulk_hat = ln T_bulk + mu_s + sigma_s^2 / 2`; `-inf` for an empty bulk.
    pub fn log_bulk_mass(&self, t_bulk: usize) -> f64 {
        if t_bulk == 0 {
            return f64::NEG_INFINITY;
        }
        (t_bulk as f64).ln() + self.log_mean_exp()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_bulk_has_no_mass() {
        let g = GaussianScore {
            mu_s: 3.0,
            sigma2_s: 1.0,
        };
        assert_eq!(g.log_bulk_mass(0), f64::NEG_INFINITY);
        assert!((g.log_bulk_mass(1) - 3.5).abs() < 1e-12);
        assert!((g.log_bulk_mass(10) - (10f64.ln() + 3.5)).abs() < 1e-12);
    }

    #[test]
    fn score_moments_of_a_known_distribution() {
        // keys (1, 0) and (3, 0): mean (2, 0), variance 1 on the first axis.
        let mut m = KeyMoments::new(2);
        m.push(&[1.0, 0.0]).unwrap();
        m.push(&[3.0, 0.0]).unwrap();
        let g = GaussianScore::new(&[2.0, 5.0], &m, 0.5).unwrap();
        assert!((g.mu_s - 2.0).abs() < 1e-12);
        assert!((g.sigma2_s - 1.0).abs() < 1e-12);
    }
}
