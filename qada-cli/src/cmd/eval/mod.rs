//! `qada eval`: quality against sparsity on a real model, as the paper's Figure 4.
//!
//! Two tasks, each with one dense prefill per prompt shared by every configuration (the
//! session is checkpointed after prefill and restored for each):
//! - **passkey** (a RULER-style needle): a 5-digit pass key hidden at a depth of real corpus
//!   text, asked for at the end in the chat template; success when the answer contains it.
//! - **fidelity**: held-out corpus text, dense prefill of `T` tokens, then `N` teacher-forced
//!   steps under each criterion, compared with dense: negative log-likelihood of the true
//!   tokens, top-1 agreement, KL(dense || sparse).
//!
//! Configurations: dense and window (the two ends), oracle, approx with current moments and
//! approx with calibration moments over `tau`, static over `alpha`.
//!
//! The tasks are `qada_model::eval` and the metrics `qada_core::metrics`; this module plans the
//! sweep and runs it, [`report`] writes what it found.

use std::path::PathBuf;
use std::sync::Arc;

use qada_core::{
    Accounting, Approx, Dense, LocalityCriterion, Oracle, Static, StaticTable, Tau, Window,
};
use qada_kv::{KvDtype, MomentsMode, WindowConfig};
use qada_model::eval::{dense_prefill, passkey, FidelityTotals};
use qada_model::{FidelityReference, Model, PasskeyTask, Session, SessionOptions};
use qada_stats::MomentTable;

use super::calibrate::{corpus_prompts, moment_table, static_table};
use crate::common::{fail, load_model, parse_kv, progress_bar, CliResult, ModelArgs};
use crate::corpus::{Corpus, Part};

mod report;

use report::{read_rows, write_outputs, Row};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Folder of corpus speeches (default: the setup script's).
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// passkey, fidelity or all.
    #[arg(long, default_value = "all")]
    task: String,
    /// A small sweep for tests (under 5 minutes here).
    #[arg(long)]
    quick: bool,
    /// Calibration moment table (default: made here from random words of the calibration part).
    #[arg(long)]
    moments_table: Option<PathBuf>,
    /// Static table (default: made here from calibration prompts at tau_static 0.6).
    #[arg(long)]
    static_table: Option<PathBuf>,
    /// Seeds per (length, depth) of the passkey task.
    #[arg(long)]
    seeds: Option<usize>,
    /// Attention sink size.
    #[arg(long, default_value_t = 16)]
    sink: usize,
    /// Local window size.
    #[arg(long, default_value_t = 128)]
    local: usize,
    /// Element type of the KV cache: f16, f32 or q8 (as `qada generate --kv`).
    #[arg(long, default_value = "f16")]
    kv: String,
    /// Folder for CSV, JSON and PNG outputs.
    #[arg(long, default_value = "eval-out")]
    out_dir: PathBuf,
    /// Redraw plots and the summary from the JSON rows already in --out-dir; run nothing.
    #[arg(long)]
    replot: bool,
}

const FULL_TAUS: &[f64] = &[
    0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.995,
];
const FULL_ALPHAS: &[f64] = &[0.05, 0.15, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75, 0.85, 0.95];
const QUICK_TAUS: &[f64] = &[0.3, 0.6, 0.9, 0.99];
const QUICK_ALPHAS: &[f64] = &[0.25, 0.5, 0.75];

/// One point of a sweep.
struct Config {
    method: &'static str,
    param: Option<f64>,
    criterion: Arc<dyn LocalityCriterion>,
    calibrated: bool,
}

struct Plan {
    lengths: Vec<usize>,
    depths: Vec<f64>,
    seeds: usize,
    taus: &'static [f64],
    alphas: &'static [f64],
    fidelity_texts: usize,
    fidelity_len: usize,
    fidelity_steps: usize,
    moments_len: usize,
    static_prompts: usize,
    static_len: usize,
}

fn configs(plan: &Plan, statics: &StaticTable, have_table: bool) -> CliResult<Vec<Config>> {
    let mut v: Vec<Config> = vec![
        Config {
            method: "dense",
            param: None,
            criterion: Arc::new(Dense),
            calibrated: false,
        },
        Config {
            method: "window",
            param: None,
            criterion: Arc::new(Window),
            calibrated: false,
        },
    ];
    for &t in plan.taus {
        v.push(Config {
            method: "oracle",
            param: Some(t),
            criterion: Arc::new(Oracle::new(t)?),
            calibrated: false,
        });
        v.push(Config {
            method: "approx-current",
            param: Some(t),
            criterion: Arc::new(Approx::new(t)?),
            calibrated: false,
        });
        if have_table {
            v.push(Config {
                method: "approx-calibration",
                param: Some(t),
                criterion: Arc::new(Approx::new(t)?),
                calibrated: true,
            });
        }
    }
    for &a in plan.alphas {
        v.push(Config {
            method: "static",
            param: Some(a),
            criterion: Arc::new(Static::from_table(statics, a)?),
            calibrated: false,
        });
    }
    Ok(v)
}

/// Offset into the calibration table for a prompt of `t` tokens: the paper's 1024, or a
/// quarter of the prompt for prompts too short for it.
fn table_offset(t: usize) -> usize {
    1024.min(t / 4)
}

/// Prepare a restored session for one configuration.
fn setup(
    session: &mut Session<'_>,
    cp: &qada_model::SessionCheckpoint,
    c: &Config,
    table: Option<&Arc<MomentTable>>,
) -> CliResult<()> {
    session.restore(cp)?;
    session.set_criterion(Box::new(c.criterion.clone()));
    if c.calibrated {
        let table = table
            .expect("calibrated configs exist only with a table")
            .clone();
        let offset = table_offset(session.len());
        session.set_moments_mode(MomentsMode::Calibration { table, offset })?;
    }
    Ok(())
}

/// The decisions of every run of one configuration, merged.
#[derive(Default)]
struct Decisions(Option<Accounting>);

impl Decisions {
    fn add(&mut self, a: &Accounting) {
        match &mut self.0 {
            Some(x) => x.merge(a),
            None => self.0 = Some(a.clone()),
        }
    }
    fn sparsity(&self) -> f64 {
        self.0.as_ref().map_or(f64::NAN, |a| a.sparsity())
    }
}

/// The passkey task: per seed, one haystack and a prompt per (length, depth), each prefilled
/// once and answered under every configuration.
/// A session's options: dense to start, the given window and cache element type.
fn session_options(window: WindowConfig, kv: KvDtype) -> SessionOptions {
    SessionOptions {
        kv_dtype: kv,
        ..SessionOptions::new(Box::new(Dense), window)
    }
}

fn passkey(
    model: &Model,
    corpus: &Corpus,
    plan: &Plan,
    cfgs: &[Config],
    table: Option<&Arc<MomentTable>>,
    window: WindowConfig,
    kv: KvDtype,
) -> CliResult<Vec<Row>> {
    let task = PasskeyTask::new(&model.tokenizer)?;
    let n_trials = plan.lengths.len() * plan.depths.len() * plan.seeds;
    let pb = progress_bar((n_trials * cfgs.len()) as u64, "passkey");
    // per config: decisions, sum of scores, trials
    let mut accs: Vec<(Decisions, f64, u64)> = cfgs
        .iter()
        .map(|_| (Decisions::default(), 0.0, 0))
        .collect();
    let mut session = Session::new(model, session_options(window, kv))?;
    for seed in 0..plan.seeds as u64 {
        let hay = corpus.running_text(Part::Evaluation, 60_000, 7 + seed);
        for prompt in task.trials(&hay, &plan.lengths, &plan.depths, 1000 + seed)? {
            let cp = dense_prefill(&mut session, &prompt.ids)?;
            for (c, acc) in cfgs.iter().zip(accs.iter_mut()) {
                setup(&mut session, &cp, c, table)?;
                let answer = passkey::answer(&mut session)?;
                acc.0.add(session.accounting());
                acc.1 += prompt.score(&answer);
                acc.2 += 1;
                pb.inc(1);
            }
        }
    }
    pb.finish_and_clear();
    Ok(cfgs
        .iter()
        .zip(&accs)
        .map(|(c, (decisions, sum, count))| Row {
            task: "passkey".into(),
            method: c.method.into(),
            param: c.param,
            sparsity: decisions.sparsity(),
            metric: "accuracy".into(),
            value: sum / (*count).max(1) as f64,
            count: *count,
        })
        .collect())
}

/// The fidelity task: per text, one dense reference, then the teacher-forced steps under
/// every configuration.
fn fidelity(
    model: &Model,
    corpus: &Corpus,
    plan: &Plan,
    cfgs: &[Config],
    table: Option<&Arc<MomentTable>>,
    window: WindowConfig,
    kv: KvDtype,
) -> CliResult<Vec<Row>> {
    let tok = &model.tokenizer;
    let (t, n) = (plan.fidelity_len, plan.fidelity_steps);
    let pb = progress_bar((plan.fidelity_texts * cfgs.len()) as u64, "fidelity");
    let mut session = Session::new(model, session_options(window, kv))?;
    let mut accs: Vec<(Decisions, FidelityTotals)> = cfgs
        .iter()
        .map(|_| (Decisions::default(), FidelityTotals::default()))
        .collect();
    for text_i in 0..plan.fidelity_texts {
        let text = corpus.running_text(Part::Evaluation, (t + n) * 8, 100 + text_i as u64);
        let ids = tok.encode(&text)?;
        if ids.len() < t + n + 1 {
            return fail("the evaluation corpus is too short for --fidelity length");
        }
        let reference = FidelityReference::new(&mut session, &ids, t, n)?;
        for (c, acc) in cfgs.iter().zip(accs.iter_mut()) {
            setup(&mut session, reference.checkpoint(), c, table)?;
            for step in reference.compare(&mut session)? {
                acc.1.add(&step);
            }
            acc.0.add(session.accounting());
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    let mut rows = Vec::new();
    for (c, (decisions, totals)) in cfgs.iter().zip(&accs) {
        let m = totals.means();
        for (metric, value) in [
            ("nll", m.nll),
            ("delta_nll", m.delta_nll),
            ("top1_agreement", m.top1_agreement),
            ("kl", m.kl),
        ] {
            rows.push(Row {
                task: "fidelity".into(),
                method: c.method.into(),
                param: c.param,
                sparsity: decisions.sparsity(),
                metric: metric.into(),
                value,
                count: totals.steps,
            });
        }
    }
    Ok(rows)
}

pub fn run(a: Args) -> CliResult<()> {
    let (do_passkey, do_fidelity) = match a.task.as_str() {
        "all" => (true, true),
        "passkey" => (true, false),
        "fidelity" => (false, true),
        t => return fail(format!("--task {t:?}: use passkey, fidelity or all")),
    };
    if a.replot {
        let mut summary = String::new();
        for (task, wanted) in [("passkey", do_passkey), ("fidelity", do_fidelity)] {
            let path = a.out_dir.join(format!("{task}.json"));
            if !wanted || !path.exists() {
                continue;
            }
            let rows = read_rows(&path)?;
            write_outputs(&a.out_dir, task, &rows, &mut summary)?;
        }
        std::fs::write(a.out_dir.join("summary.md"), &summary)?;
        println!("{summary}");
        return Ok(());
    }
    let model = load_model(&a.model)?;
    let corpus = Corpus::load(a.corpus.as_deref())?;
    let window = WindowConfig::new(a.sink, a.local)?;
    let kv = parse_kv(&a.kv)?;
    let ctx = model.config.context_length;
    let plan = if a.quick {
        Plan {
            lengths: vec![1024, 2048],
            depths: vec![0.1, 0.5, 0.9],
            seeds: a.seeds.unwrap_or(1),
            taus: QUICK_TAUS,
            alphas: QUICK_ALPHAS,
            fidelity_texts: 1,
            fidelity_len: 1024,
            fidelity_steps: 16,
            moments_len: 2048.min(ctx),
            static_prompts: 1,
            static_len: 1024,
        }
    } else {
        Plan {
            lengths: vec![1024, 2048, 4096, 7680],
            depths: vec![0.1, 0.3, 0.5, 0.7, 0.9],
            seeds: a.seeds.unwrap_or(2),
            taus: FULL_TAUS,
            alphas: FULL_ALPHAS,
            fidelity_texts: 3,
            fidelity_len: 4096,
            fidelity_steps: 32,
            moments_len: ctx,
            static_prompts: 4,
            static_len: 2048,
        }
    };
    if plan.lengths.iter().any(|&l| l + 16 > ctx) {
        return fail(format!(
            "the passkey lengths {:?} need a context of at least {}",
            plan.lengths,
            plan.lengths.iter().max().unwrap_or(&0) + 16
        ));
    }
    std::fs::create_dir_all(&a.out_dir)
        .map_err(|e| format!("cannot create {}: {e}", a.out_dir.display()))?;
    let started = std::time::Instant::now();
    let table = match &a.moments_table {
        Some(p) => MomentTable::load(p, Some(&model.signature()))
            .map_err(|e| format!("{}: {e}", p.display()))?,
        None => {
            eprintln!(
                "calibrating moments: random words from pre-{} speeches, {} tokens",
                crate::corpus::SPLIT_YEAR,
                plan.moments_len
            );
            moment_table(&model, &corpus, plan.moments_len, 256, 0)?
        }
    };
    let table = Arc::new(table);
    let statics = match &a.static_table {
        Some(p) => StaticTable::load(p, Some(&model.signature()))
            .map_err(|e| format!("{}: {e}", p.display()))?,
        None => {
            eprintln!(
                "calibrating static heads: {} prompts of {} tokens from pre-{} speeches",
                plan.static_prompts,
                plan.static_len,
                crate::corpus::SPLIT_YEAR
            );
            let prompts = corpus_prompts(&model, &corpus, plan.static_prompts, plan.static_len, 0)?;
            static_table(
                &model,
                &prompts,
                window,
                32.min(plan.static_len / 4),
                Tau::new(0.6)?,
            )?
        }
    };
    let cfgs = configs(&plan, &statics, true)?;
    let mut summary = String::new();
    let mut all_rows = Vec::new();
    if do_passkey {
        let rows = passkey(&model, &corpus, &plan, &cfgs, Some(&table), window, kv)?;
        write_outputs(&a.out_dir, "passkey", &rows, &mut summary)?;
        all_rows.extend(rows);
    }
    if do_fidelity {
        let rows = fidelity(&model, &corpus, &plan, &cfgs, Some(&table), window, kv)?;
        write_outputs(&a.out_dir, "fidelity", &rows, &mut summary)?;
        all_rows.extend(rows);
    }
    std::fs::write(a.out_dir.join("summary.md"), &summary)?;
    println!("{summary}");
    eprintln!(
        "{} rows in {:.1} s; CSV, JSON and PNG in {}",
        all_rows.len(),
        started.elapsed().as_secs_f64(),
        a.out_dir.display()
    );
    Ok(())
}
