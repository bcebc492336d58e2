//! What `qada eval` writes from its rows: per task a CSV, a JSON and PNGs of each metric
//! against sparsity and against K/V bytes; `summary.md` with dense accuracy per task and
//! length, each task's tables at matched sparsity and matched bytes, and the worst-case drop
//! over tasks, with its two plots.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use qada_eval::metrics::interpolate;
use serde_json::json;

use super::records::param_text;
use super::rows::{dense_accuracy, Row, ACCURACY, GATE};
use super::Record;
use crate::common::CliResult;
use crate::plot::{self, Series};

/// Sparsities at which methods are compared in the summary tables.
pub const MATCHED: &[f64] = &[0.5, 0.7, 0.85, 0.9];

/// K/V bytes relative to dense at which methods are compared.
pub const MATCHED_BYTES: &[f64] = &[0.3, 0.5, 0.7, 0.9];

/// What a curve is drawn against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Axis {
    /// The fraction of head decisions that were local.
    Sparsity,
    /// K/V bytes read relative to dense (what decoding speed follows).
    KvBytes,
}

impl Axis {
    fn of(self, sparsity: f64, kv_bytes: f64) -> f64 {
        match self {
            Axis::Sparsity => sparsity,
            Axis::KvBytes => kv_bytes,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Axis::Sparsity => "sparsity",
            Axis::KvBytes => "K/V bytes",
        }
    }
    fn desc(self) -> &'static str {
        match self {
            Axis::Sparsity => "sparsity (fraction of head decisions that are local)",
            Axis::KvBytes => "K/V bytes read relative to dense",
        }
    }
    fn symbol(self) -> &'static str {
        match self {
            Axis::Sparsity => "s",
            Axis::KvBytes => "bytes",
        }
    }
    fn suffix(self) -> &'static str {
        match self {
            Axis::Sparsity => "",
            Axis::KvBytes => "_bytes",
        }
    }
    fn matched(self) -> &'static [f64] {
        match self {
            Axis::Sparsity => MATCHED,
            Axis::KvBytes => MATCHED_BYTES,
        }
    }
}

/// Names in first-seen order, each once.
fn unique<'a>(it: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut seen = std::collections::BTreeSet::new();
    it.filter(|x| seen.insert(*x)).collect()
}

/// Write every output for `rows` (from `records`) into `dir`; returns the summary's text.
pub fn write_outputs(dir: &Path, records: &[Record], rows: &[Row]) -> CliResult<String> {
    let mut summary = String::from("# qada eval\n");
    dense_table(&mut summary, records);
    for task in unique(rows.iter().map(|r| r.task.as_str())) {
        let task_rows: Vec<&Row> = rows.iter().filter(|r| r.task == task).collect();
        write_task(dir, task, &task_rows, &mut summary)?;
    }
    worst_drop(dir, rows, &mut summary)?;
    std::fs::write(dir.join("summary.md"), &summary)?;
    Ok(summary)
}

fn write_task(dir: &Path, task: &str, rows: &[&Row], summary: &mut String) -> CliResult<()> {
    let mut csv =
        String::from("task,length,method,parameter,sparsity,kv_bytes,metric,value,count\n");
    for r in rows {
        let _ = writeln!(
            csv,
            "{},{},{},{},{:.6},{:.6},{},{:.6},{}",
            r.task,
            r.length.map_or("all".into(), |l| l.to_string()),
            r.method,
            param_text(r.param),
            r.sparsity,
            r.kv_bytes,
            r.metric,
            r.value,
            r.count
        );
    }
    std::fs::write(dir.join(format!("{task}.csv")), csv)?;
    let json_rows: Vec<_> = rows
        .iter()
        .map(|r| {
            json!({"task": r.task, "length": r.length, "method": r.method, "parameter": r.param,
                   "sparsity": r.sparsity, "kv_bytes": r.kv_bytes, "metric": r.metric,
                   "value": r.value, "count": r.count})
        })
        .collect();
    std::fs::write(
        dir.join(format!("{task}.json")),
        serde_json::to_string_pretty(&json_rows)?,
    )?;
    // curves over the comparable lengths only
    let comparable: Vec<&Row> = rows
        .iter()
        .copied()
        .filter(|r| r.length.is_none())
        .collect();
    if comparable.is_empty() {
        let _ = writeln!(
            summary,
            "\n{task}: dense is below {GATE} at every length; no comparison."
        );
        return Ok(());
    }
    for metric in unique(comparable.iter().map(|r| r.metric.as_str())) {
        for axis in [Axis::Sparsity, Axis::KvBytes] {
            let series = series_of(&comparable, metric, axis);
            let file = dir.join(format!("{task}_{metric}{}.png", axis.suffix()));
            let title = format!("{task}: {metric} against {}", axis.name());
            plot::curves(&file, &title, axis.desc(), metric, &series)?;
            matched_table(summary, task, metric, axis, &series);
        }
    }
    Ok(())
}

/// One series per method: (sparsity or bytes, value) per parameter.
fn series_of(rows: &[&Row], metric: &str, axis: Axis) -> Vec<Series> {
    unique(rows.iter().map(|r| r.method.as_str()))
        .iter()
        .map(|m| Series {
            name: m.to_string(),
            points: rows
                .iter()
                .filter(|r| r.method == *m && r.metric == metric)
                .map(|r| (axis.of(r.sparsity, r.kv_bytes), r.value))
                .collect(),
        })
        .collect()
}

/// Dense accuracy per task (rows) and length (columns); cells below the gate are marked.
fn dense_table(summary: &mut String, records: &[Record]) {
    let dense = dense_accuracy(records);
    if dense.is_empty() {
        return;
    }
    let lengths: std::collections::BTreeSet<usize> = dense.keys().map(|k| k.1).collect();
    let _ = writeln!(
        summary,
        "\nDense accuracy per task and length (samples in parentheses). Methods are compared \
         only where dense reaches {GATE}; cells marked `x` are below it.\n"
    );
    let head: Vec<String> = lengths.iter().map(|l| l.to_string()).collect();
    let _ = writeln!(summary, "| task | {} |", head.join(" | "));
    let _ = writeln!(summary, "|---|{}", "---|".repeat(lengths.len()));
    // tasks in run order
    let tasks = unique(records.iter().map(|r| r.task.as_str()));
    for task in tasks
        .into_iter()
        .filter(|t| dense.keys().any(|k| k.0 == *t))
    {
        let cells: Vec<String> = lengths
            .iter()
            .map(|&l| match dense.get(&(task.to_string(), l)) {
                Some(&(acc, n)) => {
                    format!("{acc:.2} ({n}){}", if acc < GATE { " x" } else { "" })
                }
                None => "-".into(),
            })
            .collect();
        let _ = writeln!(summary, "| {task} | {} |", cells.join(" | "));
    }
}

/// One metric's table: each method's value interpolated at the matched points (a method with
/// one point, dense or window, shows that point).
fn matched_table(summary: &mut String, task: &str, metric: &str, axis: Axis, series: &[Series]) {
    let at = axis.matched();
    let _ = writeln!(summary, "\n{task}, {metric} at matched {}:\n", axis.name());
    let head: Vec<String> = at
        .iter()
        .map(|s| format!("{} = {s}", axis.symbol()))
        .collect();
    let _ = writeln!(summary, "| method | {} |", head.join(" | "));
    let _ = writeln!(summary, "|---|{}", "---|".repeat(at.len()));
    for s in series {
        if s.points.len() < 2 {
            let (x, v) = s.points.first().copied().unwrap_or((f64::NAN, f64::NAN));
            let _ = writeln!(
                summary,
                "| {} ({} {x:.3}) | {v:.4} |{}",
                s.name,
                axis.symbol(),
                " |".repeat(at.len() - 1)
            );
            continue;
        }
        let cells: Vec<String> = at
            .iter()
            .map(|&m| interpolate(&s.points, m).map_or("-".into(), |v| format!("{v:.4}")))
            .collect();
        let _ = writeln!(summary, "| {} | {} |", s.name, cells.join(" | "));
    }
}

/// The paper's summary over the answer-scored tasks that are comparable somewhere: per method
/// and parameter, `max_t (dense_t - accuracy_t)`, against the mean sparsity and mean bytes
/// over those tasks; a table at matched points and a plot per axis.
fn worst_drop(dir: &Path, rows: &[Row], summary: &mut String) -> CliResult<()> {
    let acc: Vec<&Row> = rows
        .iter()
        .filter(|r| r.length.is_none() && r.metric == ACCURACY)
        .collect();
    let dense: BTreeMap<&str, f64> = acc
        .iter()
        .filter(|r| r.method == "dense")
        .map(|r| (r.task.as_str(), r.value))
        .collect();
    if dense.len() < 2 {
        return Ok(());
    }
    // (method, param) -> per task (drop, sparsity, bytes)
    type PerTask = Vec<(f64, f64, f64)>;
    let mut per: Vec<((&str, String), PerTask)> = Vec::new();
    for r in acc.iter().filter(|r| r.method != "dense") {
        let k = (r.method.as_str(), param_text(r.param));
        let drop = dense.get(r.task.as_str()).map(|d| d - r.value);
        let Some(drop) = drop else { continue };
        match per.iter_mut().find(|p| p.0 == k) {
            Some(p) => p.1.push((drop, r.sparsity, r.kv_bytes)),
            None => per.push((k, vec![(drop, r.sparsity, r.kv_bytes)])),
        }
    }
    let _ = writeln!(
        summary,
        "\nWorst-case accuracy drop from dense over the {} comparable tasks ({}):",
        dense.len(),
        dense.keys().copied().collect::<Vec<_>>().join(", ")
    );
    for axis in [Axis::Sparsity, Axis::KvBytes] {
        let series: Vec<Series> = unique(per.iter().map(|p| p.0 .0))
            .iter()
            .map(|m| Series {
                name: m.to_string(),
                points: per
                    .iter()
                    .filter(|p| p.0 .0 == *m && p.1.len() == dense.len())
                    .map(|p| {
                        let n = p.1.len() as f64;
                        let worst = p.1.iter().map(|x| x.0).fold(f64::NEG_INFINITY, f64::max);
                        let x = p.1.iter().map(|x| axis.of(x.1, x.2)).sum::<f64>() / n;
                        (x, worst)
                    })
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        let file = dir.join(format!("summary_worst_drop{}.png", axis.suffix()));
        let title = format!("worst-case drop over tasks against {}", axis.name());
        plot::curves(
            &file,
            &title,
            axis.desc(),
            "worst-case accuracy drop",
            &series,
        )?;
        matched_table(summary, "all tasks", "worst-case drop", axis, &series);
    }
    Ok(())
}
