//! A sweep's progress, weighed in prompt tokens: a (prompt, configuration) item counts its
//! prompt's length, so a 16k-token item moves the bar 16 times as far as a 1k one and the
//! estimate of the time left holds across lengths. Items a resumed run finds done are counted
//! before the bar starts and do not enter the rate the estimate divides by.

use indicatif::{ProgressBar, ProgressStyle};

use super::records::{key, RecordLog};

/// The progress bar of a sweep over `(task, length)` units.
pub struct SweepProgress {
    pb: ProgressBar,
}

impl SweepProgress {
    /// A bar over `units` (task name, length), each `samples` prompts under every
    /// configuration named by `configs` (method, parameter); the items `log` already holds
    /// count as done.
    pub fn new(
        what: &str,
        units: &[(&str, usize)],
        samples: usize,
        configs: &[(&str, Option<f64>)],
        log: &RecordLog,
    ) -> Self {
        let (mut total, mut done) = (0u64, 0u64);
        for &(task, len) in units {
            for s in 0..samples {
                for &(method, param) in configs {
                    total += len as u64;
                    if log.has(&key(task, len, s, method, param)) {
                        done += len as u64;
                    }
                }
            }
        }
        let pb = ProgressBar::new(total);
        pb.set_style(
            ProgressStyle::with_template(
                "{msg} [{bar:40}] {percent}% of the prompt tokens ({elapsed} so far, about {eta} \
                 left)",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        pb.set_message(what.to_string());
        pb.set_position(done);
        // record the resumed position, then estimate the rate from what this run does
        pb.tick();
        pb.reset_eta();
        SweepProgress { pb }
    }

    /// Say which unit runs now.
    pub fn at(&self, task: &str, len: usize) {
        self.pb.set_message(format!("{task} {len}"));
    }

    /// `n` items of `len`-token prompts are done (run here, or passed over by the gate).
    pub fn done(&self, len: usize, n: usize) {
        self.pb.inc((len * n) as u64);
    }

    /// A line above the bar, or on stderr where no bar is drawn (not a terminal: a
    /// scheduler's log, a pipe), so logs keep it.
    pub fn println(&self, line: String) {
        if self.pb.is_hidden() {
            eprintln!("{line}");
        } else {
            self.pb.println(line);
        }
    }

    /// Where the bar stands, in prompt tokens, and its total.
    pub fn position(&self) -> (u64, u64) {
        (self.pb.position(), self.pb.length().unwrap_or(0))
    }

    pub fn finish(&self) {
        self.pb.finish_and_clear();
    }
}
