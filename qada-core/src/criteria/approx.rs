//! QAdA: the local share with the bulk mass from the Gaussian score model (paper eq. 7,
//! Listing 1).
//!
//! `log_bulk = ln T_bulk + mu_s + sigma_s^2 / 2`, `num = lse(s_I)`,
//! `den = lse([num, log_bulk])`, local iff `num - den >= ln tau`. Cost `O(d^2)` beyond the
//! local scores, independent of `T`.

use qada_stats::GaussianScore;

use crate::criterion::decide_adaptive;
use crate::{Decision, HeadInput, LocalityCriterion, Result, Tau};

/// The query-adaptive approximate criterion.
#[derive(Clone, Copy, Debug)]
pub struct Approx {
    tau: Tau,
}

impl Approx {
    /// QAdA at threshold `tau`.
    pub fn new(tau: f64) -> Result<Self> {
        Ok(Approx {
            tau: Tau::new(tau)?,
        })
    }
    /// The threshold.
    pub fn tau(&self) -> Tau {
        self.tau
    }
    /// `log A_bulk_hat`; NaN when there are no moments to estimate from.
    pub fn log_bulk_mass(input: &HeadInput<'_>) -> Result<f64> {
        if input.bulk_moments.count() == 0 {
            return Ok(f64::NAN);
        }
        let g = GaussianScore::new(input.query, input.bulk_moments, input.scale as f64)?;
        Ok(g.log_bulk_mass(input.bulk_len))
    }
}

impl LocalityCriterion for Approx {
    fn decide(&self, input: &HeadInput<'_>) -> Result<Decision> {
        decide_adaptive(self.tau, input, Self::log_bulk_mass)
    }
    fn tau(&self) -> Option<Tau> {
        Some(self.tau)
    }
    fn name(&self) -> &str {
        "approx"
    }
    fn decision_flops(&self, d: usize, _bulk_len: usize) -> u64 {
        // q . mu (2d) and q Sigma q over the packed triangle (about d^2 + 2d).
        (d * d + 4 * d) as u64
    }
}
