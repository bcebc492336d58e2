//! Window: always local, as StreamingLLM (attention sinks plus a sliding window).

use crate::{Decision, HeadInput, LocalityCriterion, Result};

/// Every head attends to the sink and window only.
#[derive(Clone, Copy, Debug, Default)]
pub struct Window;

impl LocalityCriterion for Window {
    fn decide(&self, _input: &HeadInput<'_>) -> Result<Decision> {
        Ok(Decision::LOCAL)
    }
    fn name(&self) -> &str {
        "window"
    }
}
