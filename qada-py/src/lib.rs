//! `import qada`: qada's criteria, key moments and model from Python.
//!
//! One module per idea: `moments` (`qada.KeyMoments`), `decide` (`qada.decide` and its
//! `Decisions`), `model` (`qada.Model`: tokenize, generate, analyze; `analyze` its report as a dict), `session`
//! (`qada.Session`: prefill, step, the cache's rotated keys and values, the last step's
//! queries), `options` (the decoding keyword arguments), `errors` (`qada.QadaError`,
//! `ValueError`s naming the argument) and `arrays` (numpy arrays in, shapes checked). Long
//! work runs with the GIL released.

use pyo3::prelude::*;

mod analyze;
mod arrays;
mod decide;
mod errors;
mod interrupt;
mod model;
mod moments;
mod options;
mod session;

/// qada: query-adaptive attention (QAdA) on numpy arrays and GGUF models (the extension
/// module `qada._native`; `import qada` re-exports it).
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("QadaError", m.py().get_type::<errors::QadaError>())?;
    m.add_class::<moments::PyKeyMoments>()?;
    m.add_class::<decide::PyDecisions>()?;
    m.add_function(wrap_pyfunction!(decide::decide, m)?)?;
    m.add_class::<model::PyModel>()?;
    m.add_class::<model::PyGeneration>()?;
    m.add_class::<session::PySession>()?;
    m.add("CRITERIA", qada_core::CRITERION_NAMES.to_vec())?;
    Ok(())
}
