//! The evaluation's unit of record: one configuration on one prompt. Each is appended to
//! `records.jsonl` (one JSON object per line, flushed) the moment it finishes, so an
//! interrupted run loses at most the record in flight and `--resume` skips every record
//! already written.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use qada_core::Accounting;
use serde_json::json;

use crate::common::{fail, CliResult};

/// What one configuration did on one prompt.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub task: String,
    /// Prompt length in tokens (for fidelity: the prefill plus the steps).
    pub length: usize,
    /// Index of the prompt among the samples of (task, length).
    pub sample: usize,
    pub method: String,
    pub param: Option<f64>,
    /// Per metric, the sum over this record's units (an answer's score; a step's NLL, ...).
    pub sums: Vec<(String, f64)>,
    /// Units summed: 1 answer, or the teacher-forced steps.
    pub units: u64,
    /// Head decisions taken with a non-empty bulk, and the local ones among them.
    pub decisions: u64,
    pub local: u64,
    /// K/V bytes read, and what dense attention would have read.
    pub kv_bytes: f64,
    pub dense_kv_bytes: f64,
    /// What ran it ([`crate::host::run_info`]: commit, version, CPU, threads, activations,
    /// cache type); `None` in records written before records named their run.
    pub run: Option<serde_json::Value>,
}

/// Identifies a record for `--resume`: task, length, sample, method, parameter.
pub type RecordKey = (String, usize, usize, String, String);

/// The parameter as written in keys and tables: empty for methods without one.
pub fn param_text(p: Option<f64>) -> String {
    p.map_or(String::new(), |p| p.to_string())
}

impl Record {
    /// A record of the decisions and bytes in `acc`, with the metric sums given.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        task: &str,
        length: usize,
        sample: usize,
        method: &str,
        param: Option<f64>,
        sums: Vec<(String, f64)>,
        units: u64,
        acc: &Accounting,
    ) -> Self {
        let t = acc.total();
        Record {
            task: task.into(),
            length,
            sample,
            method: method.into(),
            param,
            sums,
            units,
            decisions: t.decisions,
            local: t.local,
            kv_bytes: acc.kv_bytes,
            dense_kv_bytes: acc.dense_kv_bytes,
            run: None,
        }
    }

    pub fn key(&self) -> RecordKey {
        key(
            &self.task,
            self.length,
            self.sample,
            &self.method,
            self.param,
        )
    }

    fn to_json(&self) -> serde_json::Value {
        let sums: serde_json::Map<String, serde_json::Value> = self
            .sums
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        let mut v = json!({
            "task": self.task, "length": self.length, "sample": self.sample,
            "method": self.method, "parameter": self.param, "sums": sums, "units": self.units,
            "decisions": self.decisions, "local": self.local,
            "kv_bytes": self.kv_bytes, "dense_kv_bytes": self.dense_kv_bytes,
        });
        if let Some(run) = &self.run {
            v["run"] = run.clone();
        }
        v
    }

    fn from_json(v: &serde_json::Value) -> Option<Record> {
        Some(Record {
            task: v["task"].as_str()?.into(),
            length: v["length"].as_u64()? as usize,
            sample: v["sample"].as_u64()? as usize,
            method: v["method"].as_str()?.into(),
            param: v["parameter"].as_f64(),
            sums: v["sums"]
                .as_object()?
                .iter()
                .map(|(k, x)| Some((k.clone(), x.as_f64()?)))
                .collect::<Option<_>>()?,
            units: v["units"].as_u64()?,
            decisions: v["decisions"].as_u64()?,
            local: v["local"].as_u64()?,
            kv_bytes: v["kv_bytes"].as_f64()?,
            dense_kv_bytes: v["dense_kv_bytes"].as_f64()?,
            run: v.get("run").filter(|r| r.is_object()).cloned(),
        })
    }
}

/// The key of a record with these fields.
pub fn key(task: &str, length: usize, sample: usize, method: &str, p: Option<f64>) -> RecordKey {
    (task.into(), length, sample, method.into(), param_text(p))
}

/// `records.jsonl`: the records of this run (and, with `--resume`, of the run before it).
pub struct RecordLog {
    path: PathBuf,
    file: File,
    done: HashSet<RecordKey>,
    records: Vec<Record>,
    /// What names this run, given to each record pushed without one.
    run: Option<serde_json::Value>,
}

impl RecordLog {
    /// Open `path`: with `resume`, read the records already there and append after them;
    /// without, start an empty file.
    pub fn open(path: &Path, resume: bool) -> CliResult<Self> {
        let records = if resume && path.exists() {
            read_records(path)?
        } else {
            Vec::new()
        };
        let file = open_log(path, resume)?;
        Ok(RecordLog {
            path: path.to_path_buf(),
            file,
            done: records.iter().map(Record::key).collect(),
            records,
            run: None,
        })
    }

    /// Name every record this run writes from now on by `run` (see
    /// [`crate::host::run_info`]); records that already carry one (merged from another
    /// folder) keep theirs.
    pub fn name_run(&mut self, run: serde_json::Value) {
        self.run = Some(run);
    }

    /// True when the record with this key is already written.
    pub fn has(&self, k: &RecordKey) -> bool {
        self.done.contains(k)
    }

    /// Append one record and flush it to disk.
    pub fn push(&mut self, mut r: Record) -> CliResult<()> {
        if r.run.is_none() {
            r.run.clone_from(&self.run);
        }
        let line = serde_json::to_string(&r.to_json())?;
        writeln!(self.file, "{line}")
            .and_then(|_| self.file.flush())
            .map_err(|e| format!("cannot write {}: {e}", self.path.display()))?;
        self.done.insert(r.key());
        self.records.push(r);
        Ok(())
    }

    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// The records of one (task, length) written so far.
    pub fn of(&self, task: &str, length: usize) -> impl Iterator<Item = &Record> {
        let task = task.to_string();
        self.records
            .iter()
            .filter(move |r| r.task == task && r.length == length)
    }
}

/// Every record in a `records.jsonl`; a line cut short by an interruption (the last one) is
/// skipped, any other unreadable line is an error naming it.
pub fn read_records(path: &Path) -> CliResult<Vec<Record>> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut out = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        let parsed = serde_json::from_str::<serde_json::Value>(line)
            .ok()
            .and_then(|v| Record::from_json(&v));
        match parsed {
            Some(r) => out.push(r),
            None if i + 1 == lines.len() => {}
            None => {
                return fail(format!(
                    "{} line {}: not an eval record; remove the file (or the line) to start over",
                    path.display(),
                    i + 1
                ))
            }
        }
    }
    Ok(out)
}

/// A run's log file at `path`: appended to when `resume`, started over otherwise.
pub(super) fn open_log(path: &Path, resume: bool) -> CliResult<File> {
    OpenOptions::new()
        .create(true)
        .write(true)
        .append(resume)
        .truncate(!resume)
        .open(path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(sample: usize, score: f64) -> Record {
        let mut acc = Accounting::new(2, 2);
        acc.kv_bytes = 10.0 * (sample + 1) as f64;
        acc.dense_kv_bytes = 40.0;
        Record::new(
            "vt",
            1024,
            sample,
            "approx-current",
            Some(0.6),
            vec![("accuracy".into(), score)],
            1,
            &acc,
        )
    }

    #[test]
    fn records_survive_a_round_trip_and_resume_keeps_them() {
        let dir = std::env::temp_dir().join(format!("qada-records-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("records.jsonl");
        let mut log = RecordLog::open(&path, false).unwrap();
        log.push(record(0, 1.0)).unwrap();
        log.push(record(1, 0.5)).unwrap();
        drop(log);
        // an interruption leaves half a line at the end
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        write!(f, "{{\"task\": \"vt\", \"len").unwrap();
        drop(f);
        let log = RecordLog::open(&path, true).unwrap();
        assert_eq!(log.records(), &[record(0, 1.0), record(1, 0.5)]);
        assert!(log.has(&record(1, 0.0).key()));
        assert!(!log.has(&record(2, 0.0).key()));
        assert_eq!(log.of("vt", 1024).count(), 2);
        assert_eq!(log.of("vt", 2048).count(), 0);
        drop(log);
        // without --resume the file starts over
        let log = RecordLog::open(&path, false).unwrap();
        assert!(log.records().is_empty());
        assert!(read_records(&path).unwrap().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn records_carry_their_run_and_older_records_read_without_one() {
        let dir = std::env::temp_dir().join(format!("qada-records-run-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("records.jsonl");
        let mut log = RecordLog::open(&path, false).unwrap();
        let run = crate::host::run_info("f32", "f16");
        log.name_run(run.clone());
        log.push(record(0, 1.0)).unwrap();
        // a record merged from elsewhere keeps the run that made it
        let other = json!({"commit": "abc", "cpu": "elsewhere"});
        log.push(Record {
            run: Some(other.clone()),
            ..record(1, 1.0)
        })
        .unwrap();
        drop(log);
        // a record written before records named their run
        let mut old = record(2, 0.5).to_json();
        old.as_object_mut().unwrap().remove("run");
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        writeln!(f, "{old}").unwrap();
        drop(f);
        let read = read_records(&path).unwrap();
        assert_eq!(read[0].run.as_ref(), Some(&run));
        assert_eq!(read[1].run.as_ref(), Some(&other));
        assert_eq!(read[2].run, None);
        for key in ["commit", "version", "cpu", "threads", "activations", "kv"] {
            assert!(!run[key].is_null(), "{key} missing from {run}");
        }
        assert_eq!(
            (run["activations"].as_str(), run["kv"].as_str()),
            (Some("f32"), Some("f16"))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_damaged_line_before_the_last_is_an_error_naming_it() {
        let dir = std::env::temp_dir().join(format!("qada-records-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("records.jsonl");
        let good = serde_json::to_string(&record(0, 1.0).to_json()).unwrap();
        std::fs::write(&path, format!("{good}\nnot json\n{good}\n")).unwrap();
        let e = read_records(&path).unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
