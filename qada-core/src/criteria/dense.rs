//! Dense: never local. The quality reference and the cost baseline.

use crate::{Decision, HeadInput, LocalityCriterion, Result};

/// Every head attends to the whole context.
#[derive(Clone, Copy, Debug, Default)]
pub struct Dense;

impl LocalityCriterion for Dense {
    fn decide(&self, input: &HeadInput<'_>) -> Result<Decision> {
        Ok(if input.bulk_len == 0 {
            Decision::LOCAL
        } else {
            Decision::LONG
        })
    }
    fn name(&self) -> &str {
        "dense"
    }
}
