//! `qada.Session`: one sequence on a model, for a researcher's own loop: `prefill(ids)` and
//! `step(id)` return logits; `keys(layer)` and `values(layer)` copy the cache's rotated keys
//! and values out as `(kv_heads, T, d)` float32; `queries(layer)` the rotated queries of the
//! last step, `(h, d)` (global layers: the ones a criterion decides in).

use std::ops::ControlFlow;
use std::sync::Arc;

use ndarray::Array3;
use numpy::{IntoPyArray, PyArray1, PyArray2, PyArray3};
use pyo3::prelude::*;
use qada_core::{Decision, KvSegments};
use qada_model::{Model, Session, SessionOptions, StepObserver};
use qada_stats::Rows;

use crate::arrays::token_ids;
use crate::errors::{bad_arg, qada_err};
use crate::interrupt::prefill_checking_signals;

/// Keeps the rotated queries of every global layer of one step.
struct QueryRecorder<'a> {
    queries: &'a mut [Option<Vec<f32>>],
}

impl StepObserver for QueryRecorder<'_> {
    fn observe_layer(
        &mut self,
        layer: usize,
        queries: &[f32],
        _kv: &[KvSegments<'_>],
        _scale: f32,
        _decisions: &[Decision],
    ) -> qada_model::Result<()> {
        if let Some(slot) = self.queries.get_mut(layer) {
            *slot = Some(queries.to_vec());
        }
        Ok(())
    }
}

/// One sequence decoding on a model (see `Model.session`).
#[pyclass(name = "Session", module = "qada")]
pub struct PySession {
    /// Holds its own share of the model (`Session<'static>` from an `Arc`).
    session: Session<'static>,
    /// The same model, read while the session is borrowed mutably.
    model: Arc<Model>,
    /// Per layer, the rotated queries `(h x d)` of the last step (global layers only).
    queries: Vec<Option<Vec<f32>>>,
}

impl PySession {
    /// A session on `model` that keeps the model alive.
    pub fn new(model: Arc<Model>, opts: SessionOptions) -> PyResult<Self> {
        let session = Session::new(Arc::clone(&model), opts).map_err(qada_err)?;
        Ok(PySession {
            session,
            queries: vec![None; model.config().n_layers],
            model,
        })
    }

    fn check_layer(&self, layer: usize) -> PyResult<()> {
        let n = self.model.config().n_layers;
        if layer >= n {
            return Err(bad_arg("layer", format!("a layer index in 0..{n}"), layer));
        }
        Ok(())
    }

    /// Every KV head's kept keys (or values) of `layer` as `(kv_heads, T, d)` f32.
    fn rows_of(&self, layer: usize, values: bool) -> PyResult<Array3<f32>> {
        self.check_layer(layer)?;
        let c = &self.model.config();
        let (g, d) = (c.n_kv_heads, c.head_dim);
        let cache = self.session.cache();
        let heads: Vec<Rows<'_>> = (0..g)
            .map(|h| {
                let v = cache.head(layer, h)?;
                Ok(if values { v.values() } else { v.keys() })
            })
            .collect::<qada_kv::Result<_>>()
            .map_err(qada_err)?;
        let t = heads.first().map_or(0, |r| r.n_rows(d));
        let mut out = Array3::<f32>::zeros((g, t, d));
        for (h, rows) in heads.iter().enumerate() {
            for i in 0..t {
                let mut row = out.slice_mut(ndarray::s![h, i, ..]);
                let row = row
                    .as_slice_mut()
                    .expect("a row of a standard-layout array");
                rows.row_f32(i, row);
            }
        }
        Ok(out)
    }
}

#[pymethods]
impl PySession {
    /// Run the prompt's token ids densely (the cache must be empty); the logits after the last
    /// one, float32 of shape `(vocab,)`. Ctrl-C stops it between blocks of the prompt
    /// (KeyboardInterrupt) and leaves the session empty.
    fn prefill<'py>(
        &mut self,
        py: Python<'py>,
        ids: Vec<i64>,
    ) -> PyResult<Bound<'py, PyArray1<f32>>> {
        let ids = token_ids("ids", &ids, self.model.config().vocab_size)?;
        if !self.session.is_empty() {
            return Err(bad_arg(
                "ids",
                "a prefill of an empty session (call reset() first)",
                format!("{} tokens cached", self.session.len()),
            ));
        }
        let session = &mut self.session;
        let run = py.detach(|| -> qada_model::Result<_> {
            Ok(match prefill_checking_signals(session, &ids)? {
                ControlFlow::Continue(logits) => ControlFlow::Continue(logits.to_vec()),
                ControlFlow::Break(e) => ControlFlow::Break(e),
            })
        });
        match run.map_err(qada_err)? {
            ControlFlow::Continue(logits) => Ok(PyArray1::from_vec(py, logits)),
            ControlFlow::Break(interrupted) => {
                // part of the prompt is cached: empty again, as before the call
                self.session.reset();
                Err(interrupted)
            }
        }
    }

    /// Decode one token at the next position (the criterion decides every head of every
    /// global layer); the logits after it. Records the step's rotated queries.
    fn step<'py>(&mut self, py: Python<'py>, id: i64) -> PyResult<Bound<'py, PyArray1<f32>>> {
        let id = token_ids("id", &[id], self.model.config().vocab_size)?[0];
        self.queries.iter_mut().for_each(|q| *q = None);
        let (session, queries) = (&mut self.session, &mut self.queries);
        let logits = py
            .detach(|| {
                let mut rec = QueryRecorder { queries };
                session
                    .step_observed(id, Some(&mut rec))
                    .map(|l| l.to_vec())
            })
            .map_err(qada_err)?;
        Ok(PyArray1::from_vec(py, logits))
    }

    /// The rotated keys in the cache of `layer`, float32 `(kv_heads, T, d)` (a sliding
    /// layer keeps only its recent positions: `T` is what it keeps).
    fn keys<'py>(&self, py: Python<'py>, layer: usize) -> PyResult<Bound<'py, PyArray3<f32>>> {
        Ok(self.rows_of(layer, false)?.into_pyarray(py))
    }

    /// The values in the cache of `layer`, float32 `(kv_heads, T, d)`.
    fn values<'py>(&self, py: Python<'py>, layer: usize) -> PyResult<Bound<'py, PyArray3<f32>>> {
        Ok(self.rows_of(layer, true)?.into_pyarray(py))
    }

    /// The rotated queries of `layer` at the last step, float32 `(h, d)`; None for a sliding
    /// layer or before any step.
    fn queries<'py>(
        &self,
        py: Python<'py>,
        layer: usize,
    ) -> PyResult<Option<Bound<'py, PyArray2<f32>>>> {
        self.check_layer(layer)?;
        let c = &self.model.config();
        Ok(self.queries[layer].as_ref().map(|q| {
            ndarray::Array2::from_shape_vec((c.n_heads, c.head_dim), q.clone())
                .expect("the observer sees n_heads x d queries")
                .into_pyarray(py)
        }))
    }

    /// First position of the kept rows of `layer` (0 for a global layer).
    fn first_position(&self, layer: usize) -> PyResult<usize> {
        self.check_layer(layer)?;
        let v = self.session.cache().head(layer, 0).map_err(qada_err)?;
        Ok(v.first_position())
    }

    /// Forget the sequence (the criterion and options stay).
    fn reset(&mut self) {
        self.session.reset();
        self.queries.iter_mut().for_each(|q| *q = None);
    }

    /// Fraction of the decisions so far that were local.
    #[getter]
    fn sparsity(&self) -> f64 {
        self.session.accounting().sparsity()
    }

    /// K/V bytes read so far relative to dense.
    #[getter]
    fn kv_bytes_ratio(&self) -> f64 {
        self.session.accounting().kv_bytes_ratio()
    }

    /// Per (layer, head), the fraction of decisions that were local, float64 (layers, heads).
    fn sparsity_per_head<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray2<f64>> {
        self.session
            .accounting()
            .sparsity_per_head()
            .into_pyarray(py)
    }

    /// Tokens in the sequence.
    fn __len__(&self) -> usize {
        self.session.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "Session(criterion={:?}, tokens={}, capacity={})",
            self.session.criterion().name(),
            self.session.len(),
            self.session.capacity()
        )
    }
}
