//! `qada.KeyMoments`: the streaming mean and covariance of keys (`qada_stats::KeyMoments`),
//! accumulated in f64 (Welford push, Chan merge).

use numpy::{IntoPyArray, PyArray1, PyArray2};
use pyo3::prelude::*;
use qada_stats::KeyMoments;

use crate::arrays::{rows, view, Floats};
use crate::errors::{bad_arg, qada_err};

/// Mean and population covariance of keys, accumulated in float64.
///
/// `KeyMoments(dim)` starts empty; `push(keys)` adds keys of shape `(n, dim)` or `(dim,)`
/// (converted to float32 first, as a cache holds them); `merge(other)` adds another's keys.
#[pyclass(name = "KeyMoments", module = "qada")]
#[derive(Clone)]
pub struct PyKeyMoments {
    pub(crate) inner: KeyMoments,
}

#[pymethods]
impl PyKeyMoments {
    #[new]
    fn new(dim: usize) -> PyResult<Self> {
        if dim == 0 {
            return Err(bad_arg("dim", "a positive key length", 0));
        }
        Ok(PyKeyMoments {
            inner: KeyMoments::new(dim),
        })
    }

    /// Add keys: an array of shape `(n, dim)`, or one key of shape `(dim,)`.
    fn push(&mut self, py: Python<'_>, keys: Floats<'_>) -> PyResult<()> {
        let keys = rows("keys", view(&keys), self.inner.dim())?;
        let inner = &mut self.inner;
        py.detach(|| inner.push_keys(keys)).map_err(qada_err)
    }

    /// Add the keys another `KeyMoments` of the same dimension has seen.
    fn merge(&mut self, other: PyRef<'_, PyKeyMoments>) -> PyResult<()> {
        if other.inner.dim() != self.inner.dim() {
            return Err(bad_arg(
                "other",
                format!("KeyMoments of dimension {}", self.inner.dim()),
                format!("dimension {}", other.inner.dim()),
            ));
        }
        self.inner.merge(&other.inner).map_err(qada_err)
    }

    /// The key length `d`.
    #[getter]
    fn dim(&self) -> usize {
        self.inner.dim()
    }

    /// Keys seen.
    #[getter]
    fn count(&self) -> u64 {
        self.inner.count()
    }

    /// The mean key, float64 of shape `(dim,)` (zeros before any key).
    #[getter]
    fn mean<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        self.inner.mean_array().into_pyarray(py)
    }

    /// The population covariance `M2 / n`, float64 of shape `(dim, dim)`, exactly symmetric
    /// (zeros before any key).
    #[getter]
    fn covariance<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray2<f64>> {
        self.inner.covariance_array().into_pyarray(py)
    }

    fn __len__(&self) -> usize {
        usize::try_from(self.inner.count()).unwrap_or(usize::MAX)
    }

    fn __repr__(&self) -> String {
        format!(
            "KeyMoments(dim={}, count={})",
            self.inner.dim(),
            self.inner.count()
        )
    }
}
