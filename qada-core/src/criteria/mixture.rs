//! Mixture: QAdA with the bulk keys in `k` clusters, one Gaussian each.
//!
//! The bulk keys in clusters `c` of `n_c` keys with moments `(mu_c, Sigma_c)` (k-means on the
//! prefill bulk, then each key that leaves the window joins its nearest cluster:
//! [`ClusterMoments`]). Each cluster's Gaussian score model (paper
//! eq. 6) gives `mu_{s,c} = scale q . mu_c` and `sigma_{s,c}^2 = scale^2 q Sigma_c q^T`, and
//!
//! `ln A_bulk_hat = lse_c(ln n_c' + mu_{s,c} + sigma_{s,c}^2 / 2)`,
//!
//! with `n_c' = n_c T_bulk / sum_c n_c` (the counts scaled to the bulk). Local iff
//! `lse(s_I) - lse(lse(s_I), ln A_bulk_hat) >= ln tau`. With `k = 1` it is QAdA. Cost
//! `O(k d^2)`.

use qada_stats::{BulkSummaries, ClusterMoments, GaussianScore};

use crate::criteria::approx::gaussian_test_flops;
use crate::criterion::{decide_adaptive, decide_adaptive_group, shared_batch, GROUP_BATCH};
use crate::lse::lse2;
use crate::{CoreError, Decision, DecisionCost, HeadInput, LocalityCriterion, Result, Tau};

/// Clusters: four Gaussians cost what one does at `d / 2` and follow a bulk that drifts
/// through a few topics of a long prompt; k-means on the prefill bulk stays cheap
/// (`O(T k d)` per iteration).
pub const DEFAULT_CLUSTERS: usize = 4;

/// The mixture-of-Gaussians criterion.
#[derive(Clone, Copy, Debug)]
pub struct Mixture {
    tau: Tau,
    k: usize,
}

impl Mixture {
    /// The mixture at threshold `tau` with at most `k` clusters (at least 1).
    pub fn new(tau: f64, k: usize) -> Result<Self> {
        if k == 0 {
            return Err(CoreError::InvalidParameter {
                what: "the mixture criterion's cluster count",
                expected: "at least 1",
                found: 0.0,
            });
        }
        Ok(Mixture {
            tau: Tau::new(tau)?,
            k,
        })
    }
    /// The threshold.
    pub fn tau(&self) -> Tau {
        self.tau
    }
    /// Clusters asked for.
    pub fn k(&self) -> usize {
        self.k
    }

    /// `ln A_bulk_hat = lse_c(ln n_c' + mu_{s,c} + sigma_{s,c}^2 / 2)` from
    /// `input.bulk_clusters`; NaN when the clusters hold no key (as QAdA without moments).
    ///
    /// # Errors
    /// [`CoreError::MissingBulkSummary`] without cluster moments;
    /// [`CoreError::DimensionMismatch`] when their keys have another length than the query.
    pub fn log_bulk_mass(input: &HeadInput<'_>) -> Result<f64> {
        let mut out = [f64::NAN];
        Self::log_bulk_masses(std::slice::from_ref(input), &mut out)?;
        Ok(out[0])
    }

    /// [`Mixture::log_bulk_mass`] of each head of a group: when they share one KV head's
    /// clusters, each cluster's covariance is read once for the group
    /// ([`GaussianScore::batch`]); each value equals the head's alone, bit for bit.
    pub fn log_bulk_masses(inputs: &[HeadInput<'_>], out: &mut [f64]) -> Result<()> {
        let clusters_of = |i: &HeadInput<'_>| {
            i.bulk_clusters
                .map(|c| c as *const ClusterMoments as *const ())
        };
        if !shared_batch(inputs, out, clusters_of, Self::log_bulk_masses)? {
            return Ok(());
        }
        let Some(first) = inputs.first() else {
            return Ok(());
        };
        let clusters = first.bulk_clusters.ok_or(CoreError::MissingBulkSummary {
            criterion: "mixture",
            summary: "cluster moments",
        })?;
        let mut queries: [&[f32]; GROUP_BATCH] = [&[]; GROUP_BATCH];
        for (q, input) in queries.iter_mut().zip(inputs) {
            if clusters.dim() != input.query.len() {
                return Err(CoreError::DimensionMismatch {
                    what: "cluster moments: key length vs query length",
                    expected: input.query.len(),
                    found: clusters.dim(),
                });
            }
            *q = input.query;
        }
        let total = clusters.count();
        if total == 0 {
            out.fill(f64::NAN);
            return Ok(());
        }
        // ln(T_bulk / sum_c n_c): 0 when the clusters hold the bulk, as in a cache
        let rescale = if total == first.bulk_len as u64 {
            0.0
        } else {
            (first.bulk_len as f64).ln() - (total as f64).ln()
        };
        let queries = &queries[..inputs.len()];
        let mut scores = [GaussianScore::ZERO; GROUP_BATCH];
        let scores = &mut scores[..inputs.len()];
        out.fill(f64::NEG_INFINITY);
        for c in clusters.clusters() {
            GaussianScore::batch(queries, c, first.scale as f64, scores)?;
            let n = usize::try_from(c.count()).unwrap_or(usize::MAX);
            for (o, g) in out.iter_mut().zip(scores.iter()) {
                *o = lse2(*o, g.log_bulk_mass(n) + rescale);
            }
        }
        Ok(())
    }
}

impl LocalityCriterion for Mixture {
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
        "mixture"
    }
    fn decision_cost(&self, d: usize, _bulk_len: usize, _context: usize) -> DecisionCost {
        DecisionCost {
            flops: self.k as u64 * gaussian_test_flops(d),
            bytes: 0,
        }
    }
    fn bulk_summaries(&self) -> BulkSummaries {
        BulkSummaries {
            page: None,
            clusters: Some(self.k),
            channel_keys: false,
            from_context: 0,
        }
    }
}
