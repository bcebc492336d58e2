//! `Model.analyze`'s result: `qada analyze`'s report (`qada_eval::Report`) and every
//! probe as a dict of numbers and numpy arrays.

use numpy::{IntoPyArray, PyArray1};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use qada_eval::{HeadProbe, ProbeRun, Report};

/// The report's numbers, its per-head tables `(layers, heads)` and per-layer fractions, the
/// probes as columns (`probes`: layer, head, bulk_len, log_local, log_bulk, log_bulk_hat, log_missed) and
/// the greedy tokens decoded.
pub fn report_dict<'py>(
    py: Python<'py>,
    r: &Report,
    run: &ProbeRun,
) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    let ag = &r.agreement;
    out.set_item("tau", r.tau)?;
    out.set_item("count", r.count)?;
    out.set_item("frac_local_oracle", r.frac_local_oracle)?;
    out.set_item("frac_local_approx", r.frac_local_approx)?;
    out.set_item("accuracy", ag.accuracy())?;
    out.set_item("recall_long", ag.recall_long())?;
    out.set_item("precision_long", ag.precision_long())?;
    out.set_item("both_long", ag.both_long)?;
    out.set_item("both_local", ag.both_local)?;
    out.set_item("oracle_long_approx_local", ag.missed_long)?;
    out.set_item("oracle_local_approx_long", ag.false_long)?;
    out.set_item("oracle_local", r.oracle_local_fraction().into_pyarray(py))?;
    out.set_item("approx_local", r.approx_local_fraction().into_pyarray(py))?;
    out.set_item("agreement", r.agreement_per_head().into_pyarray(py))?;
    out.set_item(
        "per_layer_local_oracle",
        PyArray1::from_vec(py, r.per_layer_frac_local_oracle.clone()),
    )?;
    out.set_item(
        "per_layer_local_approx",
        PyArray1::from_vec(py, r.per_layer_frac_local_approx.clone()),
    )?;
    out.set_item("log_error_gauss_median", r.log_error_gauss.median)?;
    out.set_item("log_gap_bulk_local_median", r.log_gap_bulk_local.median)?;
    out.set_item("missed_share_mean", r.missed_share.mean)?;
    out.set_item("missed_share_max", r.missed_share_max)?;
    out.set_item("frac_over_budget", r.frac_over_budget)?;
    out.set_item(
        "per_layer_missed_share",
        PyArray1::from_vec(py, r.per_layer_missed_share.clone()),
    )?;
    let probes = PyDict::new(py);
    let col = |f: fn(&HeadProbe) -> f64| -> Vec<f64> { run.probes.iter().map(f).collect() };
    let idx = |f: fn(&HeadProbe) -> usize| -> Vec<u64> {
        run.probes.iter().map(|p| f(p) as u64).collect()
    };
    probes.set_item("layer", PyArray1::from_vec(py, idx(|p| p.layer)))?;
    probes.set_item("head", PyArray1::from_vec(py, idx(|p| p.head)))?;
    probes.set_item("bulk_len", PyArray1::from_vec(py, idx(|p| p.bulk_len)))?;
    probes.set_item("log_local", PyArray1::from_vec(py, col(|p| p.log_local)))?;
    probes.set_item("log_bulk", PyArray1::from_vec(py, col(|p| p.log_bulk)))?;
    probes.set_item(
        "log_bulk_hat",
        PyArray1::from_vec(py, col(|p| p.log_bulk_hat)),
    )?;
    probes.set_item("log_missed", PyArray1::from_vec(py, col(|p| p.log_missed)))?;
    out.set_item("probes", probes)?;
    out.set_item("generated_ids", run.generated.clone())?;
    Ok(out)
}
