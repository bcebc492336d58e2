//! `qada calibrate tau`: the criterion and threshold with the fewest K/V bytes whose quality
//! stays within a budget of dense, measured on calibration text only.
//!
//! The sweep is `qada eval`'s (prefill once per prompt, every configuration from its
//! checkpoint, records resumable) with haystacks and held-out text from the calibration part
//! of the corpus (speeches before 1900). A configuration qualifies when, on every task where
//! dense reaches the gate, its score is at least dense's less `--budget`: for answer-scored
//! tasks the mean accuracy (with a few prompts, no answer dense gets may be lost); for
//! fidelity the one-sided Wilson lower bound, at `--confidence`, of its top-1 agreement with
//! dense over every teacher-forced step (a binomial proportion over hundreds of steps, so the
//! budget is kept with that confidence, not only on these prompts). With `--fidelity-rule
//! int8` fidelity is judged against int8 activations instead, `generate`'s default path
//! (eval's `dense-int8`, run on the same steps): a setting qualifies when its mean KL from
//! dense is at most theirs and its top-1 agreement at least theirs less the budget, so it
//! moves the next-token distribution no more than the arithmetic a user runs by default.
//! Among those, the one reading the fewest K/V bytes
//! (mean over tasks) is written as a [`Setting`]; where none qualifies, or none reads fewer
//! bytes than dense, the setting is dense.

use std::path::{Path, PathBuf};

use qada_core::Tau;
use qada_eval::{PasskeyTask, RulerPrompts};
use qada_model::ActPrecision;
use qada_model::Model;

use super::eval::configs::{configs, parse_groups, parse_list, parse_methods, Config, DENSE_INT8};
use super::eval::records::{param_text, Record, RecordLog};
use super::eval::rows::{rows, Row, ACCURACY};
use super::eval::sweep::{units, EvalTask, Sweep, FIDELITY_STEPS};
use super::eval::{check_identity, check_page, run_identity, ANSWER_ROOM};
use crate::common::{
    check_dense_below, check_output_file, fail, load_model, CacheArgs, CliResult, ModelArgs,
};
use crate::corpus::{Corpus, Part, SPLIT_YEAR};
use crate::setting::{Evidence, MethodBest, ModelId, Setting, Yardstick, FORMAT};
use statrs::distribution::{ContinuousCDF, Normal};

use qada_core::{DEFAULT_CHANNELS, DEFAULT_CLUSTERS, DEFAULT_MARGIN, DEFAULT_SELECT_PAGE};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Folder of corpus speeches (default: the setup script's).
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// Largest drop below dense allowed on any task (accuracy, or top-1 agreement).
    #[arg(long, default_value_t = 0.02)]
    budget: f64,
    /// Criteria tried, comma-separated, among approx-current, bound, mixture, hybrid, pages,
    /// certified, channels, channels-ungated and channels-union (the last five select pages of
    /// the bulk per KV group)
    /// (each at --page keys a page, 4 clusters, margin of 1 nat, --channels channels).
    #[arg(
        long,
        default_value = "approx-current,bound,mixture,hybrid,pages,channels"
    )]
    methods: String,
    /// Thresholds tried, comma-separated.
    #[arg(long, default_value = "0.5,0.7,0.8,0.9,0.95,0.99")]
    taus: String,
    /// Group modes tried, comma-separated, among head, all and mass.
    #[arg(long, default_value = "head,all")]
    groups: String,
    /// channels: key channels every bulk key is scored with, in every configuration tried and
    /// in the setting written (--resume refuses a count other than the one its records were
    /// made with, as it refuses another model, cache or window: run.json).
    #[arg(long, default_value_t = DEFAULT_CHANNELS)]
    channels: usize,
    /// Bulk keys per page of bound, hybrid and the page selections, in every configuration
    /// tried and in the setting written (--resume refuses another page, as it refuses
    /// another channel count: run.json).
    #[arg(long, default_value_t = DEFAULT_SELECT_PAGE)]
    page: usize,
    /// The setting reads the whole context (dense) while it holds fewer than this many tokens
    /// and its criterion decides from there on (written to the setting). Every length must
    /// put the steps it measures at or above it (at least this plus the 32 teacher-forced
    /// steps of fidelity), so the records are those of the criterion alone and a sweep made
    /// without it may be resumed with it. Default: the criterion decides from the first token.
    #[arg(long)]
    dense_below: Option<usize>,
    /// Calibration tasks, comma-separated (names as `qada eval --task`).
    #[arg(long, default_value = "passkey,fidelity")]
    task: String,
    /// Prompt lengths, comma-separated (default: 2048, 4096 and 8192, within the context).
    #[arg(long)]
    lengths: Option<String>,
    /// Prompts per task and length.
    #[arg(long, default_value_t = 4)]
    samples: usize,
    #[command(flatten)]
    cache: CacheArgs,
    /// Confidence of the lower bound on fidelity's top-1 agreement (one-sided Wilson; the
    /// top1 rule).
    #[arg(long, default_value_t = 0.95)]
    confidence: f64,
    /// How fidelity qualifies a setting: top1 (the lower bound of its top-1 agreement with
    /// dense within --budget of 1) or int8 (against int8 activations on the same steps, run
    /// as `dense-int8`: mean KL at most theirs, top-1 agreement at least theirs less
    /// --budget).
    #[arg(long, value_enum, default_value = "top1")]
    fidelity_rule: FidelityRule,
    /// Smallest share of the dense K/V bytes a setting must save to be chosen over dense
    /// (a criterion that saves less costs more in decisions than it saves in reads).
    #[arg(long, default_value_t = 0.05)]
    min_saving: f64,
    /// Folder for the sweep's records (resumable with --resume).
    #[arg(long, default_value = "calibrate-tau")]
    work_dir: PathBuf,
    /// Continue the sweep in --work-dir.
    #[arg(long)]
    resume: bool,
    /// The setting file written.
    #[arg(long, default_value = "setting.json")]
    out: PathBuf,
}

/// Methods a setting may use: those `generate` can run without a table.
const SETTING_METHODS: &[&str] = &[
    "approx-current",
    "bound",
    "mixture",
    "hybrid",
    "pages",
    "certified",
    "channels",
    "channels-ungated",
    "channels-union",
];

/// The `--criterion` name of a sweep method, and its group mode (`mixture@all` is mixture,
/// all).
fn criterion_of(method: &str) -> (&str, &str) {
    let (m, g) = method.split_once('@').unwrap_or((method, "head"));
    (if m == "approx-current" { "approx" } else { m }, g)
}

/// A configuration's score on a task: `accuracy`, or `top1_agreement` for fidelity.
fn metric_of(task: &str) -> &'static str {
    if task == "fidelity" {
        "top1_agreement"
    } else {
        ACCURACY
    }
}

/// How fidelity's teacher-forced steps qualify a setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FidelityRule {
    /// Top-1 agreement with dense, by its one-sided Wilson lower bound, at least 1 less the
    /// budget.
    Top1,
    /// Against int8 activations on the same steps ([`DENSE_INT8`]): mean KL from dense at
    /// most theirs, mean top-1 agreement at least theirs less the budget.
    Int8,
}

/// What qualifies a setting.
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    /// Largest drop below dense on any task.
    pub budget: f64,
    /// Smallest share of dense's bytes the chosen setting must save.
    pub min_saving: f64,
    /// The normal quantile of the confidence of fidelity's lower bound (0: the mean).
    pub z: f64,
    /// How fidelity qualifies a setting.
    pub fidelity: FidelityRule,
}

/// The one-sided Wilson lower bound of a proportion `p` observed over `n` trials, at the
/// normal quantile `z`: `(p + z^2/2n - z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)`.
pub fn wilson_lower(p: f64, n: u64, z: f64) -> f64 {
    if n == 0 {
        return 0.0;
    }
    let n = n as f64;
    let z2 = z * z;
    let centre = p + z2 / (2.0 * n);
    let half = z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).max(0.0).sqrt();
    (centre - half) / (1.0 + z2 / n)
}

/// A row's score under `rule`: fidelity's top-1 agreement by its lower bound, accuracy as is.
fn score(r: &Row, rule: &Rule) -> f64 {
    if r.task == "fidelity" {
        wilson_lower(r.value, r.count, rule.z)
    } else {
        r.value
    }
}

/// What [`choose`] found.
#[derive(Debug, PartialEq)]
pub struct Choice {
    /// The method and threshold chosen, or `None` for dense.
    pub pick: Option<(String, f64)>,
    pub kv_bytes: f64,
    pub evidence: Vec<Evidence>,
    /// Configurations compared, dense included.
    pub tried: usize,
    /// Per method (criterion and group mode), its cheapest threshold within the budget and
    /// the bytes it reads (whatever it saves), or `None` where no threshold keeps the budget.
    pub per_method: Vec<MethodBest>,
}

/// The configuration with the fewest K/V bytes (mean over `tasks`) whose score on every task
/// dense can do (a comparable-lengths row exists for dense) is at least dense's less
/// `budget` (fidelity by its lower bound, [`score`], or against int8 activations under
/// [`FidelityRule::Int8`]); dense when none qualifies or none saves at least `min_saving` of
/// dense's bytes.
pub fn choose(rows: &[Row], tasks: &[&str], rule: &Rule) -> CliResult<Choice> {
    let metric_row = |task: &str, method: &str, param: Option<f64>, metric: &str| {
        rows.iter().find(|r| {
            r.length.is_none()
                && r.task == task
                && r.method == method
                && r.param == param
                && r.metric == metric
        })
    };
    let overall = |task: &str, method: &str, param: Option<f64>| {
        metric_row(task, method, param, metric_of(task))
    };
    let kl_of = |method: &str, param: Option<f64>| {
        metric_row("fidelity", method, param, "kl").map(|r| r.value)
    };
    let judged: Vec<(&str, &Row)> = tasks
        .iter()
        .filter_map(|&t| overall(t, "dense", None).map(|d| (t, d)))
        .collect();
    if judged.is_empty() {
        return fail(
            "calibration: dense reaches the gate on no task and length; add fidelity to --task \
             or use other --lengths",
        );
    }
    let yardstick = match rule.fidelity {
        FidelityRule::Int8 if judged.iter().any(|(t, _)| *t == "fidelity") => {
            match (
                overall("fidelity", DENSE_INT8, None),
                kl_of(DENSE_INT8, None),
            ) {
                (Some(r), Some(kl)) => Some(Yardstick {
                    method: DENSE_INT8.into(),
                    top1_agreement: r.value,
                    kl,
                }),
                _ => {
                    return fail(format!(
                        "--fidelity-rule int8: no {DENSE_INT8} fidelity records to judge \
                         against (calibrate tau runs them under this rule: resume the sweep \
                         with it)"
                    ))
                }
            }
        }
        _ => None,
    };
    let mut candidates: Vec<(String, f64)> = Vec::new();
    for r in rows.iter().filter(|r| r.method != "dense") {
        if let Some(p) = r.param {
            if !candidates.contains(&(r.method.clone(), p)) {
                candidates.push((r.method.clone(), p));
            }
        }
    }
    let dense_evidence: Vec<Evidence> = judged
        .iter()
        .map(|(t, d)| Evidence {
            task: t.to_string(),
            metric: d.metric.clone(),
            dense: d.value,
            value: d.value,
            lower: None,
            kv_bytes: 1.0,
            count: d.count,
            kl: None,
            yardstick: None,
        })
        .collect();
    let mut best = Choice {
        pick: None,
        kv_bytes: 1.0,
        evidence: dense_evidence,
        tried: candidates.len() + 1,
        per_method: Vec::new(),
    };
    for (method, _) in &candidates {
        if !best.per_method.iter().any(|m| &m.method == method) {
            best.per_method.push(MethodBest {
                method: method.clone(),
                tau: None,
                kv_bytes: None,
            });
        }
    }
    'cand: for (method, p) in &candidates {
        let mut evidence = Vec::new();
        for (t, d) in &judged {
            let Some(r) = overall(t, method, Some(*p)) else {
                continue 'cand;
            };
            let fidelity = *t == "fidelity";
            let y = yardstick.clone().filter(|_| fidelity);
            let lower = (y.is_none() && score(r, rule) != r.value).then(|| score(r, rule));
            let e = Evidence {
                task: t.to_string(),
                metric: r.metric.clone(),
                dense: d.value,
                value: r.value,
                lower,
                kv_bytes: r.kv_bytes,
                count: r.count,
                kl: kl_of(method, Some(*p)).filter(|_| fidelity),
                yardstick: y,
            };
            if !(e.keeps(rule.budget) && r.kv_bytes.is_finite()) {
                continue 'cand;
            }
            evidence.push(e);
        }
        let kv = evidence.iter().map(|e| e.kv_bytes).sum::<f64>() / evidence.len() as f64;
        if let Some(m) = best.per_method.iter_mut().find(|m| &m.method == method) {
            if m.kv_bytes.is_none_or(|b| kv < b) {
                (m.tau, m.kv_bytes) = (Some(*p), Some(kv));
            }
        }
        if kv < best.kv_bytes && kv <= 1.0 - rule.min_saving {
            best.pick = Some((method.clone(), *p));
            best.kv_bytes = kv;
            best.evidence = evidence;
        }
    }
    Ok(best)
}

pub fn run(a: Args) -> CliResult<()> {
    if !(a.budget >= 0.0 && a.budget < 1.0) {
        return fail(format!("--budget must be in [0, 1), got {}", a.budget));
    }
    if !(a.confidence >= 0.5 && a.confidence < 1.0) {
        return fail(format!(
            "--confidence must be in [0.5, 1), got {}",
            a.confidence
        ));
    }
    if !(a.min_saving >= 0.0 && a.min_saving < 1.0) {
        return fail(format!(
            "--min-saving must be in [0, 1), got {}",
            a.min_saving
        ));
    }
    check_output_file("--out", &a.out)?;
    let methods = parse_methods(&a.methods)?;
    if let Some(m) = methods
        .iter()
        .find(|m| **m != "dense" && !SETTING_METHODS.contains(m))
    {
        return fail(format!(
            "--methods: {m} cannot be a setting; use some of {}",
            SETTING_METHODS.join(", ")
        ));
    }
    let groups = parse_groups(&a.groups)?;
    let taus: Vec<f64> = parse_list("--taus", &a.taus)?;
    for &t in &taus {
        Tau::new(t)?;
    }
    let tasks = EvalTask::parse_list(&a.task)?;
    let model_path = crate::common::resolve_model(a.model.model.as_deref())?;
    let model = load_model(&a.model, ActPrecision::F32)?;
    let ctx = model.config().context_length;
    let lengths: Vec<usize> = match &a.lengths {
        Some(l) => parse_list("--lengths", l)?,
        None => {
            let mut v: Vec<usize> = [2048, 4096, 8192]
                .iter()
                .map(|&l: &usize| l.min(ctx.saturating_sub(ANSWER_ROOM)))
                .collect();
            v.dedup();
            v
        }
    };
    if let Some(&l) = lengths.iter().find(|&&l| l + ANSWER_ROOM > ctx || l < 256) {
        return fail(format!(
            "--lengths: {l} must be at least 256 and leave {ANSWER_ROOM} tokens of the context \
             ({ctx}) free"
        ));
    }
    if a.samples == 0 {
        return fail("--samples must be at least 1");
    }
    if let Some(n) = a.dense_below {
        check_measured_above(n, &lengths, ctx)?;
    }
    let corpus = Corpus::load(a.corpus.as_deref())?;
    let window = a.cache.window.window()?;
    let kv = a.cache.kv;
    std::fs::create_dir_all(&a.work_dir)
        .map_err(|e| format!("cannot create {}: {e}", a.work_dir.display()))?;
    let mut methods = methods;
    if a.fidelity_rule == FidelityRule::Int8 {
        // the yardstick, run beside dense on every prompt (never a candidate: no tau)
        methods.insert(1, DENSE_INT8);
    }
    check_page(a.page, &lengths)?;
    let cfgs = configs(&methods, &taus, &[], None, &groups, a.channels, a.page)?;
    let id = run_identity(&model, &model_path, &a.cache, a.channels, a.page);
    check_identity(&a.work_dir, &id, a.resume, "--work-dir")?;
    let mut log = RecordLog::open(&a.work_dir.join("records.jsonl"), a.resume)?;
    log.name_run(crate::host::run_info(
        model.activations().name(),
        a.cache.kv.name(),
    ));
    let sweep = Sweep {
        model: &model,
        corpus: &corpus,
        cfgs: &cfgs,
        table: None,
        samples: a.samples,
        fidelity_steps: FIDELITY_STEPS,
        gate: true,
        passkey: PasskeyTask::new(model.tokenizer())?,
        ruler: RulerPrompts::new(model.tokenizer())?,
        part: Part::Calibration,
        kv,
        window,
    };
    eprintln!(
        "calibrating the setting on speeches before {SPLIT_YEAR}: {} configurations, tasks {}, \
         lengths {lengths:?}, {} samples",
        cfgs.len(),
        a.task,
        a.samples
    );
    let units = units(&tasks, &lengths);
    let pb = sweep.progress("calibrate", &units, &log);
    sweep.run(&units, &mut log, &pb, |_, _| Ok(()))?;
    pb.finish();
    let names: Vec<&str> = tasks.iter().map(|t| t.name()).collect();
    let rule = Rule {
        budget: a.budget,
        min_saving: a.min_saving,
        z: Normal::new(0.0, 1.0)?.inverse_cdf(a.confidence),
        fidelity: a.fidelity_rule,
    };
    let asked = asked(log.records(), &cfgs, &lengths, a.samples);
    let choice = choose(&rows(&asked), &names, &rule)?;
    let setting = setting_of(&a, &model, &model_path, &lengths, choice);
    std::fs::write(&a.out, serde_json::to_string_pretty(&setting)? + "\n")
        .map_err(|e| format!("cannot write {}: {e}", a.out.display()))?;
    print_choice(&setting);
    eprintln!(
        "wrote {}; use it with `qada generate --setting {}`",
        a.out.display(),
        a.out.display()
    );
    Ok(())
}

/// The records of this sweep: its configurations, lengths and first `samples` prompts. A
/// resumed work dir may hold others (taus, methods, lengths or prompts of an earlier sweep);
/// the setting is chosen among the ones asked for.
fn asked(records: &[Record], cfgs: &[Config], lengths: &[usize], samples: usize) -> Vec<Record> {
    records
        .iter()
        .filter(|r| {
            lengths.contains(&r.length)
                && r.sample < samples
                && cfgs
                    .iter()
                    .any(|c| c.method == r.method && param_text(c.param) == param_text(r.param))
        })
        .cloned()
        .collect()
}

/// Refuse a `--dense-below n` out of range, or under which some length would be measured:
/// every measured step (the first teacher-forced one of fidelity at `len - FIDELITY_STEPS + 1`
/// keys, an answer after its prompt of `len`) must see a context of at least `n`.
fn check_measured_above(n: usize, lengths: &[usize], ctx: usize) -> CliResult<()> {
    check_dense_below(n, ctx)?;
    if let Some(&l) = lengths.iter().find(|&&l| l + 1 < n + FIDELITY_STEPS) {
        return fail(format!(
            "--dense-below {n}: at length {l} the setting would run dense for some of the \
             steps measured; calibrate at lengths of at least {} (the threshold plus the {} \
             teacher-forced steps of fidelity, less one)",
            n + FIDELITY_STEPS - 1,
            FIDELITY_STEPS
        ));
    }
    Ok(())
}

/// The setting file of `choice`: the criterion, tau and group chosen (dense when none kept
/// the budget), the model it was made for, and the evidence and command that made it.
fn setting_of(
    a: &Args,
    model: &Model,
    model_path: &Path,
    lengths: &[usize],
    choice: Choice,
) -> Setting {
    let (criterion, tau, group) = match &choice.pick {
        Some((method, t)) => {
            let (c, g) = criterion_of(method);
            (c.to_string(), Some(*t), g.to_string())
        }
        None => ("dense".to_string(), None, "head".to_string()),
    };
    let model_name = model_path
        .file_name()
        .map_or(String::new(), |f| f.to_string_lossy().into_owned());
    let setting = Setting {
        format: FORMAT.into(),
        model_name,
        model: ModelId::of(model),
        criterion,
        tau,
        group,
        page: a.page,
        channels: a.channels,
        clusters: DEFAULT_CLUSTERS,
        margin: DEFAULT_MARGIN,
        dense_below: a.dense_below.filter(|_| choice.pick.is_some()),
        sink: a.cache.window.sink,
        local: a.cache.window.local,
        budget: a.budget,
        min_saving: a.min_saving,
        kv_bytes: choice.kv_bytes,
        evidence: choice.evidence,
        tried: choice.tried,
        per_method: choice.per_method,
        made_by: format!(
            "qada calibrate tau --budget {} --confidence {} --min-saving {} --methods {} --taus {} \
             --groups {} --task {} --lengths {} --samples {} --kv {} --channels {}{}{}{} \
             (speeches before {SPLIT_YEAR})",
            a.budget,
            a.confidence,
            a.min_saving,
            a.methods,
            a.taus,
            a.groups,
            a.task,
            lengths
                .iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
                .join(","),
            a.samples,
            a.cache.kv,
            a.channels,
            if a.page == DEFAULT_SELECT_PAGE {
                String::new()
            } else {
                format!(" --page {}", a.page)
            },
            a.dense_below
                .map_or(String::new(), |n| format!(" --dense-below {n}")),
            match a.fidelity_rule {
                FidelityRule::Top1 => "",
                FidelityRule::Int8 => " --fidelity-rule int8",
            }
        ),
    };
    setting
}

/// The choice and, per method, its cheapest threshold that keeps the budget (stdout).
fn print_choice(setting: &Setting) {
    println!("{}: {}", setting.describe(), setting.why());
    println!("\ncheapest threshold {}, per method:", setting.kept());
    println!("| method | tau | K/V bytes vs dense |\n|---|---|---|");
    for m in &setting.per_method {
        match (m.tau, m.kv_bytes) {
            (Some(t), Some(b)) => println!("| {} | {t} | {b:.3} |", m.method),
            _ => println!("| {} | none | - |", m.method),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qada_core::GroupMode;

    /// A rule on the means (z = 0: fidelity's bound is its mean).
    fn rule(budget: f64, min_saving: f64) -> Rule {
        Rule {
            budget,
            min_saving,
            z: 0.0,
            fidelity: FidelityRule::Top1,
        }
    }

    #[test]
    fn the_lower_bound_is_below_the_mean_tightens_with_steps_and_can_disqualify() {
        assert_eq!(wilson_lower(0.9, 100, 0.0), 0.9);
        let (few, many) = (
            wilson_lower(0.99, 100, 1.645),
            wilson_lower(0.99, 10_000, 1.645),
        );
        assert!(few < many && many < 0.99, "{few} {many}");
        assert!((0.0..1.0).contains(&wilson_lower(1.0, 384, 1.645)));
        // 0.985 over 4 x 32 steps is within 0.02 of 1 on the mean, not on its lower bound
        let rows = vec![
            row("fidelity", "dense", None, 1.0, 1.0),
            Row {
                count: 128,
                ..row("fidelity", "mixture", Some(0.7), 0.985, 0.7)
            },
        ];
        let z95 = Rule {
            z: 1.645,
            ..rule(0.02, 0.05)
        };
        assert!(choose(&rows, &["fidelity"], &rule(0.02, 0.05))
            .unwrap()
            .pick
            .is_some());
        let c = choose(&rows, &["fidelity"], &z95).unwrap();
        assert_eq!(c.pick, None);
        assert_eq!(c.per_method[0].tau, None);
    }

    fn row(task: &str, method: &str, param: Option<f64>, value: f64, kv: f64) -> Row {
        Row {
            task: task.into(),
            length: None,
            method: method.into(),
            param,
            sparsity: 1.0 - kv,
            kv_bytes: kv,
            metric: metric_of(task).into(),
            value,
            count: 4,
        }
    }

    #[test]
    fn the_int8_rule_holds_fidelity_to_int8_activations_kl_and_agreement() {
        let kl = |method: &str, param: Option<f64>, value: f64| Row {
            metric: "kl".into(),
            ..row("fidelity", method, param, value, 1.0)
        };
        let int8 = Rule {
            fidelity: FidelityRule::Int8,
            ..rule(0.02, 0.05)
        };
        let mut rows = vec![
            row("passkey", "dense", None, 1.0, 1.0),
            row("fidelity", "dense", None, 1.0, 1.0),
            kl("dense", None, 0.0),
            row("passkey", "channels@all", Some(0.95), 1.0, 0.6),
            row("fidelity", "channels@all", Some(0.95), 0.977, 0.7),
            kl("channels@all", Some(0.95), 0.0025),
            row("passkey", "channels@all", Some(0.98), 1.0, 0.8),
            row("fidelity", "channels@all", Some(0.98), 0.984, 0.84),
            kl("channels@all", Some(0.98), 0.0004),
            // agrees as often as int8 but moves the distribution more: still out
            row("passkey", "pages", Some(0.9), 1.0, 0.5),
            row("fidelity", "pages", Some(0.9), 1.0, 0.5),
            kl("pages", Some(0.9), 0.0011),
            // below int8's agreement by more than the budget, however small its KL
            row("passkey", "mixture", Some(0.9), 1.0, 0.55),
            row("fidelity", "mixture", Some(0.9), 0.95, 0.55),
            kl("mixture", Some(0.9), 0.0001),
        ];
        let tasks = ["passkey", "fidelity"];
        let e = choose(&rows, &tasks, &int8).unwrap_err().to_string();
        assert!(e.contains("no dense-int8 fidelity records"), "{e}");
        rows.push(row("fidelity", DENSE_INT8, None, 0.985, 1.0));
        rows.push(kl(DENSE_INT8, None, 0.001));
        let c = choose(&rows, &tasks, &int8).unwrap();
        assert_eq!(c.pick, Some(("channels@all".into(), 0.98)));
        let f = c.evidence.iter().find(|e| e.task == "fidelity").unwrap();
        assert_eq!(f.kl, Some(0.0004));
        assert_eq!(f.lower, None);
        let y = f.yardstick.as_ref().unwrap();
        assert_eq!((y.top1_agreement, y.kl), (0.985, 0.001));
        assert!(f.keeps(0.02) && !f.keeps(0.0));
        // the yardstick is never a candidate; under top1 on the means only pages' agreement
        // of 1 passes, and it is cheapest
        assert!(c.per_method.iter().all(|m| m.method != DENSE_INT8));
        let c = choose(&rows, &tasks, &rule(0.02, 0.05)).unwrap();
        assert_eq!(c.pick, Some(("pages".into(), 0.9)));
    }

    #[test]
    fn the_cheapest_setting_within_budget_on_every_task_wins() {
        let rows = vec![
            row("passkey", "dense", None, 1.0, 1.0),
            row("fidelity", "dense", None, 1.0, 1.0),
            // cheapest, but 0.75 on passkey: out
            row("passkey", "approx-current", Some(0.5), 0.75, 0.5),
            row("fidelity", "approx-current", Some(0.5), 1.0, 0.5),
            // within budget on both
            row("passkey", "hybrid", Some(0.9), 1.0, 0.8),
            row("fidelity", "hybrid", Some(0.9), 0.985, 0.9),
            // within budget but dearer
            row("passkey", "hybrid@all", Some(0.99), 1.0, 0.95),
            row("fidelity", "hybrid@all", Some(0.99), 1.0, 0.95),
            // a length row never counts
            Row {
                length: Some(1024),
                ..row("passkey", "mixture", Some(0.5), 1.0, 0.1)
            },
        ];
        let c = choose(&rows, &["passkey", "fidelity"], &rule(0.02, 0.05)).unwrap();
        assert_eq!(c.pick, Some(("hybrid".to_string(), 0.9)));
        assert!((c.kv_bytes - 0.85).abs() < 1e-12);
        assert_eq!(c.tried, 5);
        assert_eq!(c.evidence.len(), 2);
        let best = |m: &str| {
            let b = c.per_method.iter().find(|b| b.method == m).unwrap();
            (b.tau, b.kv_bytes)
        };
        assert_eq!(best("approx-current"), (None, None));
        assert_eq!(best("hybrid@all"), (Some(0.99), Some(0.95)));
        // a tighter budget leaves the dearer one
        let c = choose(&rows, &["passkey", "fidelity"], &rule(0.01, 0.05)).unwrap();
        assert_eq!(c.pick, Some(("hybrid@all".to_string(), 0.99)));
        // ... unless it must save more than it does
        let c = choose(&rows, &["passkey", "fidelity"], &rule(0.01, 0.06)).unwrap();
        assert_eq!(c.pick, None);
        assert_eq!(criterion_of("hybrid@all"), ("hybrid", "all"));
        assert_eq!(criterion_of("approx-current"), ("approx", "head"));
    }

    /// A resumed work dir holding tau 0.94 (cheaper, within the budget) and prompts and
    /// lengths of another sweep: asking for tau 0.95 on one length and two prompts chooses
    /// among those records only.
    #[test]
    fn a_resumed_sweep_chooses_among_the_configurations_lengths_and_prompts_asked() {
        let record = |method: &str, param: Option<f64>, length, sample, accuracy, kv| Record {
            task: "passkey".into(),
            length,
            sample,
            method: method.into(),
            param,
            sums: vec![(ACCURACY.into(), accuracy)],
            units: 1,
            decisions: 0,
            local: 0,
            kv_bytes: kv,
            dense_kv_bytes: 1.0,
            run: None,
        };
        let union = "channels-union@all";
        let mut records = Vec::new();
        for sample in 0..2 {
            records.push(record("dense", None, 8192, sample, 1.0, 1.0));
            records.push(record(union, Some(0.94), 8192, sample, 1.0, 0.5));
            records.push(record(union, Some(0.95), 8192, sample, 1.0, 0.6));
        }
        // a prompt and a length this sweep does not ask for, where 0.95 loses the answer
        records.push(record("dense", None, 8192, 2, 1.0, 1.0));
        records.push(record(union, Some(0.95), 8192, 2, 0.0, 0.6));
        records.push(record("dense", None, 4096, 0, 1.0, 1.0));
        records.push(record(union, Some(0.95), 4096, 0, 0.0, 0.6));
        let cfgs = configs(
            &["dense", "channels-union"],
            &[0.95],
            &[],
            None,
            &[GroupMode::All],
            16,
            DEFAULT_SELECT_PAGE,
        )
        .unwrap();
        let kept = asked(&records, &cfgs, &[8192], 2);
        assert_eq!(kept.len(), 4);
        assert!(kept.iter().all(|r| r.param != Some(0.94) && r.sample < 2));
        let c = choose(&rows(&kept), &["passkey"], &rule(0.02, 0.05)).unwrap();
        assert_eq!(c.pick, Some((union.to_string(), 0.95)));
        assert_eq!(c.tried, 2);
        // every record of the work dir would have chosen 0.94
        let c = choose(&rows(&records), &["passkey"], &rule(0.02, 0.05)).unwrap();
        assert_eq!(c.pick, Some((union.to_string(), 0.94)));
    }

    #[test]
    fn dense_when_nothing_keeps_the_budget_or_saves_bytes() {
        let rows = vec![
            row("passkey", "dense", None, 1.0, 1.0),
            row("passkey", "approx-current", Some(0.5), 0.5, 0.5),
            row("passkey", "bound", Some(0.5), 1.0, 1.0),
        ];
        let c = choose(&rows, &["passkey"], &rule(0.02, 0.0)).unwrap();
        assert_eq!((c.pick, c.kv_bytes), (None, 1.0));
        assert_eq!(c.evidence[0].value, 1.0);
    }

    #[test]
    fn a_task_dense_cannot_do_is_not_judged_and_a_missing_row_disqualifies() {
        let rows = vec![
            // passkey: dense below the gate, so no comparable row for anyone
            row("fidelity", "dense", None, 1.0, 1.0),
            row("fidelity", "mixture", Some(0.7), 0.99, 0.6),
            // no fidelity row at all: never chosen
            row("passkey", "bound", Some(0.7), 1.0, 0.2),
        ];
        let c = choose(&rows, &["passkey", "fidelity"], &rule(0.02, 0.05)).unwrap();
        assert_eq!(c.pick, Some(("mixture".to_string(), 0.7)));
        assert_eq!(c.evidence.len(), 1);
        assert!(choose(&rows[2..], &["passkey"], &rule(0.02, 0.05)).is_err());
    }
}
