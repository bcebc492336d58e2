//! QAdA: the local share with the bulk mass from the Gaussian score model (paper eq. 7,
//! Listing 1).
//!
//! `log_bulk = ln T_bulk + mu_s + sigma_s^2 / 2`, `num = lse(s_I)`,
//! `den = lse([num, log_bulk])`, local iff `num - den >= ln tau`. Cost `O(d^2)` beyond the
//! local scores, independent of `T`.

use qada_stats::GaussianScore;

use crate::criterion::{check_input, from_masses};
use crate::lse::lse;
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
        check_input(input)?;
        if input.bulk_len == 0 {
            return Ok(from_masses(self.tau, 0, 0.0, 0.0));
        }
        let log_bulk = Self::log_bulk_mass(input)?;
        Ok(from_masses(
            self.tau,
            input.bulk_len,
            lse(input.local_scores),
            log_bulk,
        ))
    }
    fn name(&self) -> &str {
        "approx"
    }
    fn decision_flops(&self, d: usize, _bulk_len: usize) -> u64 {
        // q . mu (2d) and q Sigma q over the packed triangle (about d^2 + 2d).
        (d * d + 4 * d) as u64
    }
}
