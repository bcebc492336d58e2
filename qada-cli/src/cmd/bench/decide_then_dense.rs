//! The decision's own cost, isolated: a criterion that decides (and chooses pages) and is
//! then overruled.

use qada_core::{Decision, GroupRead, HeadInput, LocalityCriterion, PageSelection, Tau};
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
    fn decision_flops(&self, d: usize, bulk_len: usize) -> u64 {
        self.0.decision_flops(d, bulk_len)
    }
    fn decision_bytes(&self, d: usize, bulk_len: usize) -> u64 {
        self.0.decision_bytes(d, bulk_len)
    }
    fn bulk_summaries(&self) -> BulkSummaries {
        self.0.bulk_summaries()
    }
    fn tau(&self) -> Option<Tau> {
        self.0.tau()
    }
}
