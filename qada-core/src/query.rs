//! One query head, decided from arrays: the entry point for researchers who bring their own
//! keys, with no model and no cache.
//!
//! A [`HeadQuery`] holds a query `q` (length `d`), the local keys `K_I` (`|I| x d`: sink, then
//! window), the bulk (its keys `T_bulk x d`, its [`KeyMoments`], or both) and the attention
//! scale (default `1 / sqrt(d)`). [`decide_query`] runs any [`LocalityCriterion`] on it;
//! [`compare_query`] runs the oracle (paper eq. 2) and QAdA (eq. 7) at one `tau` and returns
//! both log local shares and the Gaussian error `ln A_bulk_hat - ln A_bulk`.
//!
//! Views in standard (row-major, contiguous) layout are borrowed as slices without a copy;
//! others are copied once into an owned standard-layout array. Shapes are checked:
//! [`CoreError::DimensionMismatch`] names the array and both sizes.

use std::borrow::Cow;

use ndarray::{ArrayView1, ArrayView2, CowArray, Ix1, Ix2};
use qada_stats::{ClusterMoments, KeyMoments, PageBounds, Rows};

use crate::attention::scores;
use crate::lse::{log_local_share, lse};
use crate::selection::{GroupRead, PageSelection};
use crate::{Approx, CoreError, Decision, HeadInput, LocalityCriterion, Oracle, Result};

/// The bulk of one head: the positions between sink and window.
#[derive(Clone, Copy, Debug)]
pub enum Bulk<'a> {
    /// The bulk keys, `T_bulk x d` (their moments are computed when a criterion needs them).
    Keys(ArrayView2<'a, f32>),
    /// Only the moments of the bulk keys (`T_bulk` is their count): enough for QAdA, not for
    /// the oracle.
    Moments(&'a KeyMoments),
    /// Both: the keys for the oracle and the moments, e.g. from calibration, for QAdA.
    KeysAndMoments {
        /// The bulk keys, `T_bulk x d`.
        keys: ArrayView2<'a, f32>,
        /// Moments of the bulk keys (or of keys like them); `T_bulk` is `keys.nrows()`.
        moments: &'a KeyMoments,
    },
}

/// One query head at one step, as arrays.
#[derive(Clone, Copy, Debug)]
pub struct HeadQuery<'a> {
    /// The (rotated) query `q`, length `d`.
    pub query: ArrayView1<'a, f32>,
    /// The local keys `K_I`, `|I| x d`: the sink, then the window.
    pub local_keys: ArrayView2<'a, f32>,
    /// The bulk: keys, moments or both.
    pub bulk: Bulk<'a>,
    /// Attention scale; `None` means `1 / sqrt(d)`.
    pub scale: Option<f32>,
}

/// A [`HeadQuery`] checked and laid out as slices once, ready for any number of criteria and
/// thresholds.
#[derive(Debug)]
pub struct PreparedQuery<'a> {
    query: CowArray<'a, f32, Ix1>,
    bulk_keys: Option<CowArray<'a, f32, Ix2>>,
    moments: Cow<'a, KeyMoments>,
    local_scores: Vec<f32>,
    bulk_len: usize,
    scale: f32,
}

/// A contiguous slice of a standard-layout array (which [`CowArray`] from
/// `as_standard_layout` always is).
fn slice_of<'b, D: ndarray::Dimension>(a: &'b CowArray<'_, f32, D>) -> Result<&'b [f32]> {
    a.as_slice().ok_or(CoreError::DimensionMismatch {
        what: "array in standard layout (elements)",
        expected: a.len(),
        found: 0,
    })
}

/// The view itself when it is in standard layout (no copy), else an owned standard-layout copy.
fn standard<'a, D: ndarray::Dimension>(v: ndarray::ArrayView<'a, f32, D>) -> CowArray<'a, f32, D> {
    if v.is_standard_layout() {
        CowArray::from(v)
    } else {
        CowArray::from(v.as_standard_layout().into_owned())
    }
}

fn check_cols(what: &'static str, keys: &ArrayView2<'_, f32>, d: usize) -> Result<()> {
    if keys.ncols() != d {
        return Err(CoreError::DimensionMismatch {
            what,
            expected: d,
            found: keys.ncols(),
        });
    }
    Ok(())
}

impl<'a> PreparedQuery<'a> {
    /// Check the shapes (`d > 0`; every key array has `d` columns; moments of dimension `d`),
    /// lay the arrays out as slices, compute the local scores `s_I = scale K_I q` and, for
    /// [`Bulk::Keys`], the moments of the bulk keys.
    pub fn new(h: &HeadQuery<'a>) -> Result<Self> {
        let d = h.query.len();
        if d == 0 {
            return Err(CoreError::DimensionMismatch {
                what: "query length d (must be positive)",
                expected: 1,
                found: 0,
            });
        }
        check_cols("local keys (|I| x d): columns", &h.local_keys, d)?;
        let scale = h.scale.unwrap_or(1.0 / (d as f32).sqrt());
        let query = standard(h.query);
        let local = standard(h.local_keys);
        let mut local_scores = vec![0.0; h.local_keys.nrows()];
        scores(
            slice_of(&query)?,
            Rows::F32(slice_of(&local)?),
            scale,
            &mut local_scores,
        );
        let check_moments = |m: &KeyMoments| -> Result<()> {
            if m.dim() != d {
                return Err(CoreError::DimensionMismatch {
                    what: "bulk moments: dimension",
                    expected: d,
                    found: m.dim(),
                });
            }
            Ok(())
        };
        let (bulk_keys, moments) = match h.bulk {
            Bulk::Keys(k) => {
                check_cols("bulk keys (T_bulk x d): columns", &k, d)?;
                let k = standard(k);
                let m = KeyMoments::from_rows(d, slice_of(&k)?)?;
                (Some(k), Cow::Owned(m))
            }
            Bulk::Moments(m) => {
                check_moments(m)?;
                (None, Cow::Borrowed(m))
            }
            Bulk::KeysAndMoments { keys, moments } => {
                check_cols("bulk keys (T_bulk x d): columns", &keys, d)?;
                check_moments(moments)?;
                (Some(standard(keys)), Cow::Borrowed(moments))
            }
        };
        let bulk_len = match &bulk_keys {
            Some(k) => k.nrows(),
            None => usize::try_from(moments.count()).unwrap_or(usize::MAX),
        };
        Ok(PreparedQuery {
            query,
            bulk_keys,
            moments,
            local_scores,
            bulk_len,
            scale,
        })
    }

    /// What a criterion sees: the query, the local scores, `T_bulk`, the moments and (when
    /// given) the bulk keys. Without bulk keys, `bulk_keys` is empty and the oracle says so.
    pub fn input(&self) -> HeadInput<'_> {
        HeadInput {
            layer: 0,
            head: 0,
            query: self.query.as_slice().unwrap_or(&[]),
            scale: self.scale,
            local_scores: &self.local_scores,
            bulk_len: self.bulk_len,
            bulk_moments: &*self.moments,
            bulk_keys: Rows::F32(
                self.bulk_keys
                    .as_ref()
                    .and_then(|k| k.as_slice())
                    .unwrap_or(&[]),
            ),
            bulk_pages: None,
            bulk_clusters: None,
        }
    }

    /// The local scores `s_I`.
    pub fn local_scores(&self) -> &[f32] {
        &self.local_scores
    }

    /// The moments of the bulk (given, or computed from the bulk keys).
    pub fn moments(&self) -> &KeyMoments {
        &self.moments
    }

    /// `criterion`'s decision. The page bounds and cluster moments it asks for
    /// ([`LocalityCriterion::bulk_summaries`]) are made here from the bulk keys, when given.
    pub fn decide<C: LocalityCriterion + ?Sized>(&self, criterion: &C) -> Result<Decision> {
        self.decide_with(criterion, &self.summaries_for(criterion)?)
    }

    /// The page bounds and cluster moments `criterion` asks for, made from the bulk keys (none
    /// without them). Queries that share a bulk (the heads of a GQA group) can share them:
    /// see [`PreparedQuery::decide_with`].
    pub fn summaries_for<C: LocalityCriterion + ?Sized>(
        &self,
        criterion: &C,
    ) -> Result<BulkSummaryData> {
        let want = criterion.bulk_summaries();
        let d = self.query.len();
        let keys = self.bulk_keys.as_ref().and_then(|k| k.as_slice());
        let pages = match (want.page, keys) {
            (Some(page), Some(k)) => {
                let mut b = PageBounds::new(d, page)?;
                b.push_rows_of(Rows::F32(k))?;
                Some(b)
            }
            _ => None,
        };
        let clusters = match (want.clusters, keys) {
            (Some(n), Some(k)) => {
                let mut c = ClusterMoments::new(d, n)?;
                c.fit(Rows::F32(k))?;
                Some(c)
            }
            _ => None,
        };
        Ok(BulkSummaryData { pages, clusters })
    }

    /// `criterion`'s decision with the bulk's summaries given (made by
    /// [`PreparedQuery::summaries_for`] on a query with the same bulk keys).
    pub fn decide_with<C: LocalityCriterion + ?Sized>(
        &self,
        criterion: &C,
        summaries: &BulkSummaryData,
    ) -> Result<Decision> {
        let mut input = self.input();
        input.bulk_pages = summaries.pages.as_ref();
        input.bulk_clusters = summaries.clusters.as_ref();
        criterion.decide(&input)
    }

    /// `criterion`'s decisions for `heads` that share one bulk (the query heads of a GQA
    /// group, each prepared with the same bulk keys), and what the group reads of its bulk
    /// ([`LocalityCriterion::select_group`]): for a selecting criterion (pages, certified,
    /// quest) the pages of `selection`, each with the heads that read it.
    ///
    /// # Errors
    /// [`CoreError::DimensionMismatch`] when `out` has another length than `heads`, or the
    /// heads' bulks differ in length; the criterion's own errors.
    pub fn select_with<C: LocalityCriterion + ?Sized>(
        heads: &[PreparedQuery],
        criterion: &C,
        summaries: &BulkSummaryData,
        out: &mut [Decision],
        selection: &mut PageSelection,
    ) -> Result<GroupRead> {
        if out.len() != heads.len() {
            return Err(CoreError::DimensionMismatch {
                what: "decisions of a group",
                expected: heads.len(),
                found: out.len(),
            });
        }
        if let Some(h) = heads.iter().find(|h| h.bulk_len != heads[0].bulk_len) {
            return Err(CoreError::DimensionMismatch {
                what: "bulk rows of the heads of one group",
                expected: heads[0].bulk_len,
                found: h.bulk_len,
            });
        }
        let inputs: Vec<HeadInput<'_>> = heads
            .iter()
            .map(|h| {
                let mut input = h.input();
                input.bulk_pages = summaries.pages.as_ref();
                input.bulk_clusters = summaries.clusters.as_ref();
                input
            })
            .collect();
        criterion.select_group(&inputs, out, selection)
    }

    /// The oracle and QAdA at threshold `tau`, with the masses each computed.
    ///
    /// # Errors
    /// [`CoreError::MissingBulkKeys`] when the bulk came as moments only (the oracle reads
    /// every key); [`CoreError::InvalidTau`] unless `0 < tau <= 1`.
    pub fn compare(&self, tau: f64) -> Result<Comparison> {
        if self.bulk_keys.is_none() {
            return Err(CoreError::MissingBulkKeys);
        }
        let input = self.input();
        let (oracle, approx) = (Oracle::new(tau)?, Approx::new(tau)?);
        Ok(Comparison {
            oracle: oracle.decide(&input)?,
            approx: approx.decide(&input)?,
            log_local: lse(&self.local_scores),
            log_bulk: if self.bulk_len == 0 {
                f64::NEG_INFINITY
            } else {
                Oracle::log_bulk_mass(&input)?
            },
            log_bulk_hat: if self.bulk_len == 0 {
                f64::NEG_INFINITY
            } else {
                Approx::log_bulk_mass(&input)?
            },
        })
    }
}

/// Summaries of the bulk keys a criterion reads besides their moments (see
/// [`LocalityCriterion::bulk_summaries`]), owned.
#[derive(Clone, Debug, Default)]
pub struct BulkSummaryData {
    /// Page bounds (bound, hybrid).
    pub pages: Option<PageBounds>,
    /// Cluster moments (mixture).
    pub clusters: Option<ClusterMoments>,
}

/// The oracle's and QAdA's view of one head at one `tau`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Comparison {
    /// The oracle's decision, with the exact log local share.
    pub oracle: Decision,
    /// QAdA's decision, with the estimated log local share.
    pub approx: Decision,
    /// `ln A_local = lse(s_I)`.
    pub log_local: f64,
    /// `ln A_bulk`, exact (`-inf` without a bulk).
    pub log_bulk: f64,
    /// `ln A_bulk_hat = ln T_bulk + mu_s + sigma_s^2 / 2` (`-inf` without a bulk, NaN
    /// without moments).
    pub log_bulk_hat: f64,
}

impl Comparison {
    /// The Gaussian error `ln A_bulk_hat - ln A_bulk` (positive: QAdA overestimates the bulk).
    pub fn gaussian_error(&self) -> f64 {
        self.log_bulk_hat - self.log_bulk
    }
    /// The exact log local share `ln(A_local / (A_local + A_bulk))`.
    pub fn oracle_share(&self) -> f64 {
        log_local_share(self.log_local, self.log_bulk)
    }
    /// QAdA's log local share `ln(A_local / (A_local + A_bulk_hat))`.
    pub fn approx_share(&self) -> f64 {
        log_local_share(self.log_local, self.log_bulk_hat)
    }
    /// True when both label the head alike.
    pub fn agree(&self) -> bool {
        self.oracle.local == self.approx.local
    }
}

/// `criterion`'s decision for one query head given as arrays (see [`HeadQuery`]).
pub fn decide_query<C: LocalityCriterion + ?Sized>(
    criterion: &C,
    head: &HeadQuery<'_>,
) -> Result<Decision> {
    PreparedQuery::new(head)?.decide(criterion)
}

/// The oracle's exact and QAdA's estimated log local share of one query head at `tau`, and
/// the Gaussian error between them (see [`Comparison`]). Needs the bulk keys.
pub fn compare_query(tau: f64, head: &HeadQuery<'_>) -> Result<Comparison> {
    PreparedQuery::new(head)?.compare(tau)
}
