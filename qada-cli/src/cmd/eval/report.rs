//! What `qada eval` writes: result rows as CSV and JSON, a PNG per metric against sparsity,
//! and the summary tables at matched sparsity; and the rows read back for `--replot`.

use std::fmt::Write as _;
use std::path::Path;

use qada_core::metrics::interpolate;
use serde_json::json;

use crate::common::{fail, CliResult};
use crate::plot::{self, Series};

/// Sparsities at which methods are compared in the summary table.
pub const MATCHED: &[f64] = &[0.5, 0.7, 0.85, 0.9];

/// A result row: `(task, method, parameter, sparsity, metric, value, count)`.
#[derive(Clone, Debug)]
pub struct Row {
    pub task: String,
    pub method: String,
    pub param: Option<f64>,
    pub sparsity: f64,
    pub metric: String,
    pub value: f64,
    pub count: u64,
}

impl Row {
    fn from_json(v: &serde_json::Value) -> Option<Row> {
        Some(Row {
            task: v["task"].as_str()?.to_string(),
            method: v["method"].as_str()?.to_string(),
            param: v["parameter"].as_f64(),
            sparsity: v["sparsity"].as_f64().unwrap_or(f64::NAN),
            metric: v["metric"].as_str()?.to_string(),
            value: v["value"].as_f64().unwrap_or(f64::NAN),
            count: v["count"].as_u64()?,
        })
    }
}

/// The rows of a JSON file written by [`write_outputs`].
pub fn read_rows(path: &Path) -> CliResult<Vec<Row>> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let rows: Option<Vec<Row>> = v
        .as_array()
        .map(|a| a.iter().filter_map(Row::from_json).collect());
    match rows {
        Some(rows) => Ok(rows),
        None => fail(format!("{}: not an array of eval rows", path.display())),
    }
}

/// Names in first-seen order, each once.
fn unique<'a>(it: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut seen = std::collections::BTreeSet::new();
    it.filter(|x| seen.insert(*x)).collect()
}

/// Write `{task}.csv`, `{task}.json` and `{task}_{metric}.png` into `dir`, and append the
/// task's tables at matched sparsity to `summary`.
pub fn write_outputs(dir: &Path, task: &str, rows: &[Row], summary: &mut String) -> CliResult<()> {
    let mut csv = String::from("task,method,parameter,sparsity,metric,value,count\n");
    for r in rows {
        let p = r.param.map_or(String::new(), |p| p.to_string());
        let _ = writeln!(
            csv,
            "{},{},{},{:.6},{},{:.6},{}",
            r.task, r.method, p, r.sparsity, r.metric, r.value, r.count
        );
    }
    std::fs::write(dir.join(format!("{task}.csv")), csv)?;
    let json_rows: Vec<_> = rows
        .iter()
        .map(|r| json!({"task": r.task, "method": r.method, "parameter": r.param, "sparsity": r.sparsity, "metric": r.metric, "value": r.value, "count": r.count}))
        .collect();
    std::fs::write(
        dir.join(format!("{task}.json")),
        serde_json::to_string_pretty(&json_rows)?,
    )?;
    for metric in unique(rows.iter().map(|r| r.metric.as_str())) {
        let methods = unique(rows.iter().map(|r| r.method.as_str()));
        let series: Vec<Series> = methods
            .iter()
            .map(|m| Series {
                name: m.to_string(),
                points: rows
                    .iter()
                    .filter(|r| r.method == *m && r.metric == metric)
                    .map(|r| (r.sparsity, r.value))
                    .collect(),
            })
            .collect();
        let file = dir.join(format!("{task}_{metric}.png"));
        plot::curves(
            &file,
            &format!("{task}: {metric} against sparsity"),
            metric,
            &series,
        )?;
        summary_table(summary, task, metric, &series);
    }
    Ok(())
}

/// The table of one metric: each method's value interpolated at the [`MATCHED`] sparsities
/// (a method with one point, dense or window, shows that point).
fn summary_table(summary: &mut String, task: &str, metric: &str, series: &[Series]) {
    let _ = writeln!(summary, "\n{task}, {metric} at matched sparsity:\n");
    let _ = writeln!(
        summary,
        "| method | {} |",
        MATCHED
            .iter()
            .map(|s| format!("s = {s}"))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let _ = writeln!(summary, "|---|{}", "---|".repeat(MATCHED.len()));
    for s in series {
        if s.points.len() < 2 {
            let (sp, v) = s.points.first().copied().unwrap_or((f64::NAN, f64::NAN));
            let _ = writeln!(
                summary,
                "| {} (sparsity {sp:.3}) | {v:.4} |{}",
                s.name,
                " |".repeat(MATCHED.len() - 1)
            );
            continue;
        }
        let cells: Vec<String> = MATCHED
            .iter()
            .map(|&m| interpolate(&s.points, m).map_or("-".into(), |v| format!("{v:.4}")))
            .collect();
        let _ = writeln!(summary, "| {} | {} |", s.name, cells.join(" | "));
    }
}
