//! `qada eval --merge FROM`: fold the records of a run made in another folder (a leg run
//! apart, e.g. one method at one length) into `--out-dir`. A record whose key (task, length,
//! sample, method, parameter) is already there is kept as it is, so dense rows committed
//! earlier stay the ones the tables use. The two runs must be comparable: the same
//! `run.json` (model, KV type, sink, window, activations, channels) and, for every
//! calibration table both folders hold, the same bytes; a table only `FROM` holds is copied
//! with its records.
//! The lines of `FROM`'s `times.jsonl` that `--out-dir`'s lacks are appended too.

use std::path::Path;

use super::check_identity;
use super::records::{read_records, RecordLog};
use crate::common::{fail, CliResult};

/// The calibration tables a run saves beside its records.
const TABLES: &[&str] = &["static.qsta", "moments.qmom"];

/// Append `from`'s records that `into` lacks; returns how many were added.
pub fn merge_runs(from: &Path, into: &Path) -> CliResult<usize> {
    let id_path = from.join("run.json");
    let id: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&id_path)
            .map_err(|e| format!("--merge: {}: {e}", id_path.display()))?,
    )?;
    std::fs::create_dir_all(into).map_err(|e| format!("cannot create {}: {e}", into.display()))?;
    check_identity(into, &id, true, "--out-dir")?;
    for name in TABLES {
        let (src, dst) = (from.join(name), into.join(name));
        if !src.exists() {
            continue;
        }
        let theirs = std::fs::read(&src).map_err(|e| format!("{}: {e}", src.display()))?;
        if dst.exists() {
            let ours = std::fs::read(&dst).map_err(|e| format!("{}: {e}", dst.display()))?;
            if ours != theirs {
                return fail(format!(
                    "--merge: {} and {} differ, so their records were made with different \
                     calibrations; merge into a folder with the same table, or rerun the leg \
                     there with --resume",
                    src.display(),
                    dst.display()
                ));
            }
        } else {
            std::fs::write(&dst, &theirs).map_err(|e| format!("{}: {e}", dst.display()))?;
        }
    }
    let mut log = RecordLog::open(&into.join("records.jsonl"), true)?;
    let mut added = 0;
    for r in read_records(&from.join("records.jsonl"))? {
        if !log.has(&r.key()) {
            log.push(r)?;
            added += 1;
        }
    }
    super::times::merge_times(from, into)?;
    Ok(added)
}

#[cfg(test)]
mod tests {
    use super::super::records::Record;
    use super::*;

    fn record(method: &str, sample: usize, score: f64) -> Record {
        Record {
            task: "passkey".into(),
            length: 1024,
            sample,
            method: method.into(),
            param: None,
            sums: vec![("accuracy".into(), score)],
            units: 1,
            decisions: 4,
            local: 0,
            kv_bytes: 1.0,
            dense_kv_bytes: 1.0,
            run: None,
        }
    }

    fn run_dir(
        name: &str,
        id: &str,
        table: Option<&[u8]>,
        records: &[Record],
    ) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("qada-merge-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("run.json"), id).unwrap();
        if let Some(t) = table {
            std::fs::write(dir.join("static.qsta"), t).unwrap();
        }
        let mut log = RecordLog::open(&dir.join("records.jsonl"), false).unwrap();
        for r in records {
            log.push(r.clone()).unwrap();
        }
        dir
    }

    const ID: &str =
        r#"{"model": "m.gguf", "kv": "f16", "sink": 16, "local": 128, "activations": "f32"}"#;

    #[test]
    fn merge_adds_what_is_missing_and_keeps_what_is_there() {
        let into = run_dir("into", ID, None, &[record("dense", 0, 1.0)]);
        let from = run_dir(
            "from",
            ID,
            Some(b"table"),
            // a sum whose shortest decimal the default float parser reads 1 ulp off
            &[
                record("dense", 0, 0.0),
                record("static", 0, 9.704705159108865),
            ],
        );
        assert_eq!(merge_runs(&from, &into).unwrap(), 1);
        let merged = read_records(&into.join("records.jsonl")).unwrap();
        assert_eq!(
            merged,
            [
                record("dense", 0, 1.0),
                record("static", 0, 9.704705159108865)
            ]
        );
        assert_eq!(std::fs::read(into.join("static.qsta")).unwrap(), b"table");
        // a second merge finds nothing new
        assert_eq!(merge_runs(&from, &into).unwrap(), 0);
        for d in [into, from] {
            std::fs::remove_dir_all(d).unwrap();
        }
    }

    #[test]
    fn merge_refuses_another_setting_or_another_table() {
        let into = run_dir("into2", ID, Some(b"table a"), &[]);
        let other_kv = ID.replace("f16", "f32");
        let from = run_dir(
            "from2",
            &other_kv,
            Some(b"table a"),
            &[record("dense", 0, 1.0)],
        );
        let e = merge_runs(&from, &into).unwrap_err().to_string();
        assert!(e.contains("run.json"), "{e}");
        let from_b = run_dir("from3", ID, Some(b"table b"), &[record("dense", 0, 1.0)]);
        let e = merge_runs(&from_b, &into).unwrap_err().to_string();
        assert!(e.contains("static.qsta") && e.contains("differ"), "{e}");
        assert!(read_records(&into.join("records.jsonl"))
            .unwrap()
            .is_empty());
        for d in [into, from, from_b] {
            std::fs::remove_dir_all(d).unwrap();
        }
    }

    #[test]
    fn a_run_from_before_the_channels_flag_counts_as_eight_channels() {
        // ID names no channels: such runs scored with the default 8
        let into = run_dir("into4", ID, None, &[]);
        let eight = ID.replace('}', r#", "channels": 8}"#);
        let from = run_dir("from4", &eight, None, &[record("dense", 0, 1.0)]);
        assert_eq!(merge_runs(&from, &into).unwrap(), 1);
        let sixteen = ID.replace('}', r#", "channels": 16}"#);
        let from16 = run_dir("from5", &sixteen, None, &[record("dense", 1, 1.0)]);
        let e = merge_runs(&from16, &into).unwrap_err().to_string();
        assert!(e.contains("--channels"), "{e}");
        for d in [into, from, from16] {
            std::fs::remove_dir_all(d).unwrap();
        }
    }
}
