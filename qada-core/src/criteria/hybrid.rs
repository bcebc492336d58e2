//! Hybrid: QAdA's estimate, checked by the page bound where QAdA says local with little
//! margin.
//!
//! With `ln A_bulk_hat = ln T_bulk + mu_s + sigma_s^2 / 2` (QAdA, paper eq. 7), the bound
//! `ln A_bulk_bound` of [`Bound`] and a margin `delta >= 0` in nats of bulk mass:
//!
//! - long when QAdA says long: `lse(s_I) - lse(lse(s_I), ln A_bulk_hat) < ln tau`;
//! - local when QAdA says local even with its bulk mass raised by the margin:
//!   `lse(s_I) - lse(lse(s_I), ln A_bulk_hat + delta) >= ln tau`, i.e. when a Gaussian
//!   underestimate of `A_bulk` by a factor up to `e^delta` would not change the label;
//! - otherwise local only when the bound says local.
//!
//! So a local label of the hybrid is one of QAdA's; with `delta = +inf` it is also the bound's
//! (never a head the oracle calls long), with `delta = 0` it is QAdA. Cost `O(d^2)`, plus
//! `O(T d / P)` where the bound is consulted.

use qada_stats::BulkSummaries;

use crate::criteria::approx::gaussian_test_flops;
use crate::criterion::decide_adaptive;
use crate::{
    Approx, Bound, CoreError, Decision, DecisionCost, HeadInput, LocalityCriterion, Result, Tau,
};

/// Margin in nats of bulk mass: QAdA alone decides local heads whose label survives an
/// underestimate of `A_bulk` by a factor `e` (2.7). The measured Gaussian errors
/// `|ln A_bulk - ln A_bulk_hat|` have medians 0.56 (Qwen2.5-0.5B) to 0.89 (SmolLM2-135M)
/// (docs/RESULTS.md, "Which of the paper's claims hold"), and the paper reports factors 2 to 5 (0.7 to 1.6 nats) on
/// Llama 3-8B: a margin of 1 covers the typical error, the bound checks the rest.
pub const DEFAULT_MARGIN: f64 = 1.0;

/// QAdA, with the page bound checking its close local calls.
#[derive(Clone, Copy, Debug)]
pub struct Hybrid {
    tau: Tau,
    margin: f64,
    bound: Bound,
}

impl Hybrid {
    /// The hybrid at threshold `tau`, with `margin` nats (`>= 0`, `+inf` allowed: then every
    /// local call of QAdA is checked) and the bound's pages of `page` keys.
    pub fn new(tau: f64, margin: f64, page: usize) -> Result<Self> {
        if margin.is_nan() || margin < 0.0 {
            return Err(CoreError::InvalidParameter {
                what: "the hybrid criterion's margin (nats of bulk mass)",
                expected: "at least 0 (or +inf)",
                found: margin,
            });
        }
        Ok(Hybrid {
            tau: Tau::new(tau)?,
            margin,
            bound: Bound::new(tau, page)?,
        })
    }
    /// The threshold.
    pub fn tau(&self) -> Tau {
        self.tau
    }
    /// The margin in nats of bulk mass.
    pub fn margin(&self) -> f64 {
        self.margin
    }
    /// Keys per page of the bound.
    pub fn page(&self) -> usize {
        self.bound.page()
    }
}

impl LocalityCriterion for Hybrid {
    /// The decision and the log local share of whichever decided: QAdA's, or the bound's.
    fn decide(&self, input: &HeadInput<'_>) -> Result<Decision> {
        let mut log_bulk_hat = f64::NAN;
        let approx = decide_adaptive(self.tau, input, |i| {
            log_bulk_hat = Approx::log_bulk_mass(i)?;
            Ok(log_bulk_hat)
        })?;
        if !approx.local || input.bulk_len == 0 {
            return Ok(approx);
        }
        let with_margin = decide_adaptive(self.tau, input, |_| Ok(log_bulk_hat + self.margin))?;
        if with_margin.local {
            return Ok(approx);
        }
        self.bound.decide(input)
    }
    fn tau(&self) -> Option<Tau> {
        Some(self.tau)
    }
    fn name(&self) -> &str {
        "hybrid"
    }
    /// QAdA's cost plus the bound's (its flops and its page bounds' bytes), which is paid
    /// only for the close calls: an upper bound.
    fn decision_cost(&self, d: usize, bulk_len: usize, context: usize) -> DecisionCost {
        let bound = self.bound.decision_cost(d, bulk_len, context);
        DecisionCost {
            flops: gaussian_test_flops(d) + bound.flops,
            bytes: bound.bytes,
        }
    }
    fn bulk_summaries(&self) -> BulkSummaries {
        self.bound.bulk_summaries()
    }
}
