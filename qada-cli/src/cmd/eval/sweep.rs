//! Running a sweep: per (task, length), `samples` prompts, each prefilled once densely and
//! answered (or teacher-forced, for fidelity) under every configuration from the checkpoint
//! after prefill. Each (prompt, configuration) becomes a [`Record`] the moment it finishes.
//!
//! Answer-scored tasks run dense on every sample first; the other configurations run only
//! where dense reaches the gate (unless `--no-gate`), so no time goes into curves of a task the
//! model cannot do with full attention. Each sample has its own session, so its checkpoint
//! after prefill stays restorable until the gate is known: a prompt is prefilled once, whatever
//! the gate decides (the cache of a session holds one prompt, so `samples` prompts are held at
//! once).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use qada_eval::tasks::{answer, dense_prefill};
use qada_eval::{
    FidelityReference, FidelityTotals, PasskeyTask, RulerPrompts, RulerTask, TaskPrompt,
};
use qada_kv::{KvDtype, WindowConfig};
use qada_model::{Model, Session, SessionCheckpoint, SessionOptions};
use qada_stats::MomentTable;

use super::configs::{setup, Config};
use super::progress::SweepProgress;
use super::records::{key, Record, RecordLog};
use super::rows::{dense_accuracy, ACCURACY, GATE};
use crate::common::{fail, CliResult};
use crate::corpus::{Corpus, Part};

/// A task `qada eval` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvalTask {
    Passkey,
    Fidelity,
    Ruler(RulerTask),
}

impl EvalTask {
    /// Every task, in the order a run takes them.
    pub fn all() -> Vec<EvalTask> {
        let mut v = vec![EvalTask::Passkey];
        v.extend(RulerTask::ALL.map(EvalTask::Ruler));
        v.push(EvalTask::Fidelity);
        v
    }

    pub fn name(self) -> &'static str {
        match self {
            EvalTask::Passkey => "passkey",
            EvalTask::Fidelity => "fidelity",
            EvalTask::Ruler(t) => t.name(),
        }
    }

    /// The tasks of a comma-separated `--task` list: task names, `ruler` (its seven tasks)
    /// or `all`; each once, in run order.
    pub fn parse_list(list: &str) -> CliResult<Vec<EvalTask>> {
        let mut asked = Vec::new();
        for name in list.split(',').map(str::trim) {
            match name {
                "all" => asked.extend(Self::all()),
                "ruler" => asked.extend(RulerTask::ALL.map(EvalTask::Ruler)),
                _ => match Self::all().into_iter().find(|t| t.name() == name) {
                    Some(t) => asked.push(t),
                    None => {
                        let names: Vec<_> = Self::all().iter().map(|t| t.name()).collect();
                        return fail(format!(
                            "--task: unknown task {name:?}; use {}, ruler or all",
                            names.join(", ")
                        ));
                    }
                },
            }
        }
        Ok(Self::all()
            .into_iter()
            .filter(|t| asked.contains(t))
            .collect())
    }
}

/// The depth of sample `i` of `n`: spread evenly over `[0.1, 0.9]` (0.5 for one sample).
pub fn depth(i: usize, n: usize) -> f64 {
    if n < 2 {
        0.5
    } else {
        0.1 + 0.8 * i as f64 / (n - 1) as f64
    }
}

/// The order of the speeches fidelity's held-out texts are taken from (sample `s` from its
/// `s`-th speech on: [`crate::corpus::Corpus::running_text_from`]).
const FIDELITY_SEED: u64 = 100;

/// How fidelity's held-out texts are drawn, in every run's identity (`run.json`): 1, a seed
/// per sample (two samples could repeat a prompt); 2, [`FIDELITY_SEED`]'s order with each
/// sample from its own first speech. Records of the two do not mix.
pub const FIDELITY_TEXTS: u64 = 2;

/// Teacher-forced steps of a fidelity prompt (its last tokens), but for `eval --quick`.
pub const FIDELITY_STEPS: usize = 32;

/// The seed of a prompt: distinct per (task, length, sample), fixed across runs.
fn seed(task: EvalTask, len: usize, sample: usize) -> u64 {
    let t = EvalTask::all().iter().position(|&x| x == task).unwrap_or(0) as u64;
    (t << 48) ^ ((len as u64) << 16) ^ sample as u64
}

/// Every (task, length) of `tasks` x `lengths`, in run order (task by task).
pub fn units(tasks: &[EvalTask], lengths: &[usize]) -> Vec<(EvalTask, usize)> {
    tasks
        .iter()
        .flat_map(|&t| lengths.iter().map(move |&l| (t, l)))
        .collect()
}

/// Where one (task, length) unit's time went: the dense prefills of its prompts (for
/// fidelity, the dense reference: prefill and teacher-forced steps), and the whole.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct UnitTime {
    pub task: &'static str,
    pub length: usize,
    /// Prompts prefilled (0 when a resumed run found the unit done).
    pub prefills: usize,
    pub prefill_seconds: f64,
    /// (prompt, configuration) items run, dense included.
    pub items: usize,
    pub seconds: f64,
}

impl UnitTime {
    fn new(task: &'static str, length: usize) -> Self {
        UnitTime {
            task,
            length,
            prefills: 0,
            prefill_seconds: 0.0,
            items: 0,
            seconds: 0.0,
        }
    }

    /// The line printed above the progress bar as the unit ends.
    pub fn line(&self) -> String {
        format!(
            "{} at {} tokens: {:.1} s, of which {:.1} s in {} dense prefills ({} items)",
            self.task, self.length, self.seconds, self.prefill_seconds, self.prefills, self.items
        )
    }
}

/// Prefill `ids` densely into `session` and count the time in `time`.
fn timed_prefill(
    session: &mut Session<'_>,
    ids: &[u32],
    time: &mut UnitTime,
) -> CliResult<SessionCheckpoint> {
    let t = Instant::now();
    let cp = dense_prefill(session, ids)?;
    time.prefills += 1;
    time.prefill_seconds += t.elapsed().as_secs_f64();
    Ok(cp)
}

/// What every (task, length) of a run shares.
pub struct Sweep<'a> {
    pub model: &'a Model,
    pub corpus: &'a Corpus,
    pub cfgs: &'a [Config],
    pub table: Option<&'a Arc<MomentTable>>,
    pub samples: usize,
    pub fidelity_steps: usize,
    /// Run sparse configurations only where dense reaches [`GATE`].
    pub gate: bool,
    pub passkey: PasskeyTask<'a>,
    pub ruler: RulerPrompts<'a>,
    /// The corpus part haystacks and fidelity texts come from: the evaluation part for
    /// `qada eval`, the calibration part for `qada calibrate tau`.
    pub part: Part,
    /// Element type of the K/V cache.
    pub kv: KvDtype,
    /// Sink and local window of every configuration.
    pub window: WindowConfig,
}

impl Sweep<'_> {
    /// A progress bar over `units`, counting the items `log` holds as done.
    pub fn progress(
        &self,
        what: &str,
        units: &[(EvalTask, usize)],
        log: &RecordLog,
    ) -> SweepProgress {
        let configs: Vec<(&str, Option<f64>)> = self
            .cfgs
            .iter()
            .map(|c| (c.method.as_str(), c.param))
            .collect();
        let units: Vec<(&str, usize)> = units.iter().map(|&(t, l)| (t.name(), l)).collect();
        SweepProgress::new(what, &units, self.samples, &configs, log)
    }

    /// Every (task, length) of `units` in order, on one session per sample with the sweep's
    /// cache type and window (dense between configurations), `after` called as each finishes
    /// with where its time went (also printed above the bar).
    pub fn run(
        &self,
        units: &[(EvalTask, usize)],
        log: &mut RecordLog,
        pb: &SweepProgress,
        mut after: impl FnMut(&RecordLog, &UnitTime) -> CliResult<()>,
    ) -> CliResult<()> {
        let mut sessions = (0..self.samples)
            .map(|_| {
                let options = SessionOptions {
                    kv_dtype: self.kv,
                    ..SessionOptions::new(Box::new(qada_core::Dense), self.window)
                };
                Session::new(self.model, options)
            })
            .collect::<Result<Vec<_>, _>>()?;
        for &(task, len) in units {
            pb.at(task.name(), len);
            let started = Instant::now();
            let mut time = UnitTime::new(task.name(), len);
            match task {
                EvalTask::Fidelity => self.fidelity(&mut sessions[0], len, log, pb, &mut time)?,
                _ => self.answer_task(&mut sessions, task, len, log, pb, &mut time)?,
            }
            time.seconds = started.elapsed().as_secs_f64();
            if time.items > 0 {
                pb.println(time.line());
            }
            after(log, &time)?;
        }
        Ok(())
    }

    /// Every answer-scored prompt of `units` as one JSON line each in `path` (task, length,
    /// sample, depth, ids, expected, needles and haystack as token ranges); fidelity has no
    /// prompt of its own and is left out. Returns how many were written.
    pub fn write_prompts(&self, units: &[(EvalTask, usize)], path: &Path) -> CliResult<usize> {
        let mut out = String::new();
        let mut n = 0;
        for &(task, len) in units {
            if task == EvalTask::Fidelity {
                continue;
            }
            for s in 0..self.samples {
                let p = self.prompt(task, len, s)?;
                let range = |r: &std::ops::Range<usize>| [r.start, r.end];
                let line = serde_json::json!({
                    "task": p.task,
                    "length": len,
                    "sample": s,
                    "samples": self.samples,
                    "depth": p.depth,
                    "expected": p.expected,
                    "answer_tokens": p.answer_tokens,
                    "needles": p.needles.iter().map(range).collect::<Vec<_>>(),
                    "haystack": range(&p.haystack),
                    "ids": p.ids,
                });
                out.push_str(&line.to_string());
                out.push('\n');
                n += 1;
            }
        }
        std::fs::write(path, out).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(n)
    }

    /// Prompt `sample` of an answer-scored task at `len` tokens.
    fn prompt(&self, task: EvalTask, len: usize, sample: usize) -> CliResult<TaskPrompt> {
        let hay = self
            .corpus
            .running_text(self.part, (len * 8).max(60_000), 7 + sample as u64);
        let (d, s) = (depth(sample, self.samples), seed(task, len, sample));
        let p = match task {
            EvalTask::Passkey => self
                .passkey
                .trials(&hay, &[len], &[d], s)?
                .pop()
                .ok_or("the passkey task made no prompt")?
                .to_task(),
            EvalTask::Ruler(t) => self.ruler.prompt(t, &hay, len, d, s)?,
            EvalTask::Fidelity => return fail("fidelity has no answer to score"),
        };
        Ok(p)
    }

    /// Run configuration `c` on the prompt behind `cp` and record its answer's score.
    fn answer_one(
        &self,
        session: &mut Session<'_>,
        cp: &SessionCheckpoint,
        p: &TaskPrompt,
        sample: usize,
        c: &Config,
        log: &mut RecordLog,
    ) -> CliResult<()> {
        setup(session, cp, c, self.table)?;
        let text = answer(session, p.answer_tokens)?;
        let sums = vec![(ACCURACY.to_string(), p.score(&text))];
        let r = Record::new(
            p.task,
            p.len(),
            sample,
            &c.method,
            c.param,
            sums,
            1,
            session.accounting(),
        );
        log.push(r)
    }

    /// One answer-scored (task, length): dense on every sample, each in its own session of
    /// `sessions` (one per sample), then, where dense reaches the gate, every other
    /// configuration from each sample's checkpoint. Records already in `log` are skipped.
    pub fn answer_task(
        &self,
        sessions: &mut [Session<'_>],
        task: EvalTask,
        len: usize,
        log: &mut RecordLog,
        pb: &SweepProgress,
        time: &mut UnitTime,
    ) -> CliResult<()> {
        let name = task.name();
        let (dense, rest) = self.cfgs.split_first().ok_or("no configuration to run")?;
        if sessions.len() < self.samples {
            return fail(format!(
                "{} sessions for {} samples",
                sessions.len(),
                self.samples
            ));
        }
        // per sample, its prompt and checkpoint in its own session once prefilled here
        let mut prefilled: Vec<Option<(TaskPrompt, SessionCheckpoint)>> =
            (0..self.samples).map(|_| None).collect();
        for (s, session) in sessions.iter_mut().enumerate().take(self.samples) {
            if log.has(&key(name, len, s, &dense.method, dense.param)) {
                continue;
            }
            let p = self.prompt(task, len, s)?;
            let cp = timed_prefill(session, &p.ids, time)?;
            self.answer_one(session, &cp, &p, s, dense, log)?;
            time.items += 1;
            prefilled[s] = Some((p, cp));
            pb.done(len, 1);
        }
        let records: Vec<Record> = log.of(name, len).cloned().collect();
        let dense_acc = dense_accuracy(&records)
            .get(&(name.to_string(), len))
            .map_or(0.0, |x| x.0);
        if self.gate && dense_acc < GATE {
            let passed_over = (0..self.samples)
                .flat_map(|s| {
                    rest.iter()
                        .map(move |c| key(name, len, s, &c.method, c.param))
                })
                .filter(|k| !log.has(k))
                .count();
            pb.done(len, passed_over);
            pb.println(format!(
                "{name} at {len} tokens: dense accuracy {dense_acc:.2} < {GATE}, other methods skipped"
            ));
            return Ok(());
        }
        for ((s, session), kept) in sessions.iter_mut().enumerate().zip(prefilled) {
            let todo: Vec<&Config> = rest
                .iter()
                .filter(|c| !log.has(&key(name, len, s, &c.method, c.param)))
                .collect();
            if todo.is_empty() {
                continue;
            }
            // a sample whose dense record a resumed run found is prefilled now
            let (p, cp) = match kept {
                Some(kept) => kept,
                None => {
                    let p = self.prompt(task, len, s)?;
                    let cp = timed_prefill(session, &p.ids, time)?;
                    (p, cp)
                }
            };
            for c in todo {
                self.answer_one(session, &cp, &p, s, c, log)?;
                time.items += 1;
                pb.done(len, 1);
            }
        }
        Ok(())
    }

    /// Fidelity at `len` tokens: per sample, a held-out text of `len` tokens, the last
    /// `fidelity_steps` teacher-forced under every configuration against dense.
    pub fn fidelity(
        &self,
        session: &mut Session<'_>,
        len: usize,
        log: &mut RecordLog,
        pb: &SweepProgress,
        time: &mut UnitTime,
    ) -> CliResult<()> {
        let n = self.fidelity_steps;
        if len <= n + 1 {
            return fail(format!(
                "fidelity at {len} tokens: the length must exceed the {n} teacher-forced steps"
            ));
        }
        let t = len - n;
        for s in 0..self.samples {
            let todo: Vec<&Config> = self
                .cfgs
                .iter()
                .filter(|c| !log.has(&key("fidelity", len, s, &c.method, c.param)))
                .collect();
            if todo.is_empty() {
                continue;
            }
            // one order of the speeches, each sample from its own first speech: samples
            // of seeds of their own could start with the same long speech and repeat a prompt
            let text = self
                .corpus
                .running_text_from(self.part, (len + 1) * 8, FIDELITY_SEED, s);
            let ids = self.model.tokenizer().encode(&text)?;
            if ids.len() < len + 1 {
                return fail(format!(
                    "the {:?} part of the corpus gave {} tokens, fidelity at {len} needs {}",
                    self.part,
                    ids.len(),
                    len + 1
                ));
            }
            let started = Instant::now();
            let reference = FidelityReference::new(session, &ids, t, n)?;
            time.prefills += 1;
            time.prefill_seconds += started.elapsed().as_secs_f64();
            for c in todo {
                setup(session, reference.checkpoint(), c, self.table)?;
                let mut totals = FidelityTotals::default();
                for step in reference.compare(session)? {
                    totals.add(&step);
                }
                let sums = vec![
                    ("nll".to_string(), totals.nll),
                    ("delta_nll".to_string(), totals.delta_nll),
                    ("top1_agreement".to_string(), totals.top1_agreement),
                    ("kl".to_string(), totals.kl),
                ];
                let r = Record::new(
                    "fidelity",
                    len,
                    s,
                    &c.method,
                    c.param,
                    sums,
                    totals.steps,
                    session.accounting(),
                );
                log.push(r)?;
                time.items += 1;
                pb.done(len, 1);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_lists_expand_groups_keep_run_order_and_name_unknown_tasks() {
        let names = |s: &str| -> Vec<&str> {
            EvalTask::parse_list(s)
                .unwrap()
                .iter()
                .map(|t| t.name())
                .collect()
        };
        assert_eq!(names("fidelity,passkey,passkey"), ["passkey", "fidelity"]);
        assert_eq!(names("ruler").len(), 7);
        assert_eq!(names("all").len(), 9);
        assert_eq!(names("vt, cwe"), ["vt", "cwe"]);
        let e = EvalTask::parse_list("vt,needle").unwrap_err().to_string();
        assert!(
            e.contains("\"needle\"") && e.contains("niah-multikey"),
            "{e}"
        );
    }

    #[test]
    fn depths_spread_and_seeds_differ() {
        assert_eq!(depth(0, 1), 0.5);
        assert_eq!((depth(0, 5), depth(4, 5)), (0.1, 0.9));
        let a = seed(EvalTask::Passkey, 1024, 0);
        assert_ne!(a, seed(EvalTask::Passkey, 1024, 1));
        assert_ne!(a, seed(EvalTask::Passkey, 2048, 0));
        assert_ne!(a, seed(EvalTask::Ruler(RulerTask::Vt), 1024, 0));
    }
}
