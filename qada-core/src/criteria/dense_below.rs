//! Dense below a context length: a criterion that only starts deciding once the context is
//! long.
//!
//! A step's context is `n = |I| + T_bulk` keys (sink, window and bulk). While `n < n_min`,
//! every head attends to all of it (what [`crate::Dense`] does); from `n_min` on, the inner
//! criterion decides. On a short context the bulk is small, reading it costs little, and a
//! wrong local call costs as much as on a long one: a model whose criterion keeps quality on
//! long prompts but moves greedy tokens on short ones can ship it from `n_min` on.

use qada_stats::BulkSummaries;

use crate::selection::{GroupRead, PageSelection};
use crate::{CoreError, Decision, DecisionCost, Dense, HeadInput, LocalityCriterion, Result, Tau};

/// `inner` from a context of `min_context` keys on; dense below it.
#[derive(Clone, Debug)]
pub struct DenseBelow<C> {
    inner: C,
    min_context: usize,
}

impl<C: LocalityCriterion> DenseBelow<C> {
    /// `inner` decides once a step's context holds `min_context` keys; dense before.
    ///
    /// # Errors
    /// [`CoreError::InvalidParameter`] for `min_context == 0` (the inner criterion alone is
    /// what a threshold of 0 would mean: use it).
    pub fn new(inner: C, min_context: usize) -> Result<Self> {
        if min_context == 0 {
            return Err(CoreError::InvalidParameter {
                what: "the context length from which the criterion decides (dense below it)",
                expected: "at least 1 (or no threshold)",
                found: 0.0,
            });
        }
        Ok(DenseBelow { inner, min_context })
    }
    /// The criterion that decides from `min_context` keys on.
    pub fn inner(&self) -> &C {
        &self.inner
    }
    /// The context length from which the inner criterion decides.
    pub fn min_context(&self) -> usize {
        self.min_context
    }
    /// True when `input`'s context (`|I| + T_bulk`) is shorter than the threshold.
    fn short(&self, input: &HeadInput<'_>) -> bool {
        input.local_scores.len() + input.bulk_len < self.min_context
    }
    /// Who decides for a step whose first head is `first`: [`Dense`] below the threshold,
    /// the inner criterion from it (a group's heads share their context).
    fn who(&self, first: Option<&HeadInput<'_>>) -> &dyn LocalityCriterion {
        match first {
            Some(input) if self.short(input) => &Dense,
            _ => &self.inner,
        }
    }
}

impl<C: LocalityCriterion> LocalityCriterion for DenseBelow<C> {
    fn decide(&self, input: &HeadInput<'_>) -> Result<Decision> {
        self.who(Some(input)).decide(input)
    }
    /// The inner criterion's name (the threshold is a parameter, as tau is).
    fn name(&self) -> &str {
        self.inner.name()
    }
    /// Nothing below the threshold (dense decides nothing and reads no summary); the inner
    /// criterion's from it.
    fn decision_cost(&self, d: usize, bulk_len: usize, context: usize) -> DecisionCost {
        if context < self.min_context {
            DecisionCost::default()
        } else {
            self.inner.decision_cost(d, bulk_len, context)
        }
    }
    /// The inner criterion's, kept from the threshold on: current when the context reaches
    /// it, and nothing to keep up before.
    fn bulk_summaries(&self) -> BulkSummaries {
        let s = self.inner.bulk_summaries();
        match s.asks() {
            true => BulkSummaries {
                from_context: s.from_context.max(self.min_context),
                ..s
            },
            false => s,
        }
    }
    fn tau(&self) -> Option<Tau> {
        self.inner.tau()
    }
    fn reuse(&self) -> Option<crate::Reuse> {
        self.inner.reuse()
    }
    fn decide_group(&self, inputs: &[HeadInput<'_>], out: &mut [Decision]) -> Result<bool> {
        self.who(inputs.first()).decide_group(inputs, out)
    }
    fn choose_pages(
        &self,
        inputs: &[HeadInput<'_>],
        out: &mut [Decision],
        selection: &mut PageSelection,
    ) -> Result<GroupRead> {
        self.who(inputs.first())
            .choose_pages(inputs, out, selection)
    }
    fn select_group(
        &self,
        inputs: &[HeadInput<'_>],
        out: &mut [Decision],
        selection: &mut PageSelection,
    ) -> Result<GroupRead> {
        self.who(inputs.first())
            .select_group(inputs, out, selection)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Window;
    use qada_stats::{KeyMoments, Rows};

    fn input<'a>(local: &'a [f32], bulk_len: usize, m: &'a KeyMoments) -> HeadInput<'a> {
        HeadInput {
            layer: 0,
            head: 0,
            query: &[1.0, 0.0],
            scale: 1.0,
            local_scores: local,
            bulk_len,
            bulk_moments: m,
            bulk_keys: Rows::F32(&[]),
            bulk_pages: None,
            bulk_clusters: None,
        }
    }

    #[test]
    fn dense_below_the_threshold_the_inner_criterion_from_it() {
        let m = KeyMoments::new(2);
        let local = [0.0f32; 4];
        // the window says local wherever there is a bulk; dense below 10 keys of context
        let c = DenseBelow::new(Window, 10).unwrap();
        assert_eq!(c.decide(&input(&local, 5, &m)).unwrap(), Decision::LONG);
        assert!(c.decide(&input(&local, 6, &m)).unwrap().local);
        assert!(c.decide(&input(&local, 0, &m)).unwrap().local);
        let mut sel = PageSelection::new();
        let mut out = [Decision::LOCAL; 2];
        let short = [input(&local, 5, &m), input(&local, 5, &m)];
        assert_eq!(
            c.select_group(&short, &mut out, &mut sel).unwrap(),
            GroupRead::Full
        );
        assert_eq!(out, [Decision::LONG; 2]);
        let long = [input(&local, 6, &m), input(&local, 6, &m)];
        assert_eq!(
            c.select_group(&long, &mut out, &mut sel).unwrap(),
            GroupRead::Local
        );
        assert!(out.iter().all(|o| o.local));
        assert_eq!(c.name(), "window");
        assert!(DenseBelow::new(Window, 0).is_err());
    }

    #[test]
    fn a_decision_costs_nothing_below_the_threshold_and_the_inner_cost_from_it() {
        // bound reads page bounds: its decisions cost bytes and FLOPs
        let bound = crate::Bound::new(0.9, 32).unwrap();
        let c = DenseBelow::new(bound, 1000).unwrap();
        let (d, bulk) = (64, 900);
        let inner = bound.decision_cost(d, bulk, 1000);
        assert!(inner.bytes > 0 && inner.flops > 0);
        assert_eq!(c.decision_cost(d, bulk, 999), DecisionCost::default());
        assert_eq!(c.decision_cost(d, bulk, 1000), inner);
        // through a box and a group, as sessions hold it
        let boxed: Box<dyn LocalityCriterion> =
            Box::new(crate::Grouped::new(c, crate::GroupMode::All));
        assert_eq!(boxed.decision_cost(d, bulk, 999), DecisionCost::default());
        assert_eq!(boxed.decision_cost(d, bulk, 1000), inner);
    }

    #[test]
    fn the_summaries_are_kept_from_the_threshold_on() {
        let bound = crate::Bound::new(0.9, 32).unwrap();
        let c = DenseBelow::new(bound, 1000).unwrap();
        let want = BulkSummaries {
            from_context: 1000,
            ..bound.bulk_summaries()
        };
        assert_eq!(c.bulk_summaries(), want);
        // nested: the longer threshold
        let nested = DenseBelow::new(DenseBelow::new(bound, 2000).unwrap(), 1000).unwrap();
        assert_eq!(nested.bulk_summaries().from_context, 2000);
        // a criterion that reads no summary asks for none, from no context
        let window = DenseBelow::new(Window, 1000).unwrap();
        assert_eq!(window.bulk_summaries(), BulkSummaries::default());
    }
}
