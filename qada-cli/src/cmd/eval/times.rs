//! `times.jsonl`: where a run's time went, a line per (task, length) unit as it finishes (see
//! [`UnitTime`]), named by the run like the records. A resumed run appends to it, so a unit
//! resumed halfway has two lines; `--merge` appends the lines of each shard that the folder
//! lacks. Only records enter the tables, never these times.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::records::open_log;
use super::sweep::UnitTime;
use crate::common::CliResult;

/// The file name in a run's folder.
pub const TIMES: &str = "times.jsonl";

/// An open `times.jsonl`.
pub struct TimeLog {
    path: PathBuf,
    file: File,
    run: Value,
}

impl TimeLog {
    /// `times.jsonl` in `dir`, started over unless `resume`; each line carries `run` (see
    /// [`crate::host::run_info`]).
    pub fn open(dir: &Path, resume: bool, run: Value) -> CliResult<Self> {
        let path = dir.join(TIMES);
        let file = open_log(&path, resume)?;
        Ok(TimeLog { path, file, run })
    }

    /// Append the unit's line; a unit in which nothing ran (all done before) writes none.
    pub fn push(&mut self, t: &UnitTime) -> CliResult<()> {
        if t.items == 0 {
            return Ok(());
        }
        let mut line = serde_json::to_value(t)?;
        line["run"] = self.run.clone();
        writeln!(self.file, "{line}")
            .and_then(|_| self.file.flush())
            .map_err(|e| format!("cannot write {}: {e}", self.path.display()).into())
    }
}

/// Append the lines of `from`'s `times.jsonl` that `into`'s lacks; returns how many. A folder
/// without one (a run from before the file existed) adds none.
pub fn merge_times(from: &Path, into: &Path) -> CliResult<usize> {
    let read = |dir: &Path| -> CliResult<String> {
        let p = dir.join(TIMES);
        match std::fs::read_to_string(&p) {
            Ok(s) => Ok(s),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
            Err(e) => Err(format!("cannot read {}: {e}", p.display()).into()),
        }
    };
    let (ours, theirs) = (read(into)?, read(from)?);
    let have: HashSet<&str> = ours.lines().collect();
    let new: Vec<&str> = theirs
        .lines()
        .filter(|l| !l.trim().is_empty() && !have.contains(l))
        .collect();
    if new.is_empty() {
        return Ok(0);
    }
    let path = into.join(TIMES);
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    for l in &new {
        writeln!(f, "{l}").map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(new.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(task: &'static str, items: usize) -> UnitTime {
        UnitTime {
            task,
            length: 1024,
            prefills: 1,
            prefill_seconds: 1.5,
            items,
            seconds: 2.0,
        }
    }

    fn lines(dir: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(dir.join(TIMES))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn units_that_ran_are_logged_resumed_runs_append_and_merge_adds_only_new_lines() {
        let base = std::env::temp_dir().join(format!("qada-times-{}", std::process::id()));
        let (a, b) = (base.join("a"), base.join("b"));
        for d in [&a, &b] {
            std::fs::create_dir_all(d).unwrap();
        }
        let run = serde_json::json!({"commit": "abc"});
        let mut log = TimeLog::open(&a, false, run.clone()).unwrap();
        log.push(&unit("passkey", 5)).unwrap();
        log.push(&unit("vt", 0)).unwrap(); // nothing ran: no line
        drop(log);
        let got = lines(&a);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0]["task"], "passkey");
        assert_eq!(got[0]["prefill_seconds"], 1.5);
        assert_eq!(got[0]["run"], run);
        // resumed: appended; not resumed: started over
        TimeLog::open(&a, true, run.clone())
            .unwrap()
            .push(&unit("cwe", 3))
            .unwrap();
        assert_eq!(lines(&a).len(), 2);
        TimeLog::open(&b, false, run.clone())
            .unwrap()
            .push(&unit("fwe", 2))
            .unwrap();
        // into b: a's two lines are new, then nothing is
        assert_eq!(merge_times(&a, &b).unwrap(), 2);
        assert_eq!(merge_times(&a, &b).unwrap(), 0);
        let tasks: Vec<String> = lines(&b)
            .iter()
            .map(|l| l["task"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(tasks, ["fwe", "passkey", "cwe"]);
        // a folder without the file merges nothing
        let c = base.join("c");
        std::fs::create_dir_all(&c).unwrap();
        assert_eq!(merge_times(&c, &b).unwrap(), 0);
        TimeLog::open(&a, false, run).unwrap();
        assert!(lines(&a).is_empty());
        std::fs::remove_dir_all(base).unwrap();
    }
}
