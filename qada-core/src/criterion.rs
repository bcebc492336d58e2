//! The locality criterion: is this head local for this query?

use qada_stats::{BulkSummaries, ClusterMoments, KeyDistribution, PageBounds, Rows};

use crate::selection::{GroupRead, PageSelection};
use crate::{CoreError, DecisionCost, Result, Reuse};

/// A threshold `tau` in (0, 1]: a head is local when its local share of the softmax mass,
/// `A_local / (A_local + A_bulk)`, is at least `tau`. At `tau = 1` a head is local only where
/// the bulk's mass is zero (an empty bulk, or one whose mass underflows f64), and page
/// selection leaves nothing out: the dense result, computed the criterion's way.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tau(f64);

impl Tau {
    /// `tau`, checked to lie in (0, 1].
    pub fn new(tau: f64) -> Result<Self> {
        if tau > 0.0 && tau <= 1.0 {
            Ok(Tau(tau))
        } else {
            Err(CoreError::InvalidTau(tau))
        }
    }
    /// The value.
    pub fn get(self) -> f64 {
        self.0
    }
    /// `ln tau`, the threshold in the log domain.
    pub fn ln(self) -> f64 {
        self.0.ln()
    }
    /// Local iff `log_local_share >= ln tau`. NaN is never local.
    pub fn is_local(self, log_local_share: f64) -> bool {
        log_local_share >= self.ln()
    }
}

/// What a criterion sees for one query head of one layer at one decoding step.
#[derive(Clone, Copy, Debug)]
pub struct HeadInput<'a> {
    /// Layer index.
    pub layer: usize,
    /// Query head index within the layer.
    pub head: usize,
    /// The rotated query, length `d`.
    pub query: &'a [f32],
    /// Attention scale, usually `1 / sqrt(d)`.
    pub scale: f32,
    /// Scores `s_i = scale * q . k_i` over the local set `I` (sink, then window), already
    /// computed.
    pub local_scores: &'a [f32],
    /// `T_bulk`, the number of positions outside `I`.
    pub bulk_len: usize,
    /// Moments of the bulk keys of this head's KV head (option 1 or 2), full or factored.
    pub bulk_moments: &'a dyn KeyDistribution,
    /// The bulk keys themselves, `T_bulk x d`, for the criteria that need every score.
    pub bulk_keys: Rows<'a>,
    /// Page bounds of the bulk keys, when the criterion asked for them
    /// ([`LocalityCriterion::bulk_summaries`]) and the cache keeps them.
    pub bulk_pages: Option<&'a PageBounds>,
    /// Cluster moments of the bulk keys, when the criterion asked for them and the cache keeps
    /// them.
    pub bulk_clusters: Option<&'a ClusterMoments>,
}

/// One decision.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decision {
    /// True: attend to the local window only.
    pub local: bool,
    /// `ln(A_local / (A_local + A_bulk))` as the criterion computed it (exact for the oracle,
    /// estimated for QAdA); `None` for criteria that compute no mass. NaN means the mass could
    /// not be estimated (non-finite scores or moments, or no moments): the head is then
    /// long-context.
    pub log_local_share: Option<f64>,
}

impl Decision {
    /// A long-context decision that computed nothing.
    pub const LONG: Decision = Decision {
        local: false,
        log_local_share: None,
    };
    /// A local decision that computed nothing.
    pub const LOCAL: Decision = Decision {
        local: true,
        log_local_share: None,
    };
    /// True when the criterion tried to compute a share and got NaN or infinity from it.
    pub fn is_nonfinite(&self) -> bool {
        self.log_local_share.is_some_and(|s| s.is_nan())
    }
}

/// Decides, per query head and per decoding step, between local and long-context attention.
///
/// One required method; the name, the cost and the batch helpers are defaulted. Implemented
/// for `&C`, `Box<C>` and `Arc<C>` (also for unsized `C`, so `Box<dyn LocalityCriterion>`),
/// each forwarding every method, so callers can pass any of them and overrides still count.
pub trait LocalityCriterion: Send + Sync {
    /// Decide for one head. With no bulk (`bulk_len == 0`) every criterion says local.
    fn decide(&self, input: &HeadInput<'_>) -> Result<Decision>;

    /// Short name for reports (`oracle`, `approx`, ...); `custom` unless overridden.
    fn name(&self) -> &str {
        "custom"
    }

    /// What one decision costs beyond the local scores (which attention needs anyway), for a
    /// head dimension `d`, a bulk of `bulk_len` keys and a context of `context` keys (sink,
    /// window and bulk): floating-point operations per query head, and bytes read per KV head
    /// (page bounds, say), which count in the K/V bytes a step reads. Nothing unless
    /// overridden. The context matters where the criterion changes with it
    /// ([`crate::DenseBelow`] decides nothing below its threshold, so costs nothing there).
    fn decision_cost(&self, _d: usize, _bulk_len: usize, _context: usize) -> DecisionCost {
        DecisionCost::default()
    }

    /// What the cache must keep about the bulk for this criterion besides its moments (page
    /// bounds, cluster moments); none unless overridden.
    fn bulk_summaries(&self) -> BulkSummaries {
        BulkSummaries::default()
    }

    /// The threshold on the local share, for criteria that have one (group decisions by mass
    /// need it); `None` unless overridden.
    fn tau(&self) -> Option<Tau> {
        None
    }

    /// Decide for the query heads of one GQA group; returns true when any of them is
    /// long-context (then the group's bulk keys and values must be read).
    fn decide_group(&self, inputs: &[HeadInput<'_>], out: &mut [Decision]) -> Result<bool> {
        if inputs.len() != out.len() {
            return Err(CoreError::DimensionMismatch {
                what: "decisions of a group",
                expected: inputs.len(),
                found: out.len(),
            });
        }
        let mut any_long = false;
        for (input, o) in inputs.iter().zip(out.iter_mut()) {
            *o = self.decide(input)?;
            any_long |= !o.local;
        }
        Ok(any_long)
    }

    /// After [`LocalityCriterion::decide_group`] called some of a group's heads long-context:
    /// which pages of the bulk they read ([`GroupRead::Selected`], pages written to
    /// `selection` with the heads of each) or all of it ([`GroupRead::Full`], the default).
    /// A selecting criterion may also mark heads that got no page local in `out`.
    fn choose_pages(
        &self,
        _inputs: &[HeadInput<'_>],
        _out: &mut [Decision],
        _selection: &mut PageSelection,
    ) -> Result<GroupRead> {
        Ok(GroupRead::Full)
    }

    /// When a group's page choice may be read again at later steps ([`crate::ReusePages`]);
    /// `None` (choose at every step) unless overridden. Wrappers forward it.
    fn reuse(&self) -> Option<Reuse> {
        None
    }

    /// Decide for the query heads of one GQA group and say what the group reads of its bulk:
    /// nothing ([`GroupRead::Local`]) when every head is local, else what
    /// [`LocalityCriterion::choose_pages`] chooses. `selection` is emptied first.
    fn select_group(
        &self,
        inputs: &[HeadInput<'_>],
        out: &mut [Decision],
        selection: &mut PageSelection,
    ) -> Result<GroupRead> {
        selection.clear(0);
        if !self.decide_group(inputs, out)? {
            return Ok(GroupRead::Local);
        }
        self.choose_pages(inputs, out, selection)
    }
}

/// Forward every method to the criterion behind a pointer, so that an override (of
/// `decide_group`, say) is honoured through `&C`, `Box<C>` and `Arc<C>` (and so through
/// `Box<dyn LocalityCriterion>` and `Arc<dyn LocalityCriterion>`).
macro_rules! forward_criterion {
    ($($ptr:ty),*) => {$(
        impl<C: LocalityCriterion + ?Sized> LocalityCriterion for $ptr {
            fn decide(&self, input: &HeadInput<'_>) -> Result<Decision> {
                (**self).decide(input)
            }
            fn name(&self) -> &str {
                (**self).name()
            }
            fn bulk_summaries(&self) -> BulkSummaries {
                (**self).bulk_summaries()
            }
            fn decision_cost(&self, d: usize, bulk_len: usize, context: usize) -> DecisionCost {
                (**self).decision_cost(d, bulk_len, context)
            }
            fn tau(&self) -> Option<Tau> {
                (**self).tau()
            }
            fn decide_group(
                &self,
                inputs: &[HeadInput<'_>],
                out: &mut [Decision],
            ) -> Result<bool> {
                (**self).decide_group(inputs, out)
            }
            fn choose_pages(
                &self,
                inputs: &[HeadInput<'_>],
                out: &mut [Decision],
                selection: &mut PageSelection,
            ) -> Result<GroupRead> {
                (**self).choose_pages(inputs, out, selection)
            }
            fn select_group(
                &self,
                inputs: &[HeadInput<'_>],
                out: &mut [Decision],
                selection: &mut PageSelection,
            ) -> Result<GroupRead> {
                (**self).select_group(inputs, out, selection)
            }
            fn reuse(&self) -> Option<Reuse> {
                (**self).reuse()
            }
        }
    )*};
}

forward_criterion!(&C, Box<C>, std::sync::Arc<C>);

/// Check the query length against the moments; shared by the criteria.
fn check_input(input: &HeadInput<'_>) -> Result<()> {
    let d = input.query.len();
    if input.bulk_moments.dim() != d {
        return Err(CoreError::DimensionMismatch {
            what: "query vs bulk moments",
            expected: input.bulk_moments.dim(),
            found: d,
        });
    }
    Ok(())
}

/// The decision of an adaptive criterion, which differ only in how they get `ln A_bulk`:
/// local iff `lse(s_I) - lse(lse(s_I), ln A_bulk) >= ln tau`; with no bulk, local with share 1.
/// A share that is NaN or `+inf` (non-finite scores or moments) is reported as NaN and never
/// local.
pub(crate) fn decide_adaptive(
    tau: Tau,
    input: &HeadInput<'_>,
    log_bulk_mass: impl FnOnce(&HeadInput<'_>) -> Result<f64>,
) -> Result<Decision> {
    check_input(input)?;
    if input.bulk_len == 0 {
        return Ok(adaptive_decision(tau, input, f64::NAN));
    }
    Ok(adaptive_decision(tau, input, log_bulk_mass(input)?))
}

/// Heads [`decide_adaptive_group`] hands to `log_bulk_masses` at once.
pub(crate) const GROUP_BATCH: usize = 8;

/// [`decide_adaptive`] for the query heads of one group, their bulk masses estimated together
/// by `log_bulk_masses` (`ln A_bulk` of up to [`GROUP_BATCH`] heads, all with a bulk): a
/// criterion whose estimate of one head equals its estimate in a batch decides each head as
/// [`decide_adaptive`] does. Returns true when any head is long-context.
pub(crate) fn decide_adaptive_group(
    tau: Tau,
    inputs: &[HeadInput<'_>],
    out: &mut [Decision],
    log_bulk_masses: impl Fn(&[HeadInput<'_>], &mut [f64]) -> Result<()>,
) -> Result<bool> {
    if inputs.len() != out.len() {
        return Err(CoreError::DimensionMismatch {
            what: "decisions of a group",
            expected: inputs.len(),
            found: out.len(),
        });
    }
    let mut masses = [f64::NAN; GROUP_BATCH];
    let mut any_long = false;
    for (inputs, out) in inputs.chunks(GROUP_BATCH).zip(out.chunks_mut(GROUP_BATCH)) {
        let masses = &mut masses[..inputs.len()];
        for input in inputs {
            check_input(input)?;
        }
        if inputs.iter().all(|i| i.bulk_len > 0) {
            log_bulk_masses(inputs, masses)?;
        } else {
            for (input, m) in inputs.iter().zip(masses.iter_mut()) {
                if input.bulk_len > 0 {
                    log_bulk_masses(std::slice::from_ref(input), std::slice::from_mut(m))?;
                }
            }
        }
        for ((input, o), &m) in inputs.iter().zip(out.iter_mut()).zip(masses.iter()) {
            *o = adaptive_decision(tau, input, m);
            any_long |= !o.local;
        }
    }
    Ok(any_long)
}

/// Local iff `lse(s_I) - lse(lse(s_I), ln A_bulk) >= ln tau`; with no bulk, local with share 1
/// (`log_bulk` unused); a NaN or `+inf` share is reported as NaN and never local.
fn adaptive_decision(tau: Tau, input: &HeadInput<'_>, log_bulk: f64) -> Decision {
    if input.bulk_len == 0 {
        return Decision {
            local: true,
            log_local_share: Some(0.0),
        };
    }
    let log_local = crate::lse::lse(input.local_scores);
    let mut share = crate::lse::log_local_share(log_local, log_bulk);
    if share.is_nan() || share == f64::INFINITY {
        share = f64::NAN;
    }
    Decision {
        local: tau.is_local(share),
        log_local_share: Some(share),
    }
}

/// The first step of a criterion's batched `ln A_bulk`: checks the lengths; when the heads do
/// not share one summary (`summary` of every head the same object, with one bulk length and
/// scale) or are more than [`GROUP_BATCH`], estimates them one by one with `each` and returns
/// false; returns true when the caller may estimate them as one batch.
pub(crate) fn shared_batch(
    inputs: &[HeadInput<'_>],
    out: &mut [f64],
    summary: impl Fn(&HeadInput<'_>) -> Option<*const ()>,
    each: impl Fn(&[HeadInput<'_>], &mut [f64]) -> Result<()>,
) -> Result<bool> {
    if inputs.len() != out.len() {
        return Err(CoreError::DimensionMismatch {
            what: "bulk masses of a group",
            expected: inputs.len(),
            found: out.len(),
        });
    }
    let Some(first) = inputs.first() else {
        return Ok(false);
    };
    let s0 = summary(first);
    let shared = inputs.iter().all(|i| {
        i.bulk_len == first.bulk_len
            && i.scale == first.scale
            && matches!((summary(i), s0), (Some(a), Some(b)) if std::ptr::eq(a, b))
    });
    if inputs.len() == 1 || (shared && inputs.len() <= GROUP_BATCH) {
        return Ok(true);
    }
    for (input, o) in inputs.iter().zip(out.iter_mut()) {
        each(std::slice::from_ref(input), std::slice::from_mut(o))?;
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use qada_stats::{KeyMoments, Rows};

    use super::*;

    /// Says long head by head, but local with a marker share by group, and counts the group
    /// calls: any pointer that does not forward them answers differently.
    #[derive(Default)]
    struct Marker {
        groups: AtomicUsize,
    }

    const MARK: f64 = -0.125;

    impl LocalityCriterion for Marker {
        fn decide(&self, _input: &HeadInput<'_>) -> Result<Decision> {
            Ok(Decision::LONG)
        }
        fn name(&self) -> &str {
            "marker"
        }
        fn decision_cost(&self, d: usize, bulk_len: usize, context: usize) -> DecisionCost {
            DecisionCost {
                flops: (1000 * d + bulk_len) as u64,
                bytes: context as u64,
            }
        }
        fn decide_group(&self, inputs: &[HeadInput<'_>], out: &mut [Decision]) -> Result<bool> {
            self.groups.fetch_add(1, Ordering::Relaxed);
            for o in out.iter_mut().take(inputs.len()) {
                *o = Decision {
                    local: true,
                    log_local_share: Some(MARK),
                };
            }
            Ok(false)
        }
    }

    /// Every method through `c` must reach `Marker`'s overrides, which `counts` then show.
    fn check_forwarding(c: &impl LocalityCriterion, counts: &Marker) {
        let m = KeyMoments::new(2);
        let input = HeadInput {
            layer: 0,
            head: 0,
            query: &[1.0, 0.0],
            scale: 1.0,
            local_scores: &[0.0],
            bulk_len: 3,
            bulk_moments: &m,
            bulk_keys: Rows::F32(&[0.0; 6]),
            bulk_pages: None,
            bulk_clusters: None,
        };
        let g0 = counts.groups.load(Ordering::Relaxed);
        assert_eq!(c.name(), "marker");
        let cost = c.decision_cost(2, 3, 5);
        assert_eq!((cost.flops, cost.bytes), (2003, 5));
        assert_eq!(c.decide(&input).unwrap(), Decision::LONG);
        let mut out = [Decision::LONG; 2];
        assert!(!c.decide_group(&[input, input], &mut out).unwrap());
        assert_eq!(out[1].log_local_share, Some(MARK));
        assert_eq!(counts.groups.load(Ordering::Relaxed), g0 + 1);
    }

    #[test]
    fn overrides_are_honoured_through_references_boxes_and_arcs() {
        let m = Marker::default();
        check_forwarding(&m, &m);
        check_forwarding(&&m, &m);
        check_forwarding(&(&m as &dyn LocalityCriterion), &m);

        let b = Box::new(Marker::default());
        check_forwarding(&b, &b);
        let counts = Arc::new(Marker::default());
        let shared = Arc::clone(&counts);
        check_forwarding(&shared, &counts);
        let shared_dyn: Arc<dyn LocalityCriterion> = Arc::clone(&counts) as _;
        check_forwarding(&shared_dyn, &counts);
        // a boxed trait object: counted through an Arc kept beside it
        let boxed_dyn: Box<dyn LocalityCriterion> = Box::new(Arc::clone(&counts));
        check_forwarding(&boxed_dyn, &counts);
    }

    #[test]
    fn name_defaults_to_custom() {
        struct Bare;
        impl LocalityCriterion for Bare {
            fn decide(&self, _input: &HeadInput<'_>) -> Result<Decision> {
                Ok(Decision::LOCAL)
            }
        }
        assert_eq!(Bare.name(), "custom");
        assert_eq!(Box::new(Bare).name(), "custom");
    }
}
