//! Oracle: the exact local share from every score (paper eq. 2).
//!
//! `A_local = sum_{i in I} exp(s_i)`, `A_bulk = sum_{i not in I} exp(s_i)`; local iff
//! `A_local / (A_local + A_bulk) >= tau`, computed as `lse(s_I) - lse(s) >= ln tau`.

use crate::attention::scores;
use crate::criterion::decide_adaptive;
use crate::lse::{lse, lse2};
use crate::{CoreError, Decision, DecisionCost, HeadInput, LocalityCriterion, Result, Tau};

/// Exact adaptive criterion. It reads every bulk key, so it saves nothing: a tool of analysis
/// and the ground truth for the others.
#[derive(Clone, Copy, Debug)]
pub struct Oracle {
    tau: Tau,
}

impl Oracle {
    /// An oracle at threshold `tau`.
    pub fn new(tau: f64) -> Result<Self> {
        Ok(Oracle {
            tau: Tau::new(tau)?,
        })
    }
    /// The threshold.
    pub fn tau(&self) -> Tau {
        self.tau
    }
    /// `ln A_bulk`, exactly, from the bulk keys.
    pub fn log_bulk_mass(input: &HeadInput<'_>) -> Result<f64> {
        let d = input.query.len();
        if d == 0 || input.bulk_keys.len() != input.bulk_len * d {
            return Err(CoreError::DimensionMismatch {
                what: "bulk keys (T_bulk x d)",
                expected: input.bulk_len * d,
                found: input.bulk_keys.len(),
            });
        }
        // streamed a block of rows at a time (no allocation), blocks combined in the log domain
        let mut block = [0.0f32; 256];
        let mut log_mass = f64::NEG_INFINITY;
        for r0 in (0..input.bulk_len).step_by(block.len()) {
            let r1 = (r0 + block.len()).min(input.bulk_len);
            let s = &mut block[..r1 - r0];
            scores(
                input.query,
                input.bulk_keys.slice(r0, r1, d),
                input.scale,
                s,
            );
            log_mass = lse2(log_mass, lse(s));
        }
        Ok(log_mass)
    }
}

impl LocalityCriterion for Oracle {
    fn decide(&self, input: &HeadInput<'_>) -> Result<Decision> {
        decide_adaptive(self.tau, input, Self::log_bulk_mass)
    }
    fn tau(&self) -> Option<Tau> {
        Some(self.tau)
    }
    fn name(&self) -> &str {
        "oracle"
    }
    /// Every bulk score (its keys are attention's own reads, counted there).
    fn decision_cost(&self, d: usize, bulk_len: usize, _context: usize) -> DecisionCost {
        DecisionCost {
            flops: (2 * d * bulk_len) as u64,
            bytes: 0,
        }
    }
}
