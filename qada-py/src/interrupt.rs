//! Ctrl-C during a long prompt: the prompt runs in parts of whole prefill blocks and Python's
//! signal handlers run between them, on the calling thread (the only one Python runs them
//! on), so a KeyboardInterrupt lands within one part instead of after the whole prompt (at
//! 16k tokens, minutes). Parts of whole [`PREFILL_BLOCK`]s compute exactly what one prefill
//! computes ([`Session::extend`]).

use std::ops::ControlFlow;

use pyo3::prelude::*;
use qada_model::{Session, PREFILL_BLOCK};

/// Run Python's pending signal handlers (with the GIL taken back for the call, from code
/// that released it): `Break` with the exception one of them raised (KeyboardInterrupt for
/// Ctrl-C).
pub(crate) fn check_signals() -> ControlFlow<PyErr> {
    match Python::attach(|py| py.check_signals()) {
        Ok(()) => ControlFlow::Continue(()),
        Err(e) => ControlFlow::Break(e),
    }
}

/// [`Session::prefill`] of `tokens` (not empty), with the signals checked before every
/// [`PREFILL_BLOCK`] tokens: `Ok(Break(e))` when a handler raised `e`, leaving the session
/// with part of the prompt cached and prefill not ended (reset it before another prompt).
pub(crate) fn prefill_checking_signals(
    session: &mut Session<'_>,
    tokens: &[u32],
) -> qada_model::Result<ControlFlow<PyErr>> {
    // every part but the last is whole blocks; the last (1 to PREFILL_BLOCK tokens) ends
    // prefill
    let head = tokens.len().saturating_sub(1) / PREFILL_BLOCK * PREFILL_BLOCK;
    for part in tokens[..head].chunks(PREFILL_BLOCK) {
        if let ControlFlow::Break(e) = check_signals() {
            return Ok(ControlFlow::Break(e));
        }
        session.extend(part, &mut |_, _| {})?;
    }
    if let ControlFlow::Break(e) = check_signals() {
        return Ok(ControlFlow::Break(e));
    }
    session.prefill(&tokens[head..], &mut |_, _| {})?;
    Ok(ControlFlow::Continue(()))
}
