//! Records the commit the binary is built from (`QADA_GIT_COMMIT`: HEAD's hash when the
//! binary was built, `unknown` outside a git checkout), so that `qada eval` records and
//! `qada bench` reports name it. Changes not yet committed are not visible in it.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=QADA_GIT_COMMIT={commit}");
    // build again when HEAD moves (a commit, a checkout)
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        let dir = Path::new(&dir);
        let mut watched = vec![dir.join("HEAD"), dir.join("packed-refs")];
        if let Some(head) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watched.push(dir.join(head));
        }
        if let Some(common) = git(&["rev-parse", "--git-common-dir"]) {
            let common = Path::new(&common);
            watched.push(common.join("packed-refs"));
            if let Some(head) = git(&["symbolic-ref", "-q", "HEAD"]) {
                watched.push(common.join(head));
            }
        }
        for f in watched {
            println!("cargo:rerun-if-changed={}", f.display());
        }
    }
}
