//! `qada bench`: prefill and decode throughput at given depths, dense against adaptive, in
//! one process.
//!
//! Prefill (`--pp N`, as llama-bench's `pp`): `N` tokens run after `depth` tokens of context,
//! timed once per depth; the decode runs start from the context of `depth` tokens, not after
//! the timed block.
//!
//! For every depth the context is real corpus text (the evaluation part), prefilled once; then
//! dense and adaptive decoding alternate from the same checkpoint, `--reps` times each, and the
//! median and range of tokens per second are reported with the sparsity reached, the speed-up
//! and the bytes each decoded token reads (weights plus K/V).
//!
//! Every mode's step is also timed inside: the attention of the layers a criterion decides,
//! by phase (local scores, decisions and page choice, bulk, merge), as the session's
//! accounting measures it, and the rest of the step (weights, norms, sliding layers).
//!
//! `--ceiling` adds one untimed run of the oracle at the same `tau`: the bytes a token would
//! read if every head were labeled exactly, at no cost. `dense bytes / oracle bytes` bounds
//! the speed-up any criterion of this family can reach at this `tau` on this model (decoding
//! is memory-bound: both paths run near the same fraction of the read bandwidth).

mod bandwidth;
mod decide_then_dense;
mod report;

use std::time::Instant;

use indicatif::ProgressBar;
use qada_core::{Dense, LocalityCriterion, Oracle, PhaseTimes};
use qada_kv::MomentsMode;
use qada_model::ActPrecision;
use qada_model::{Model, Sampler, SamplingParams, Session, SessionCheckpoint, SessionOptions};
use serde_json::json;

use crate::common::{
    fail, load_model, progress_bar, CliResult, CriterionArgs, Fallback, ModelArgs,
};
use crate::corpus::{Corpus, Part};
use crate::host::{cpu_description, cpu_simd_flags, COMMIT};
use bandwidth::read_bandwidth;
use decide_then_dense::DecideThenDense;

/// Tokens a bench run decodes unless told otherwise (`--new-tokens`).
pub const NEW_TOKENS: usize = 32;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    criterion: CriterionArgs,
    /// Context depths (tokens before decoding starts), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0,2048,4096,8000")]
    depth: Vec<usize>,
    /// Tokens decoded per run.
    #[arg(long, default_value_t = NEW_TOKENS)]
    new_tokens: usize,
    /// Tokens of the timed prefill block after each depth (0: no prefill timing).
    #[arg(long, default_value_t = 512)]
    pp: usize,
    /// Runs of each mode per depth (alternating dense, adaptive).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Folder of corpus speeches (default: the setup script's).
    #[arg(long)]
    corpus: Option<std::path::PathBuf>,
    /// Also run the oracle at the same tau (untimed) and report the byte-bound ceiling of the
    /// speed-up.
    #[arg(long)]
    ceiling: bool,
    /// Also time a third mode: the criterion decides every head (and a selecting criterion
    /// chooses its pages), then every head attends densely anyway. Its time less dense's is
    /// the decision's own cost, reported as a share of an adaptive step (a difference of two
    /// runs, so it carries their spread; the phase table times the choice inside the step).
    /// Not with --reuse-steps: that mode chooses at every step, the adaptive one would not.
    #[arg(long, conflicts_with = "reuse_steps")]
    decision_cost: bool,
    /// Print one JSON object per depth, as an array.
    #[arg(long)]
    json: bool,
}

/// Greedy decoding of `n` tokens from checkpoint `cp` under `criterion` (and, when given and
/// not the default, `moments`); the seconds the steps took. The accounting of the run stays in
/// the session.
fn decode_from(
    session: &mut Session,
    cp: &SessionCheckpoint,
    criterion: Box<dyn LocalityCriterion>,
    moments: Option<&MomentsMode>,
    n: usize,
) -> CliResult<f64> {
    session.restore(cp)?;
    session.set_criterion(criterion)?;
    if let Some(m) = moments.filter(|m| !matches!(m, MomentsMode::Update)) {
        session.set_moments_mode(m.clone())?;
    }
    let mut sampler = Sampler::new(SamplingParams::default())?;
    let mut next = sampler.sample(session.logits())?;
    let t0 = Instant::now();
    for _ in 0..n {
        next = sampler.sample(session.step(next)?)?;
    }
    Ok(t0.elapsed().as_secs_f64())
}

/// Milliseconds a token of each attention phase (the layers a criterion decides), from their
/// sum over `tokens` decoded tokens.
fn phase_json(t: &PhaseTimes, tokens: f64) -> serde_json::Value {
    let ms = |s: f64| s * 1e3 / tokens;
    json!({
        "local": ms(t.local),
        "decide": ms(t.decide),
        "select": ms(t.select),
        "bulk": ms(t.bulk),
        "merge": ms(t.merge),
        "total": ms(t.total()),
    })
}

/// The modes a depth times, in order (the third with `--decision-cost` only): the prefix of
/// their rows' JSON keys.
const MODES: [&str; 3] = ["dense", "adaptive", "decide_then_dense"];

/// How many of [`MODES`] a run times.
fn n_modes(a: &Args) -> usize {
    if a.decision_cost {
        3
    } else {
        2
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// What every depth of a run reads.
struct Measure<'a> {
    model: &'a Model,
    /// Evaluation text, at least the context length.
    tokens: &'a [u32],
    /// The criterion's moments source.
    moments: &'a MomentsMode,
    weight_bytes: f64,
    bandwidth: f64,
    cpu: &'a str,
    kernels: &'a [&'static str],
    cpu_flags: &'a [String],
}

pub fn run(mut a: Args) -> CliResult<()> {
    let model = load_model(&a.model, ActPrecision::Int8)?;
    if let (Some(why), false) = (a.criterion.resolve(&model, Fallback::Approx)?, a.json) {
        eprintln!("{why}");
    }
    let ctx = model.config().context_length;
    if a.reps == 0 || a.new_tokens == 0 {
        return fail("--reps and --new-tokens must be at least 1");
    }
    if let Some(&d) = a.depth.iter().find(|&&d| d.max(1) + a.new_tokens > ctx) {
        return fail(format!(
            "depth {d} plus --new-tokens {} exceeds the context length {ctx}",
            a.new_tokens
        ));
    }
    if let Some(&d) = a.depth.iter().find(|&&d| d + a.pp > ctx) {
        return fail(format!(
            "depth {d} plus --pp {} exceeds the context length {ctx}",
            a.pp
        ));
    }
    let corpus = Corpus::load(a.corpus.as_deref())?;
    let text = corpus.running_text(Part::Evaluation, ctx * 8, 3);
    let all = model.tokenizer().encode(&text)?;
    let mut session = Session::new(
        &model,
        SessionOptions {
            criterion: Box::new(Dense),
            window: a.criterion.window()?,
            moments: MomentsMode::Update,
            capacity: None,
            kv_dtype: a.criterion.kv,
        },
    )?;
    let moments = a.criterion.moments(&model)?;
    let weight_bytes = model.weight_bytes_per_token() as f64;
    let bandwidth = read_bandwidth();
    let cpu = cpu_description();
    let kernels = qada_stats::simd::kernel_sets();
    let cpu_flags = cpu_simd_flags();
    let modes = n_modes(&a);
    let runs_per_depth = a.reps * modes + usize::from(a.ceiling);
    let pb = progress_bar((a.depth.len() * runs_per_depth) as u64, "bench");
    if all.len() < ctx {
        return fail(format!(
            "the evaluation corpus gives {} tokens, fewer than the context length {ctx}",
            all.len()
        ));
    }
    let m = Measure {
        model: &model,
        tokens: &all,
        moments: &moments,
        weight_bytes,
        bandwidth,
        cpu: &cpu,
        kernels: &kernels,
        cpu_flags: &cpu_flags,
    };
    let mut results = Vec::new();
    for &depth in &a.depth {
        results.push(measure_depth(&a, &m, &mut session, depth, &pb)?);
    }
    pb.finish_and_clear();
    if a.json {
        println!("{}", serde_json::Value::Array(results));
        return Ok(());
    }
    let header = report::Header {
        cpu: &cpu,
        kernels: &kernels,
        cpu_flags: &cpu_flags,
        activations: model.activations().name(),
        adaptive: &a.criterion.describe(),
        bandwidth,
    };
    report::print_tables(&a, &header, &results);
    Ok(())
}

/// One depth: its context prefilled once (and the `--pp` block timed), then dense and the
/// criterion (and with `--decision-cost` the decide-then-dense wrapper) decoding `--reps`
/// times each from the same checkpoint, and with `--ceiling` the oracle once; the row of
/// `--json`.
fn measure_depth(
    a: &Args,
    m: &Measure<'_>,
    session: &mut Session,
    depth: usize,
    pb: &ProgressBar,
) -> CliResult<serde_json::Value> {
    let (model, all, moments) = (m.model, m.tokens, m.moments);
    let (weight_bytes, bandwidth) = (m.weight_bytes, m.bandwidth);
    let modes = n_modes(a);
    session.start_over(Box::new(Dense), MomentsMode::Update)?;
    let mut pp_secs = f64::NAN;
    if depth == 0 && a.pp > 0 {
        let t0 = Instant::now();
        session.prefill(&all[..a.pp], &mut |_, _| {})?;
        pp_secs = t0.elapsed().as_secs_f64();
        session.start_over(Box::new(Dense), MomentsMode::Update)?;
    }
    session.prefill(&all[..depth.max(1)], &mut |_, _| {})?;
    let cp = session.checkpoint();
    if depth > 0 && a.pp > 0 {
        let t0 = Instant::now();
        session.prefill(&all[depth..depth + a.pp], &mut |_, _| {})?;
        pp_secs = t0.elapsed().as_secs_f64();
    }
    let mut speeds = [Vec::new(), Vec::new(), Vec::new()];
    let mut sparsity = f64::NAN;
    let mut reused: Option<f64> = None;
    let mut kv_bytes = [0.0f64; 3];
    // per mode, summed over its runs: the steps' seconds and their attention's by phase
    let mut step_secs = [0.0f64; 3];
    let mut phases = [PhaseTimes::default(); 3];
    for _ in 0..a.reps {
        for (mode, speed) in speeds.iter_mut().enumerate().take(modes) {
            let (criterion, moments) = match mode {
                0 => (Box::new(Dense) as Box<dyn LocalityCriterion>, None),
                1 => (a.criterion.criterion(model)?, Some(moments)),
                _ => (
                    Box::new(DecideThenDense(a.criterion.criterion(model)?))
                        as Box<dyn LocalityCriterion>,
                    Some(moments),
                ),
            };
            let secs = decode_from(session, &cp, criterion, moments, a.new_tokens)?;
            speed.push(a.new_tokens as f64 / secs);
            let acc = session.accounting();
            step_secs[mode] += secs;
            phases[mode].add(&acc.times);
            // sliding-window layers read their window whatever the criterion says
            kv_bytes[mode] = (acc.kv_bytes + acc.sliding_kv_bytes) / a.new_tokens as f64;
            if mode == 1 {
                sparsity = acc.sparsity();
                reused = acc.reused_share();
            }
            pb.inc(1);
        }
    }
    let (lo_d, hi_d) = (
        speeds[0].iter().cloned().fold(f64::INFINITY, f64::min),
        speeds[0].iter().cloned().fold(0.0, f64::max),
    );
    let (lo_a, hi_a) = (
        speeds[1].iter().cloned().fold(f64::INFINITY, f64::min),
        speeds[1].iter().cloned().fold(0.0, f64::max),
    );
    let (dense, adaptive) = (median(&mut speeds[0]), median(&mut speeds[1]));
    // seconds per token the decisions add to a dense step, and their share of an
    // adaptive step
    let decided = median(&mut speeds[2]);
    let decision_secs = 1.0 / decided - 1.0 / dense;
    let decision_share = decision_secs * adaptive;
    let ceiling = if a.ceiling {
        let oracle = Box::new(Oracle::new(a.criterion.tau())?);
        decode_from(session, &cp, oracle, None, a.new_tokens)?;
        pb.inc(1);
        let acc = session.accounting();
        let bytes = weight_bytes + (acc.kv_bytes + acc.sliding_kv_bytes) / a.new_tokens as f64;
        json!({
            "oracle_sparsity": acc.sparsity(),
            "oracle_bytes_per_token": bytes,
            "oracle_limit_tokens_per_s": bandwidth / bytes,
            "ceiling_speedup": (weight_bytes + kv_bytes[0]) / bytes,
        })
    } else {
        json!({})
    };
    let mut row = json!({
        "depth": depth,
        "prefill_tokens": a.pp,
        "prefill_tokens_per_s": a.pp as f64 / pp_secs,
        "dense_decode_tokens_per_s": dense,
        "dense_range": [lo_d, hi_d],
        "adaptive_decode_tokens_per_s": adaptive,
        "adaptive_range": [lo_a, hi_a],
        "speedup": adaptive / dense,
        "sparsity": sparsity,
        "reused_choice_share": reused,
        "dense_bytes_per_token": weight_bytes + kv_bytes[0],
        "adaptive_bytes_per_token": weight_bytes + kv_bytes[1],
        "weight_bytes_per_token": weight_bytes,
        "read_bandwidth_bytes_per_s": bandwidth,
        "cpu": m.cpu,
        "commit": COMMIT,
        "kernels": m.kernels,
        "cpu_simd_flags": m.cpu_flags,
        "activations": model.activations().name(),
        "dense_limit_tokens_per_s": bandwidth / (weight_bytes + kv_bytes[0]),
        "adaptive_limit_tokens_per_s": bandwidth / (weight_bytes + kv_bytes[1]),
    });
    let tokens = (a.reps * a.new_tokens).max(1) as f64;
    for (mode, name) in MODES.iter().enumerate().take(modes) {
        row[format!("{name}_ms_per_token")] = json!(step_secs[mode] * 1e3 / tokens);
        row[format!("{name}_attention_ms_per_token")] = phase_json(&phases[mode], tokens);
    }
    if a.decision_cost {
        row["decide_then_dense_tokens_per_s"] = json!(decided);
        row["decide_then_dense_bytes_per_token"] = json!(weight_bytes + kv_bytes[2]);
        row["decision_secs_per_token"] = json!(decision_secs);
        row["decision_share_of_adaptive_step"] = json!(decision_share);
    }
    if let (Some(r), Some(c)) = (row.as_object_mut(), ceiling.as_object()) {
        r.extend(c.clone());
    }
    Ok(row)
}
