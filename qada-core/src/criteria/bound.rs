//! Bound: a head is local only when an upper bound of `A_bulk` says so (Quest's page bound).
//!
//! The bulk keys in pages of `P` rows, each page with its elementwise minimum `m` and maximum
//! `M` ([`PageBounds`]). For every key `k` of page `p`, `q . k <= sum_j max(q_j m_j, q_j M_j)`,
//! so with `u_p = scale * sum_j max(q_j m_j, q_j M_j)` and `n_p` keys in the page,
//!
//! `ln A_bulk <= ln A_bulk_bound = lse_p(ln n_p + u_p + e_p) + e_lse`,
//!
//! where `e_p` and `e_lse` cover the rounding of the f32 kernels the oracle computes with
//! (see [`Bound::log_bulk_mass`]). Local iff `lse(s_I) - lse(lse(s_I), ln A_bulk_bound) >= ln
//! tau`: since the bound is above the oracle's `ln A_bulk`, a head this criterion calls local
//! the oracle calls local too. Cost `O(T d / P)`.

use qada_stats::{BulkSummaries, PageBounds};

use crate::criterion::decide_adaptive;
use crate::lse::lse2;
use crate::{CoreError, Decision, DecisionCost, HeadInput, LocalityCriterion, Result, Tau};

/// Keys per page: 32 rows of `d = 64` f32 keys are 8 KiB, so the bound reads `2 / 32` of the
/// bulk's bytes (1/16), the ratio Quest uses with its pages of 16 f16 keys and f16 bounds.
pub const DEFAULT_PAGE: usize = 32;

/// Unit roundoff of f32 doubled (`2^-23`): per term, the rounding of one f32 product and sum
/// of the kernels' dot products (which may run in any order, with or without FMA).
pub(crate) const F32_ROUNDING: f64 = f32::EPSILON as f64;

/// Relative error of [`crate::attention::fast_exp`], with which the oracle sums `exp(s - m)`.
const FAST_EXP_ERROR: f64 = 3e-7;

/// The conservative adaptive criterion: the bulk mass from page bounds, never below the
/// exact one.
#[derive(Clone, Copy, Debug)]
pub struct Bound {
    tau: Tau,
    page: usize,
}

impl Bound {
    /// The bound at threshold `tau` with pages of `page` keys (at least 1).
    pub fn new(tau: f64, page: usize) -> Result<Self> {
        if page == 0 {
            return Err(CoreError::InvalidParameter {
                what: "the bound criterion's page size (keys per page)",
                expected: "at least 1",
                found: 0.0,
            });
        }
        Ok(Bound {
            tau: Tau::new(tau)?,
            page,
        })
    }
    /// The threshold.
    pub fn tau(&self) -> Tau {
        self.tau
    }
    /// Keys per page.
    pub fn page(&self) -> usize {
        self.page
    }

    /// `ln A_bulk_bound`, an upper bound of the oracle's `ln A_bulk` (as the f32 kernels
    /// compute it) from the page bounds in `input.bulk_pages`.
    ///
    /// The slack: a kernel's score `fl(scale * q . k)` over `d` terms is within
    /// `(d + 2) 2^-24 scale sum_j |q_j k_j|` of the exact score, whatever the summation order
    /// (f16 and q8 rows are converted exactly, or summed per block of 32 with a rounding more:
    /// still within it), so `e_p = (d + 2) 2^-23 scale sum_j max(|q_j m_j|, |q_j M_j|)` covers
    /// every key of page `p` with a factor 2 to spare. The oracle's log-sum-exp of `n` scores
    /// rounds each `s - m` to f32 (a relative `2^-24`, which raises `exp(s - m)` by at most
    /// `2^-24 / e` absolute) and evaluates `exp` within a relative `3e-7`: its sum is within a
    /// relative `3e-7 + n 2^-24 / e` of the exact one, and `e_lse` is the log of one plus that,
    /// with `n = T_bulk` (0.02 nats at a million keys). A bound that reaches the f32 range is
    /// `+inf` (a kernel's score, or a product or sum in it, may overflow there). A negative
    /// scale bounds `|scale| (-q) . k`.
    ///
    /// # Errors
    /// [`CoreError::MissingBulkSummary`] without page bounds; [`CoreError::DimensionMismatch`]
    /// when they hold another number of keys than `T_bulk`, or keys of another length than the
    /// query.
    pub fn log_bulk_mass(input: &HeadInput<'_>) -> Result<f64> {
        let pages = checked_pages(input, "bound")?;
        let d = input.query.len();
        // scale * q . k = |scale| * (sign q) . k: the bound of the signed query
        let (sign, scale) = (input.scale.signum() as f64, (input.scale as f64).abs());
        let rounding = (d as f64 + 2.0) * F32_ROUNDING * scale;
        let limit = f32::MAX as f64 / 2.0;
        let mut log_mass = f64::NEG_INFINITY;
        for p in 0..pages.n_pages() {
            let (u, magnitude) =
                score_bound(input.query, sign, pages.page_min(p), pages.page_max(p));
            if magnitude.max(magnitude * scale) >= limit {
                return Ok(f64::INFINITY);
            }
            let x = (pages.page_len(p) as f64).ln() + scale * u + rounding * magnitude;
            log_mass = lse2(log_mass, x);
        }
        let n = input.bulk_len as f64;
        let lse_error = FAST_EXP_ERROR + n * 2f64.powi(-24) / std::f64::consts::E;
        let bound = log_mass + lse_error.ln_1p();
        Ok(if bound >= limit { f64::INFINITY } else { bound })
    }
}

/// The page bounds of `input`, checked against the query and `T_bulk`; `criterion` names who
/// asks, for the error.
pub(crate) fn checked_pages<'a>(
    input: &HeadInput<'a>,
    criterion: &'static str,
) -> Result<&'a PageBounds> {
    let pages = input.bulk_pages.ok_or(CoreError::MissingBulkSummary {
        criterion,
        summary: "page bounds",
    })?;
    if pages.dim() != input.query.len() {
        return Err(CoreError::DimensionMismatch {
            what: "page bounds: key length vs query length",
            expected: input.query.len(),
            found: pages.dim(),
        });
    }
    if pages.n_rows() != input.bulk_len {
        return Err(CoreError::DimensionMismatch {
            what: "page bounds: keys held vs T_bulk",
            expected: input.bulk_len,
            found: pages.n_rows(),
        });
    }
    Ok(pages)
}

/// `(sum_j max(q'_j m_j, q'_j M_j), sum_j max(|q_j m_j|, |q_j M_j|))` in f64 with
/// `q' = sign q` (the products are exact): the page's score bound before the scale, and the
/// magnitude its rounding is relative to. A NaN product makes the bound NaN.
#[inline]
fn score_bound(q: &[f32], sign: f64, lo: &[f32], hi: &[f32]) -> (f64, f64) {
    let (mut u, mut magnitude) = (0.0f64, 0.0f64);
    for ((&qj, &l), &h) in q.iter().zip(lo).zip(hi) {
        let qj = sign * qj as f64;
        let (a, b) = (qj * l as f64, qj * h as f64);
        u += if a > b || a.is_nan() { a } else { b };
        magnitude += a.abs().max(b.abs());
    }
    (u, magnitude)
}

impl LocalityCriterion for Bound {
    fn decide(&self, input: &HeadInput<'_>) -> Result<Decision> {
        decide_adaptive(self.tau, input, Self::log_bulk_mass)
    }
    fn tau(&self) -> Option<Tau> {
        Some(self.tau)
    }
    fn name(&self) -> &str {
        "bound"
    }
    /// Per page and coordinate: two products, a maximum and a sum (plus the slack's
    /// magnitude from the same products); it reads the page bounds of the bulk, a minimum and
    /// a maximum (f32) per page and coordinate.
    fn decision_cost(&self, d: usize, bulk_len: usize, _context: usize) -> DecisionCost {
        let pages = bulk_len.div_ceil(self.page);
        DecisionCost {
            flops: (4 * d * pages) as u64,
            bytes: (2 * 4 * d * pages) as u64,
        }
    }
    fn bulk_summaries(&self) -> BulkSummaries {
        BulkSummaries {
            page: Some(self.page),
            clusters: None,
            channel_keys: false,
            from_context: 0,
        }
    }
}
