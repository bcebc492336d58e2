//! Errors as Python exceptions: `ValueError` for arguments that are wrong (naming the
//! argument, expected vs found), `qada.QadaError` for what qada's libraries refuse (carrying
//! their message).

use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;

pyo3::create_exception!(
    qada,
    QadaError,
    PyException,
    "An operation qada's libraries refused; the message says what was wrong and what to do."
);

/// A `ValueError` for argument `arg`: `arg: expected ..., found ...`.
pub fn bad_arg(
    arg: &str,
    expected: impl std::fmt::Display,
    found: impl std::fmt::Display,
) -> PyErr {
    PyValueError::new_err(format!("{arg}: expected {expected}, found {found}"))
}

/// A library error as a `qada.QadaError` with its message.
pub fn qada_err(e: impl std::fmt::Display) -> PyErr {
    QadaError::new_err(e.to_string())
}

/// A library error about argument `arg` (an unknown name, a parameter out of range) as a
/// `ValueError` naming it.
pub fn arg_err(arg: &str, e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("{arg}: {e}"))
}

/// `tau`, checked by `Tau::new` (in (0, 1]), refused naming the argument.
pub fn check_tau(tau: f64) -> PyResult<f64> {
    qada_core::Tau::new(tau)
        .map(qada_core::Tau::get)
        .map_err(|_| bad_arg("tau", "a value in (0, 1]", tau))
}
