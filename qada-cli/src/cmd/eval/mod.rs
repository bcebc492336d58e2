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

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use indicatif::ProgressBar;
use qada_core::{
    Accounting, Approx, Dense, LocalityCriterion, Oracle, Static, StaticTable, Tau, Window,
};
use qada_kv::{MomentsMode, WindowConfig};
use qada_model::{Model, Sampler, SamplingParams, Session, SessionOptions, StreamDecoder};
use qada_stats::MomentTable;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use super::calibrate::{corpus_prompts, moment_table, static_table};
use crate::common::{fail, load_model, progress_bar, CliResult, ModelArgs};
use crate::corpus::{Corpus, Part};
use crate::plot::{self, Series};

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
/// Sparsities at which methods are compared in the summary table.
pub const MATCHED: &[f64] = &[0.5, 0.7, 0.85, 0.9];

/// One point of a sweep.
struct Config {
    method: &'static str,
    param: Option<f64>,
    criterion: Arc<dyn LocalityCriterion>,
    calibrated: bool,
}

struct Shared<C: ?Sized>(Arc<C>);
impl<C: LocalityCriterion + ?Sized> LocalityCriterion for Shared<C> {
    fn decide(&self, input: &qada_core::HeadInput<'_>) -> qada_core::Result<qada_core::Decision> {
        self.0.decide(input)
    }
    fn name(&self) -> &str {
        self.0.name()
    }
    fn decision_flops(&self, d: usize, n: usize) -> u64 {
        self.0.decision_flops(d, n)
    }
}

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

/// Names in first-seen order, each once.
fn unique<'a>(it: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut seen = std::collections::BTreeSet::new();
    it.filter(|x| seen.insert(*x)).collect()
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
    session.set_criterion(Box::new(Shared(c.criterion.clone())));
    if c.calibrated {
        let table = table
            .expect("calibrated configs exist only with a table")
            .clone();
        let offset = table_offset(session.len());
        session.set_moments_mode(MomentsMode::Calibration { table, offset })?;
    }
    Ok(())
}

struct Acc {
    acc: Option<Accounting>,
    sum: f64,
    count: u64,
}

impl Acc {
    fn add(&mut self, a: &Accounting, value: f64) {
        match &mut self.acc {
            Some(x) => x.merge(a),
            None => self.acc = Some(a.clone()),
        }
        self.sum += value;
        self.count += 1;
    }
    fn sparsity(&self) -> f64 {
        self.acc.as_ref().map_or(f64::NAN, |a| a.sparsity())
    }
}

fn passkey(
    model: &Model,
    corpus: &Corpus,
    plan: &Plan,
    cfgs: &[Config],
    table: Option<&Arc<MomentTable>>,
    window: WindowConfig,
) -> CliResult<Vec<Row>> {
    let tok = &model.tokenizer;
    let chat = tok.chat_template().ok_or(
        "the passkey task asks its question in the chat template, and this model has none",
    )?;
    let n_trials = plan.lengths.len() * plan.depths.len() * plan.seeds;
    let pb: ProgressBar = progress_bar((n_trials * cfgs.len()) as u64, "passkey");
    let mut accs: Vec<Acc> = cfgs
        .iter()
        .map(|_| Acc {
            acc: None,
            sum: 0.0,
            count: 0,
        })
        .collect();
    let mut session = Session::new(model, SessionOptions::new(Box::new(Dense), window))?;
    let rendered = chat.render_user("\u{1}", None);
    let (pre, post) = rendered.split_once('\u{1}').expect("marker");
    for seed in 0..plan.seeds {
        let mut rng = StdRng::seed_from_u64(1000 + seed as u64);
        let hay_text = corpus.running_text(Part::Evaluation, 60_000, 7 + seed as u64);
        let hay_all = tok.encode(&hay_text)?;
        for &len in &plan.lengths {
            for &depth in &plan.depths {
                let key: u32 = rng.gen_range(10_000..100_000);
                let needle = tok.encode(&format!(
                    " The pass key is {key}. Remember it. {key} is the pass key. "
                ))?;
                let prefix = tok.encode(pre)?;
                let suffix = tok.encode(&format!(
                    "\n\nWhat is the pass key? Answer with the number only.{post}The pass key is"
                ))?;
                let overhead = prefix.len() + needle.len() + suffix.len();
                if len <= overhead + 16 || hay_all.len() < len {
                    return fail(format!(
                        "context length {len} is too short for the passkey prompt"
                    ));
                }
                let hay = &hay_all[..len - overhead];
                // the needle goes at the sentence start nearest before the depth (within 200 tokens)
                let target = (depth * hay.len() as f64) as usize;
                let boundary = |i: usize| {
                    i == 0
                        || tok
                            .token_bytes(hay[i - 1])
                            .is_some_and(|b| b.ends_with(b".") || b.ends_with(b"\n"))
                };
                let at = (target.saturating_sub(200)..=target)
                    .rev()
                    .find(|&i| boundary(i))
                    .unwrap_or(target);
                let mut ids = prefix.clone();
                ids.extend_from_slice(&hay[..at]);
                ids.extend_from_slice(&needle);
                ids.extend_from_slice(&hay[at..]);
                ids.extend_from_slice(&suffix);
                session.start_over(Box::new(Dense), MomentsMode::Update)?;
                session.prefill(&ids, &mut |_, _| {})?;
                let cp = session.checkpoint();
                for (c, acc) in cfgs.iter().zip(accs.iter_mut()) {
                    setup(&mut session, &cp, c, table)?;
                    let mut sampler = Sampler::new(SamplingParams::default())?;
                    let mut next = sampler.sample(session.logits())?;
                    let mut dec = StreamDecoder::new();
                    let mut text = String::new();
                    for _ in 0..8 {
                        if Some(next) == tok.eos() {
                            break;
                        }
                        text.push_str(&dec.push(tok, next));
                        next = sampler.sample(session.step(next)?)?;
                    }
                    text.push_str(&dec.finish());
                    let ok = text.contains(&key.to_string());
                    acc.add(session.accounting(), ok as u8 as f64);
                    pb.inc(1);
                }
            }
        }
    }
    pb.finish_and_clear();
    Ok(cfgs
        .iter()
        .zip(&accs)
        .map(|(c, a)| Row {
            task: "passkey".into(),
            method: c.method.into(),
            param: c.param,
            sparsity: a.sparsity(),
            metric: "accuracy".into(),
            value: a.sum / a.count.max(1) as f64,
            count: a.count,
        })
        .collect())
}

fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let m = logits.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let z: f64 = logits
        .iter()
        .map(|&l| (l as f64 - m).exp())
        .sum::<f64>()
        .ln()
        + m;
    logits.iter().map(|&l| l as f64 - z).collect()
}

fn argmax(v: &[f64]) -> usize {
    v.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |x| x.0)
}

fn fidelity(
    model: &Model,
    corpus: &Corpus,
    plan: &Plan,
    cfgs: &[Config],
    table: Option<&Arc<MomentTable>>,
    window: WindowConfig,
) -> CliResult<Vec<Row>> {
    let tok = &model.tokenizer;
    let (t, n) = (plan.fidelity_len, plan.fidelity_steps);
    let pb = progress_bar((plan.fidelity_texts * cfgs.len()) as u64, "fidelity");
    let mut session = Session::new(model, SessionOptions::new(Box::new(Dense), window))?;
    // per config: accounting, and sums of nll, delta nll, top-1 agreement, kl
    let mut accs: Vec<(Option<Accounting>, [f64; 4], u64)> =
        cfgs.iter().map(|_| (None, [0.0; 4], 0)).collect();
    for text_i in 0..plan.fidelity_texts {
        let text = corpus.running_text(Part::Evaluation, (t + n) * 8, 100 + text_i as u64);
        let ids = tok.encode(&text)?;
        if ids.len() < t + n + 1 {
            return fail("the evaluation corpus is too short for --fidelity length");
        }
        session.start_over(Box::new(Dense), MomentsMode::Update)?;
        session.prefill(&ids[..t], &mut |_, _| {})?;
        let cp = session.checkpoint();
        // dense reference log-probabilities at each teacher-forced step
        let mut dense: Vec<Vec<f64>> = Vec::with_capacity(n);
        for j in 0..n {
            dense.push(log_softmax(session.step(ids[t + j])?));
        }
        for (c, acc) in cfgs.iter().zip(accs.iter_mut()) {
            setup(&mut session, &cp, c, table)?;
            for j in 0..n {
                let lp = log_softmax(session.step(ids[t + j])?);
                let truth = ids[t + j + 1] as usize;
                let d = &dense[j];
                let kl: f64 = d.iter().zip(&lp).map(|(&a, &b)| a.exp() * (a - b)).sum();
                acc.1[0] += -lp[truth];
                acc.1[1] += -lp[truth] + d[truth];
                acc.1[2] += (argmax(&lp) == argmax(d)) as u8 as f64;
                acc.1[3] += kl.max(0.0);
                acc.2 += 1;
            }
            match &mut acc.0 {
                Some(a) => a.merge(session.accounting()),
                None => acc.0 = Some(session.accounting().clone()),
            }
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    let mut rows = Vec::new();
    for (c, (acc, sums, count)) in cfgs.iter().zip(&accs) {
        let sparsity = acc.as_ref().map_or(f64::NAN, |a| a.sparsity());
        for (k, metric) in ["nll", "delta_nll", "top1_agreement", "kl"]
            .into_iter()
            .enumerate()
        {
            rows.push(Row {
                task: "fidelity".into(),
                method: c.method.into(),
                param: c.param,
                sparsity,
                metric: metric.into(),
                value: sums[k] / (*count).max(1) as f64,
                count: *count,
            });
        }
    }
    Ok(rows)
}

/// Linear interpolation of `(sparsity, value)` points at sparsity `s` (None outside).
pub fn interpolate(points: &[(f64, f64)], s: f64) -> Option<f64> {
    let mut p: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .collect();
    p.sort_by(|a, b| a.0.total_cmp(&b.0));
    for w in p.windows(2) {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        if x0 <= s && s <= x1 {
            return Some(if x1 - x0 < 1e-12 {
                0.5 * (y0 + y1)
            } else {
                y0 + (y1 - y0) * (s - x0) / (x1 - x0)
            });
        }
    }
    p.iter().find(|q| (q.0 - s).abs() < 1e-9).map(|q| q.1)
}

fn write_outputs(dir: &Path, task: &str, rows: &[Row], summary: &mut String) -> CliResult<()> {
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
        for s in &series {
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
    Ok(())
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
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let v: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            let rows: Option<Vec<Row>> = v
                .as_array()
                .map(|a| a.iter().filter_map(Row::from_json).collect());
            let rows =
                rows.ok_or_else(|| format!("{}: not an array of eval rows", path.display()))?;
            write_outputs(&a.out_dir, task, &rows, &mut summary)?;
        }
        std::fs::write(a.out_dir.join("summary.md"), &summary)?;
        println!("{summary}");
        return Ok(());
    }
    let model = load_model(&a.model)?;
    let corpus = Corpus::load(a.corpus.as_deref())?;
    let window = WindowConfig::new(a.sink, a.local)?;
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
        let rows = passkey(&model, &corpus, &plan, &cfgs, Some(&table), window)?;
        write_outputs(&a.out_dir, "passkey", &rows, &mut summary)?;
        all_rows.extend(rows);
    }
    if do_fidelity {
        let rows = fidelity(&model, &corpus, &plan, &cfgs, Some(&table), window)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolation_is_linear_between_points_and_none_outside() {
        let p = [(0.2, 1.0), (0.6, 0.0), (0.4, 0.5)];
        assert_eq!(interpolate(&p, 0.5), Some(0.25));
        assert_eq!(interpolate(&p, 0.2), Some(1.0));
        assert_eq!(interpolate(&p, 0.9), None);
        assert_eq!(interpolate(&[(0.3, 2.0)], 0.3), Some(2.0));
    }
}
