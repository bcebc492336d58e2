//! The decision's own cost, isolated: a criterion that decides (and chooses pages) and is
//! then overruled.

use qada_core::{
    Decision, DecisionCost, GroupRead, HeadInput, LocalityCriterion, PageSelection, Tau,
};
use qada_stats::BulkSummaries;

/// A criterion whose decisions, and for a selecting criterion its page choice, are computed
/// and then overruled: every head attends densely. Timed against dense, it isolates what
/// deciding and scoring the pages cost.
pub struct DecideThenDense(pub Box<dyn LocalityCriterion>);

impl LocalityCriterion for DecideThenDense {
    fn decide(&self, input: &HeadInput<'_>) -> qada_core::Result<Decision> {
        let d = self.0.decide(input)?;
        Ok(Decision { local: false, ..d })
    }
    fn decide_group(
        &self,
        inputs: &[HeadInput<'_>],
        out: &mut [Decision],
    ) -> qada_core::Result<bool> {
        self.0.decide_group(inputs, out)?;
        for o in out.iter_mut() {
            o.local = false;
        }
        Ok(true)
    }
    fn select_group(
        &self,
        inputs: &[HeadInput<'_>],
        out: &mut [Decision],
        selection: &mut PageSelection,
    ) -> qada_core::Result<GroupRead> {
        self.0.select_group(inputs, out, selection)?;
        // the pages are chosen and dropped; what choosing them read stays counted
        let (bytes, flops) = (selection.summary_bytes(), selection.summary_flops());
        selection.clear(0);
        selection.add_cost(bytes, flops);
        for o in out.iter_mut() {
            o.local = false;
        }
        Ok(GroupRead::Full)
    }
    fn name(&self) -> &str {
        "decide-then-dense"
    }
    fn decision_cost(&self, d: usize, bulk_len: usize, context: usize) -> DecisionCost {
        self.0.decision_cost(d, bulk_len, context)
    }
    fn bulk_summaries(&self) -> BulkSummaries {
        self.0.bulk_summaries()
    }
    fn tau(&self) -> Option<Tau> {
        self.0.tau()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qada_stats::{KeyMoments, Rows};

    /// Calls the first head of a group long and the second local, chooses page 3 for the
    /// first, and counts 100 bytes and 7 FLOPs of choosing.
    struct ChoosesPageThree;

    impl LocalityCriterion for ChoosesPageThree {
        fn decide(&self, input: &HeadInput<'_>) -> qada_core::Result<Decision> {
            Ok(if input.head == 0 {
                Decision::LONG
            } else {
                Decision::LOCAL
            })
        }
        fn choose_pages(
            &self,
            _inputs: &[HeadInput<'_>],
            _out: &mut [Decision],
            selection: &mut PageSelection,
        ) -> qada_core::Result<GroupRead> {
            selection.clear(32);
            selection.push(3, 0b01)?;
            selection.add_cost(100, 7);
            Ok(GroupRead::Selected)
        }
    }

    #[test]
    fn the_pages_are_chosen_counted_and_dropped_and_every_head_reads_the_bulk() {
        let (d, t) = (4, 256);
        let keys = vec![0.5f32; t * d];
        let mut moments = KeyMoments::new(d);
        for k in keys.chunks(d) {
            moments.push(k).unwrap();
        }
        let (q, local) = (vec![1.0f32; d], vec![0.0f32; 8]);
        let input = |head| HeadInput {
            layer: 0,
            head,
            query: &q,
            scale: 0.5,
            local_scores: &local,
            bulk_len: t,
            bulk_moments: &moments,
            bulk_keys: Rows::F32(&keys),
            bulk_pages: None,
            bulk_clusters: None,
        };
        let inputs = [input(0), input(1)];
        let mut out = [Decision::LOCAL; 2];
        let mut selection = PageSelection::new();
        let inner = ChoosesPageThree.select_group(&inputs, &mut out, &mut selection);
        assert_eq!(inner.unwrap(), GroupRead::Selected);
        assert_eq!(selection.pages().count(), 1);

        let wrapped = DecideThenDense(Box::new(ChoosesPageThree));
        let mut out = [Decision::LOCAL; 2];
        let read = wrapped.select_group(&inputs, &mut out, &mut selection);
        assert_eq!(read.unwrap(), GroupRead::Full);
        assert!(out.iter().all(|o| !o.local), "{out:?}");
        assert_eq!(selection.pages().count(), 0);
        assert_eq!(
            (selection.summary_bytes(), selection.summary_flops()),
            (100, 7)
        );
    }
}
