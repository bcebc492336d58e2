//! Records summed into result rows: per (task, length, method, parameter) and metric, the
//! mean over the records' units, with the sparsity and the K/V bytes relative to dense of
//! every decision behind it.
//!
//! `value = sum(sums[metric]) / sum(units)`, `sparsity = sum(local) / sum(decisions)`,
//! `kv_bytes = sum(kv_bytes) / sum(dense_kv_bytes)`.
//!
//! Besides one row per length, each (task, method, parameter) gets a row over the
//! *comparable* lengths (`length: None`): for an answer-scored task, those where dense reaches
//! the gate (so that no curve is read where the model fails with full attention); for
//! fidelity, every length.

use std::collections::BTreeMap;

use super::records::{param_text, Record};

/// The metric of answer-scored tasks (passkey and the RULER tasks).
pub const ACCURACY: &str = "accuracy";

/// Dense accuracy a (task, length) needs before sparse methods are compared on it.
pub const GATE: f64 = 0.5;

/// One result row.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub task: String,
    /// The prompt length, or `None` for the row over the comparable lengths.
    pub length: Option<usize>,
    pub method: String,
    pub param: Option<f64>,
    pub sparsity: f64,
    /// K/V bytes read relative to dense.
    pub kv_bytes: f64,
    pub metric: String,
    pub value: f64,
    /// Units behind the value (answers or steps).
    pub count: u64,
}

#[derive(Default)]
struct Sums {
    metrics: Vec<(String, f64)>,
    units: u64,
    decisions: u64,
    local: u64,
    kv: f64,
    dense_kv: f64,
}

impl Sums {
    fn add(&mut self, r: &Record) {
        for (m, v) in &r.sums {
            match self.metrics.iter_mut().find(|x| &x.0 == m) {
                Some(x) => x.1 += v,
                None => self.metrics.push((m.clone(), *v)),
            }
        }
        self.units += r.units;
        self.decisions += r.decisions;
        self.local += r.local;
        self.kv += r.kv_bytes;
        self.dense_kv += r.dense_kv_bytes;
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        f64::NAN
    } else {
        a / b
    }
}

/// Mean dense accuracy per (task, length) of the answer-scored tasks.
pub fn dense_accuracy(records: &[Record]) -> BTreeMap<(String, usize), (f64, u64)> {
    let mut m: BTreeMap<(String, usize), (f64, u64)> = BTreeMap::new();
    for r in records.iter().filter(|r| r.method == "dense") {
        if let Some((_, v)) = r.sums.iter().find(|(k, _)| k == ACCURACY) {
            let e = m.entry((r.task.clone(), r.length)).or_default();
            e.0 += v;
            e.1 += r.units;
        }
    }
    for v in m.values_mut() {
        v.0 /= v.1.max(1) as f64;
    }
    m
}

/// True when sparse methods are compared on (task, length): dense reaches [`GATE`] there,
/// or the task is not answer-scored.
pub fn comparable(dense: &BTreeMap<(String, usize), (f64, u64)>, task: &str, len: usize) -> bool {
    dense
        .get(&(task.to_string(), len))
        .is_none_or(|&(acc, _)| acc >= GATE)
}

/// The rows of `records`, in the order their (task, method, parameter) first appear, lengths
/// ascending, the comparable-lengths row last.
pub fn rows(records: &[Record]) -> Vec<Row> {
    let dense = dense_accuracy(records);
    // (task, method, param) in first-seen order, each with sums per length and over all
    // comparable lengths
    type Group = (String, String, Option<f64>, BTreeMap<usize, Sums>, Sums);
    let mut groups: Vec<Group> = Vec::new();
    for r in records {
        let p = param_text(r.param);
        let i = match groups
            .iter()
            .position(|g| g.0 == r.task && g.1 == r.method && param_text(g.2) == p)
        {
            Some(i) => i,
            None => {
                groups.push((
                    r.task.clone(),
                    r.method.clone(),
                    r.param,
                    BTreeMap::new(),
                    Sums::default(),
                ));
                groups.len() - 1
            }
        };
        let g = &mut groups[i];
        g.3.entry(r.length).or_default().add(r);
        if comparable(&dense, &r.task, r.length) {
            g.4.add(r);
        }
    }
    let mut out = Vec::new();
    for (task, method, param, per_len, all) in &groups {
        let sums = per_len
            .iter()
            .map(|(l, s)| (Some(*l), s))
            .chain((all.units > 0).then_some((None, all)));
        for (length, s) in sums {
            for (metric, sum) in &s.metrics {
                out.push(Row {
                    task: task.clone(),
                    length,
                    method: method.clone(),
                    param: *param,
                    sparsity: ratio(s.local as f64, s.decisions as f64),
                    kv_bytes: ratio(s.kv, s.dense_kv),
                    metric: metric.clone(),
                    value: sum / s.units.max(1) as f64,
                    count: s.units,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(task: &str, len: usize, sample: usize, method: &str, score: f64) -> Record {
        Record {
            task: task.into(),
            length: len,
            sample,
            method: method.into(),
            param: (method != "dense").then_some(0.6),
            sums: vec![(ACCURACY.into(), score)],
            units: 1,
            decisions: 10,
            local: if method == "dense" {
                0
            } else {
                4 + sample as u64
            },
            kv_bytes: if method == "dense" { 100.0 } else { 50.0 },
            dense_kv_bytes: 100.0,
            run: None,
        }
    }

    #[test]
    fn rows_are_means_and_the_comparable_row_skips_lengths_dense_fails() {
        let records = vec![
            rec("vt", 1024, 0, "dense", 1.0),
            rec("vt", 1024, 0, "approx", 0.0),
            rec("vt", 1024, 1, "dense", 0.5),
            rec("vt", 1024, 1, "approx", 1.0),
            // dense fails at 2048: 0.25 < GATE
            rec("vt", 2048, 0, "dense", 0.25),
            rec("vt", 2048, 0, "approx", 1.0),
        ];
        let rows = rows(&records);
        let find = |len: Option<usize>, m: &str| {
            rows.iter()
                .find(|r| r.length == len && r.method == m)
                .unwrap()
                .clone()
        };
        let d = find(Some(1024), "dense");
        assert_eq!(
            (d.value, d.count, d.sparsity, d.kv_bytes),
            (0.75, 2, 0.0, 1.0)
        );
        let a = find(Some(1024), "approx");
        assert_eq!((a.value, a.sparsity, a.kv_bytes), (0.5, 9.0 / 20.0, 0.5));
        assert_eq!(find(Some(2048), "approx").value, 1.0);
        // over comparable lengths: 1024 only
        let all = find(None, "approx");
        assert_eq!((all.value, all.count), (0.5, 2));
        assert!(comparable(&dense_accuracy(&records), "vt", 1024));
        assert!(!comparable(&dense_accuracy(&records), "vt", 2048));
        assert!(comparable(&dense_accuracy(&records), "fidelity", 2048));
    }
}
