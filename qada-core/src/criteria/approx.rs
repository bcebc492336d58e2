//! QAdA: the local share with the bulk mass from the Gaussian score model (paper eq. 7,
//! Listing 1).
//!
//! `log_bulk = ln T_bulk + mu_s + sigma_s^2 / 2`, `num = lse(s_I)`,
//! `den = lse([num, log_bulk])`, local iff `num - den >= ln tau`. Cost `O(d^2)` beyond the
//! local scores, independent of `T`.

use qada_stats::{GaussianScore, KeyDistribution};

use crate::criterion::{decide_adaptive, decide_adaptive_group, shared_batch, GROUP_BATCH};
use crate::{Decision, DecisionCost, HeadInput, LocalityCriterion, Result, Tau};

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
        let mut out = [f64::NAN];
        Self::log_bulk_masses(std::slice::from_ref(input), &mut out)?;
        Ok(out[0])
    }

    /// [`Approx::log_bulk_mass`] of each head of a group: when they share one KV head's
    /// moments, its covariance is read once for the group ([`GaussianScore::batch`]); each value
    /// equals the head's alone, bit for bit.
    pub fn log_bulk_masses(inputs: &[HeadInput<'_>], out: &mut [f64]) -> Result<()> {
        let moments_of =
            |i: &HeadInput<'_>| Some(i.bulk_moments as *const dyn KeyDistribution as *const ());
        if !shared_batch(inputs, out, moments_of, Self::log_bulk_masses)? {
            return Ok(());
        }
        let Some(first) = inputs.first() else {
            return Ok(());
        };
        if first.bulk_moments.count() == 0 {
            out.fill(f64::NAN);
            return Ok(());
        }
        let mut queries: [&[f32]; GROUP_BATCH] = [&[]; GROUP_BATCH];
        for (q, input) in queries.iter_mut().zip(inputs) {
            *q = input.query;
        }
        let mut scores = [GaussianScore::ZERO; GROUP_BATCH];
        let scores = &mut scores[..inputs.len()];
        GaussianScore::batch(
            &queries[..inputs.len()],
            first.bulk_moments,
            first.scale as f64,
            scores,
        )?;
        for (o, g) in out.iter_mut().zip(scores.iter()) {
            *o = g.log_bulk_mass(first.bulk_len);
        }
        Ok(())
    }
}

impl LocalityCriterion for Approx {
    fn decide(&self, input: &HeadInput<'_>) -> Result<Decision> {
        decide_adaptive(self.tau, input, Self::log_bulk_mass)
    }
    fn decide_group(&self, inputs: &[HeadInput<'_>], out: &mut [Decision]) -> Result<bool> {
        decide_adaptive_group(self.tau, inputs, out, Self::log_bulk_masses)
    }
    fn tau(&self) -> Option<Tau> {
        Some(self.tau)
    }
    fn name(&self) -> &str {
        "approx"
    }
    fn decision_cost(&self, d: usize, _bulk_len: usize, _context: usize) -> DecisionCost {
        DecisionCost {
            flops: gaussian_test_flops(d),
            bytes: 0,
        }
    }
}

/// FLOPs of one Gaussian estimate of `ln A_bulk` for a head of dimension `d`: `q . mu` (2d)
/// and `q Sigma q` over the packed triangle (about d^2 + 2d). QAdA pays it once a decision,
/// the mixture once a cluster, the hybrid once before its bound.
pub(crate) fn gaussian_test_flops(d: usize) -> u64 {
    (d * d + 4 * d) as u64
}
