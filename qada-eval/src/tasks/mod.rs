//! Evaluation tasks on a real model, one per module, each measured against dense decoding:
//!
//! - [`passkey`]: a RULER-style needle, a 5-digit pass key hidden at a depth of haystack text
//!   and asked for at the end; scored by [`crate::metrics::recall`].
//! - [`ruler`]: RULER's synthetic tasks (needles, variable tracking, common and frequent
//!   words), regenerated from a seed over haystack text, scored the same way.
//! - [`fidelity`]: teacher-forced steps after a dense prefill, compared step by step with the
//!   dense distribution: NLL, top-1 agreement and KL(dense || sparse).
//!
//! Both prefill each prompt once densely ([`dense_prefill`]) and run every configuration from
//! the checkpoint it returns, so configurations differ only in decoding. The builders take
//! their text and seeds as arguments and return values; they never print.

pub mod fidelity;
pub mod passkey;
pub mod ruler;
pub mod task;

pub use fidelity::{FidelityMeans, FidelityReference, FidelityStep, FidelityTotals};
pub use passkey::{PasskeyPrompt, PasskeyTask};
pub use ruler::{RulerPrompts, RulerTask};
pub use task::{answer, TaskPrompt};

use qada_core::Dense;
use qada_kv::MomentsMode;

use qada_model::{Result, Session, SessionCheckpoint};

/// Forget what `session` held, prefill `ids` densely with bulk moments that follow the keys
/// (`MomentsMode::Update`), and return the checkpoint after prefill, from which every
/// configuration under test is restored.
pub fn dense_prefill(session: &mut Session<'_>, ids: &[u32]) -> Result<SessionCheckpoint> {
    session.start_over(Box::new(Dense), MomentsMode::Update)?;
    session.prefill(ids, &mut |_, _| {})?;
    Ok(session.checkpoint())
}
