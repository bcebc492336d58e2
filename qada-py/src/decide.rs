//! `qada.decide`: any criterion of qada-core, by name, on a researcher's own query (one head)
//! or queries (a batch of heads sharing the keys, a GQA group), local keys and bulk.
//!
//! Each head is decided as `qada_core::PreparedQuery` decides it: local scores
//! `s_I = scale K_I q` as the attention kernels compute them, the bulk moments computed once
//! from the bulk keys (or given), the page bounds and cluster moments a criterion reads built
//! once from the bulk keys.

use ndarray::{Array0, Array1, ArrayView2, Axis};
use numpy::PyArray1;
use numpy::{IntoPyArray, PyArrayDyn};
use pyo3::prelude::*;
use qada_core::{
    by_name, Bulk, CoreError, CriterionParams, Decision, GroupRead, HeadQuery, LocalityCriterion,
    PageSelection, PreparedQuery, SELECTING_NAMES,
};
use qada_stats::KeyMoments;

use crate::arrays::{matrix, shape_str, view, Floats};
use crate::errors::{arg_err, bad_arg, check_tau, qada_err};
use crate::moments::PyKeyMoments;

/// What `decide` returns: per head, the label and the log local share.
#[pyclass(name = "Decisions", module = "qada", frozen)]
pub struct PyDecisions {
    local: Py<PyArrayDyn<bool>>,
    log_local_share: Py<PyArrayDyn<f64>>,
    criterion: String,
    /// For page selection: per head, the bulk pages it reads.
    pages: Option<Vec<Vec<u64>>>,
    page_size: Option<usize>,
    one_head: bool,
}

#[pymethods]
impl PyDecisions {
    /// True where the head is local (attends to sink and window only); shape `()` for one
    /// head, `(h,)` for a batch.
    #[getter]
    fn local(&self, py: Python<'_>) -> Py<PyArrayDyn<bool>> {
        self.local.clone_ref(py)
    }
    /// `ln(A_local / (A_local + A_bulk))` as the criterion computed it (exact for the oracle,
    /// estimated for approx, bound, mixture and hybrid); NaN where it computes none (dense,
    /// window) or could not (no finite estimate: then the head is long).
    #[getter]
    fn log_local_share(&self, py: Python<'_>) -> Py<PyArrayDyn<f64>> {
        self.log_local_share.clone_ref(py)
    }
    /// The criterion's name.
    #[getter]
    fn criterion(&self) -> &str {
        &self.criterion
    }
    /// For the page-selecting criteria (pages, certified, quest): the bulk pages each head
    /// reads, page `p` being bulk rows `[p * page_size, (p + 1) * page_size)`, as an int64
    /// array (a list of them for a batch); every page for a head that reads the whole bulk,
    /// none for a local one. `None` for the other criteria, which read all of the bulk or none.
    #[getter]
    fn pages(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let Some(pages) = &self.pages else {
            return Ok(None);
        };
        let arrays: Vec<Bound<'_, PyArray1<u64>>> = pages
            .iter()
            .map(|p| PyArray1::from_vec(py, p.clone()))
            .collect();
        Ok(Some(if self.one_head {
            arrays[0].clone().into_any().unbind()
        } else {
            pyo3::types::PyList::new(py, arrays)?.into_any().unbind()
        }))
    }
    /// Bulk rows per page of `pages` (`None` for criteria that select no pages).
    #[getter]
    fn page_size(&self) -> Option<usize> {
        self.page_size
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Decisions(criterion={:?}, local={}, log_local_share={})",
            self.criterion,
            self.local.bind(py).repr()?,
            self.log_local_share.bind(py).repr()?
        ))
    }
}

/// The argument of `decide` a criterion's construction error is about.
fn param_of(e: &CoreError) -> &'static str {
    match e {
        CoreError::InvalidTau(_) => "tau",
        CoreError::InvalidParameter { what, .. } if what.contains("quest") => "quest_tokens",
        CoreError::InvalidParameter { what, .. } if what.contains("channels") => "channels",
        CoreError::InvalidParameter { what, .. } if what.contains("page") => "page",
        CoreError::InvalidParameter { what, .. } if what.contains("cluster") => "clusters",
        CoreError::InvalidParameter { what, .. } if what.contains("margin") => "margin",
        _ => "criterion",
    }
}

/// What each criterion needs of the bulk, checked before anything is computed.
fn check_bulk(name: &str, has_keys: bool, has_moments: bool) -> PyResult<()> {
    let need_keys = matches!(name, "oracle" | "bound" | "mixture" | "hybrid")
        || SELECTING_NAMES.contains(&name);
    if need_keys && !has_keys {
        return Err(bad_arg(
            "bulk_keys",
            format!("the bulk keys (T_bulk, d): the {name} criterion reads them"),
            "None",
        ));
    }
    if name == "approx" && !has_keys && !has_moments {
        return Err(bad_arg(
            "bulk_keys",
            "the bulk keys (T_bulk, d) or moments=KeyMoments: approx estimates the bulk mass \
             from their moments",
            "neither",
        ));
    }
    Ok(())
}

/// Per head, the pages it reads, from a group's selection: all `n_pages` for a full read.
fn pages_per_head(
    read: GroupRead,
    sel: &PageSelection,
    decisions: &[Decision],
    n_pages: usize,
) -> Vec<Vec<u64>> {
    (0..decisions.len())
        .map(|j| match read {
            GroupRead::Local => Vec::new(),
            GroupRead::Full if decisions[j].local => Vec::new(),
            GroupRead::Full => (0..n_pages as u64).collect(),
            GroupRead::Selected => sel
                .pages()
                .filter(|&(_, m)| j < 64 && m & (1 << j) != 0)
                .map(|(p, _)| p as u64)
                .collect(),
        })
        .collect()
}

/// Decisions of every head, and for a selecting criterion the pages each reads.
type Decided = (Vec<Decision>, Option<Vec<Vec<u64>>>);

/// Decide every head (row of `q`) with `criterion`; the bulk summaries are built once. A
/// page-selecting criterion decides the heads as one GQA group (at most 64).
fn decide_heads(
    criterion: &dyn LocalityCriterion,
    q: ArrayView2<'_, f32>,
    local_keys: ArrayView2<'_, f32>,
    bulk_keys: Option<ArrayView2<'_, f32>>,
    moments: &KeyMoments,
    scale: Option<f32>,
) -> qada_core::Result<Decided> {
    let bulk = match bulk_keys {
        Some(keys) => Bulk::KeysAndMoments {
            keys: keys.reborrow(),
            moments,
        },
        None => Bulk::Moments(moments),
    };
    let prepared = (0..q.nrows())
        .map(|h| {
            PreparedQuery::new(&HeadQuery {
                query: q.reborrow().index_axis_move(Axis(0), h),
                local_keys: local_keys.reborrow(),
                bulk,
                scale,
            })
        })
        .collect::<qada_core::Result<Vec<_>>>()?;
    let Some(first) = prepared.first() else {
        return Ok((Vec::new(), None));
    };
    let summaries = first.summaries_for(criterion)?;
    let mut out = vec![Decision::LONG; prepared.len()];
    if SELECTING_NAMES.contains(&criterion.name()) {
        let mut sel = PageSelection::new();
        let read =
            PreparedQuery::select_with(&prepared, criterion, &summaries, &mut out, &mut sel)?;
        let n_pages = summaries.pages.as_ref().map_or(0, |p| p.n_pages());
        let pages = pages_per_head(read, &sel, &out, n_pages);
        return Ok((out, Some(pages)));
    }
    for (p, o) in prepared.iter().zip(out.iter_mut()) {
        *o = p.decide_with(criterion, &summaries)?;
    }
    Ok((out, None))
}

/// Decide whether attention heads are local.
///
/// `q`: one query `(d,)` or a batch of heads `(h, d)` sharing the keys; `local_keys`:
/// `(n, d)`, the sink then the window; `bulk_keys`: `(T_bulk, d)`; `moments`: a `KeyMoments`
/// of the bulk keys (or of keys like them; used by approx instead of the bulk keys' own);
/// `scale` defaults to `1 / sqrt(d)`.
#[pyfunction]
#[pyo3(signature = (
    q, local_keys, bulk_keys=None, moments=None, tau=0.6, criterion="approx", scale=None,
    page=CriterionParams::default().page, clusters=CriterionParams::default().clusters,
    margin=CriterionParams::default().margin,
    quest_tokens=CriterionParams::default().quest_tokens,
    channels=CriterionParams::default().channels,
))]
#[allow(clippy::too_many_arguments)]
pub fn decide(
    py: Python<'_>,
    q: Floats<'_>,
    local_keys: Floats<'_>,
    bulk_keys: Option<Floats<'_>>,
    moments: Option<PyRef<'_, PyKeyMoments>>,
    tau: f64,
    criterion: &str,
    scale: Option<f32>,
    page: usize,
    clusters: usize,
    margin: f64,
    quest_tokens: usize,
    channels: usize,
) -> PyResult<PyDecisions> {
    let tau = check_tau(tau)?;
    let params = CriterionParams {
        tau,
        page,
        clusters,
        margin,
        quest_tokens,
        channels,
    };
    let c = by_name(criterion, &params).map_err(|e| arg_err(param_of(&e), e))?;
    check_bulk(criterion, bulk_keys.is_some(), moments.is_some())?;
    let qv = view(&q);
    let one_head = qv.ndim() == 1;
    let q2 = match qv.ndim() {
        1 => qv.clone().insert_axis(Axis(0)),
        _ => qv.clone(),
    };
    let shape = shape_str(&qv);
    let q2 = matrix("q", q2, None).map_err(|_| {
        bad_arg(
            "q",
            "a query (d,) or a batch of heads (h, d)",
            format!("shape {shape}"),
        )
    })?;
    let d = q2.ncols();
    if d == 0 {
        return Err(bad_arg("q", "queries of positive length d", "d = 0"));
    }
    let local = matrix("local_keys", view(&local_keys), Some(d))?;
    let bulk = match &bulk_keys {
        Some(b) => Some(matrix("bulk_keys", view(b), Some(d))?),
        None => None,
    };
    if let Some(m) = &moments {
        if m.inner.dim() != d {
            return Err(bad_arg(
                "moments",
                format!("KeyMoments of dimension {d} (d from q)"),
                format!("dimension {}", m.inner.dim()),
            ));
        }
    }
    if let Some(s) = scale {
        if !s.is_finite() {
            return Err(bad_arg("scale", "a finite number", s));
        }
    }
    let given = moments.as_ref().map(|m| &m.inner);
    if SELECTING_NAMES.contains(&criterion) && q2.nrows() > 64 {
        return Err(bad_arg(
            "q",
            "at most 64 heads for a page-selecting criterion (one GQA group)",
            format!("{} heads", q2.nrows()),
        ));
    }
    let (decisions, pages) = py
        .detach(|| -> qada_core::Result<Decided> {
            let own;
            let moments = match (given, bulk) {
                (Some(m), _) => m,
                (None, Some(k)) => {
                    own = KeyMoments::from_keys(k)?;
                    &own
                }
                (None, None) => {
                    own = KeyMoments::new(d);
                    &own
                }
            };
            decide_heads(c.as_ref(), q2, local, bulk, moments, scale)
        })
        .map_err(qada_err)?;
    let labels: Vec<bool> = decisions.iter().map(|x| x.local).collect();
    let shares: Vec<f64> = decisions
        .iter()
        .map(|x| x.log_local_share.unwrap_or(f64::NAN))
        .collect();
    let (local, log_local_share) = if one_head {
        (
            Array0::from_elem((), labels[0]).into_dyn(),
            Array0::from_elem((), shares[0]).into_dyn(),
        )
    } else {
        (
            Array1::from(labels).into_dyn(),
            Array1::from(shares).into_dyn(),
        )
    };
    Ok(PyDecisions {
        local: local.into_pyarray(py).unbind(),
        log_local_share: log_local_share.into_pyarray(py).unbind(),
        criterion: c.name().to_string(),
        page_size: pages.as_ref().map(|_| page),
        pages,
        one_head,
    })
}
