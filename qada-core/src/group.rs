//! Decisions per GQA group: the query heads that share one KV head share its bulk keys and
//! values, which are read once for the group if any of its heads is long-context.
//!
//! - [`GroupMode::Head`] (the paper): each head decides alone; the group's bulk is read for its
//!   long heads only.
//! - [`GroupMode::All`]: the group is local only when every head is local; otherwise every head
//!   attends to the bulk (the bytes are read anyway, so the local heads lose nothing by
//!   using them). Same bytes as `Head`, never worse quality.
//! - [`GroupMode::Mass`]: one decision from the group's summed masses,
//!   `sum_h A_local,h / sum_h (A_local,h + A_bulk,h) >= tau`, in the log domain
//!   `lse_h(L_h) - lse_h(L_h - r_h) >= ln tau` with `L_h = ln A_local,h` and `r_h` head `h`'s
//!   log local share as its criterion computed it. Criteria that compute no share (dense,
//!   window, static) or have no `tau` fall back to `All`.
//!
//! [`Grouped`] wraps any criterion with a mode; attention asks it per group
//! ([`LocalityCriterion::decide_group`]).

use std::fmt;
use std::str::FromStr;

use qada_stats::BulkSummaries;

use crate::lse::{lse, lse2};
use crate::selection::{GroupRead, PageSelection};
use crate::{CoreError, Decision, DecisionCost, HeadInput, LocalityCriterion, Result, Tau};

/// How the heads of one GQA group combine their decisions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GroupMode {
    /// Each head alone (the paper).
    #[default]
    Head,
    /// Local only when every head of the group is.
    All,
    /// One decision from the group's summed local and bulk masses.
    Mass,
}

impl GroupMode {
    /// Every mode, in the order reports list them.
    pub const ALL: [GroupMode; 3] = [GroupMode::Head, GroupMode::All, GroupMode::Mass];

    /// The name `--group` takes.
    pub fn name(self) -> &'static str {
        match self {
            GroupMode::Head => "head",
            GroupMode::All => "all",
            GroupMode::Mass => "mass",
        }
    }
}

impl fmt::Display for GroupMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for GroupMode {
    type Err = CoreError;
    fn from_str(s: &str) -> Result<Self> {
        GroupMode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| CoreError::UnknownName {
                what: "group mode",
                found: s.to_string(),
                expected: "head, all or mass",
            })
    }
}

/// `inner`'s decisions, combined per GQA group as `mode` says.
#[derive(Clone, Debug)]
pub struct Grouped<C> {
    inner: C,
    mode: GroupMode,
}

impl<C: LocalityCriterion> Grouped<C> {
    /// `inner` deciding per group as `mode` says.
    pub fn new(inner: C, mode: GroupMode) -> Self {
        Grouped { inner, mode }
    }
    /// The mode.
    pub fn mode(&self) -> GroupMode {
        self.mode
    }
    /// The criterion that decides per head.
    pub fn inner(&self) -> &C {
        &self.inner
    }
}

/// The group's log local share from its heads' local scores and shares:
/// `lse_h(L_h) - lse_h(L_h - r_h)`; `None` when a head has no share; NaN when a share is NaN
/// or a head has no local mass to weigh it by (the group is then long-context).
pub fn group_log_local_share(inputs: &[HeadInput<'_>], decisions: &[Decision]) -> Option<f64> {
    let (mut num, mut den) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    for (input, d) in inputs.iter().zip(decisions) {
        let r = d.log_local_share?;
        let l = lse(input.local_scores);
        num = lse2(num, l);
        den = lse2(den, l - r);
    }
    Some(num - den)
}

impl<C: LocalityCriterion> LocalityCriterion for Grouped<C> {
    fn decide(&self, input: &HeadInput<'_>) -> Result<Decision> {
        self.inner.decide(input)
    }
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn bulk_summaries(&self) -> BulkSummaries {
        self.inner.bulk_summaries()
    }
    fn decision_cost(&self, d: usize, bulk_len: usize, context: usize) -> DecisionCost {
        self.inner.decision_cost(d, bulk_len, context)
    }
    fn tau(&self) -> Option<Tau> {
        self.inner.tau()
    }
    fn reuse(&self) -> Option<crate::Reuse> {
        self.inner.reuse()
    }
    fn choose_pages(
        &self,
        inputs: &[HeadInput<'_>],
        out: &mut [Decision],
        selection: &mut PageSelection,
    ) -> Result<GroupRead> {
        self.inner.choose_pages(inputs, out, selection)
    }
    fn decide_group(&self, inputs: &[HeadInput<'_>], out: &mut [Decision]) -> Result<bool> {
        let any_long = self.inner.decide_group(inputs, out)?;
        let all = |out: &mut [Decision], any_long: bool| {
            if any_long {
                out.iter_mut().for_each(|o| o.local = false);
            }
            Ok(any_long)
        };
        match self.mode {
            GroupMode::Head => Ok(any_long),
            GroupMode::All => all(out, any_long),
            GroupMode::Mass => {
                let (Some(tau), Some(share)) =
                    (self.inner.tau(), group_log_local_share(inputs, out))
                else {
                    return all(out, any_long);
                };
                let local = tau.is_local(share);
                out.iter_mut().for_each(|o| o.local = local);
                Ok(!local)
            }
        }
    }
}
