//! Ctrl-C during a long prompt: the prompt runs in parts of whole prefill blocks
//! ([`Session::prefill_in_parts`]) and Python's signal handlers run between them, on the
//! calling thread (the only one Python runs them on), so a KeyboardInterrupt lands within one
//! block instead of after the whole prompt (at 16k tokens, minutes).

use std::ops::ControlFlow;

use pyo3::prelude::*;
use qada_model::Session;

/// Run Python's pending signal handlers (with the GIL taken back for the call, from code
/// that released it): `Break` with the exception one of them raised (KeyboardInterrupt for
/// Ctrl-C).
pub(crate) fn check_signals() -> ControlFlow<PyErr> {
    match Python::attach(|py| py.check_signals()) {
        Ok(()) => ControlFlow::Continue(()),
        Err(e) => ControlFlow::Break(e),
    }
}

/// [`Session::prefill`] of `tokens` (not empty), with the signals checked after every block:
/// `Ok(Break(e))` when a handler raised `e`, leaving the session with part of the prompt
/// cached and prefill not ended (reset it before another prompt); else the logits after the
/// prompt.
pub(crate) fn prefill_checking_signals<'s>(
    session: &'s mut Session<'_>,
    tokens: &[u32],
) -> qada_model::Result<ControlFlow<PyErr, &'s [f32]>> {
    session.prefill_in_parts(tokens, |_| check_signals())
}
