//! `qada calibrate`: the two calibrations of the paper.
//!
//! - `moments`: a random-words prompt (words drawn independently, with a seed, from the
//!   calibration part of the corpus) is run through the model; the moments of the first `m`
//!   keys of every layer and KV head are saved at checkpoints every `--stride` tokens
//!   (option 2 of the paper). Use with `--moments calibration:PATH`.
//! - `static`: oracle labels at `tau_static` over calibration prompts give each head's local
//!   frequency; saved, and `--alpha` picks the static heads at use time.

use std::path::PathBuf;

use clap::Subcommand;
use qada_core::{Dense, StaticCalibrator, StaticTable, Tau};
use qada_kv::{MomentsMode, WindowConfig};
use qada_model::qlinear::ActPrecision;
use qada_model::{Model, Session, SessionOptions};
use qada_stats::MomentTable;

use qada_core::analysis::HeadProbe;

use crate::common::{fail, load_model, progress_bar, CliResult, ModelArgs};
use crate::corpus::{Corpus, Part};
use qada_model::probe::Prober;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand)]
enum What {
    /// Moment table from a random-words prompt (option 2 of the paper).
    Moments(MomentsArgs),
    /// Local frequency of every head under the oracle (the static criterion's calibration).
    Static(StaticArgs),
    /// The criterion and threshold with the fewest K/V bytes within a quality budget of
    /// dense, on calibration text: a setting file for `generate --setting`.
    Tau(super::calibrate_tau::Args),
    /// Per-head thresholds for a criterion: each head's tau raised until at most a given
    /// share of the queries the oracle calls long are labeled local (`--head-taus`).
    Heads(super::calibrate_heads::Args),
}

#[derive(clap::Args)]
struct MomentsArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Folder of corpus speeches (default: the setup script's).
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// Tokens of the calibration prompt (default: the model's context length).
    #[arg(long)]
    length: Option<usize>,
    /// Tokens between checkpoints.
    #[arg(long, default_value_t = 256)]
    stride: usize,
    /// Seed of the random words.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output file.
    #[arg(long, default_value = "moments.qmom")]
    out: PathBuf,
}

/// Where calibration prompts come from, and the positions probed in each.
#[derive(clap::Args)]
pub struct PromptsArgs {
    /// Folder of corpus speeches (default: the setup script's).
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// Calibration prompt files (raw text); default: prompts from the corpus's calibration part.
    #[arg(long = "prompt-file")]
    prompt_files: Vec<PathBuf>,
    /// Number of corpus prompts.
    #[arg(long, default_value_t = 4)]
    prompts: usize,
    /// Tokens per corpus prompt.
    #[arg(long, default_value_t = 2048)]
    length: usize,
    /// Decoding positions probed per prompt (the last tokens of the prompt, teacher-forced).
    #[arg(long, default_value_t = 32)]
    pub steps: usize,
    /// Seed for the choice of corpus text.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

#[derive(clap::Args)]
struct StaticArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    prompts: PromptsArgs,
    /// Threshold of the oracle labels.
    #[arg(long, default_value_t = 0.6)]
    tau_static: f64,
    /// Attention sink size.
    #[arg(long, default_value_t = 16)]
    sink: usize,
    /// Local window size.
    #[arg(long, default_value_t = 128)]
    local: usize,
    /// Output file.
    #[arg(long, default_value = "static.qsta")]
    out: PathBuf,
}

pub fn run(a: Args) -> CliResult<()> {
    match a.what {
        What::Moments(m) => moments(m),
        What::Static(s) => static_heads(s),
        What::Tau(t) => super::calibrate_tau::run(t),
        What::Heads(h) => super::calibrate_heads::run(h),
    }
}

/// Token ids of `n` random words from the calibration part, cut to exactly `length`.
pub fn random_words_prompt(
    model: &Model,
    corpus: &Corpus,
    length: usize,
    seed: u64,
) -> CliResult<Vec<u32>> {
    let mut n_words = length;
    loop {
        let text = corpus.random_words(Part::Calibration, n_words, seed);
        let mut ids = model.tokenizer.encode(&text)?;
        if ids.len() >= length {
            ids.truncate(length);
            return Ok(ids);
        }
        n_words *= 2;
    }
}

/// Run a random-words prompt of `length` tokens and tabulate its key moments every `stride`.
pub fn moment_table(
    model: &Model,
    corpus: &Corpus,
    length: usize,
    stride: usize,
    seed: u64,
) -> CliResult<MomentTable> {
    let ctx = model.config.context_length;
    if length == 0 || length > ctx {
        return fail(format!(
            "--length must be in 1..={ctx} (the context length), got {length}"
        ));
    }
    if stride == 0 || stride > length {
        return fail(format!("--stride must be in 1..={length}, got {stride}"));
    }
    let tokens = random_words_prompt(model, corpus, length, seed)?;
    let mut session = Session::new(
        model,
        SessionOptions {
            criterion: Box::new(Dense),
            window: WindowConfig::PAPER,
            moments: MomentsMode::Update,
            capacity: Some(length),
            kv_dtype: Default::default(),
        },
    )?;
    let pb = progress_bar(length as u64, "calibration prefill (moments)");
    session.prefill(&tokens, &mut |done, _| pb.set_position(done as u64))?;
    pb.finish_and_clear();
    let cache = session.cache();
    Ok(MomentTable::from_keys(
        model.signature(),
        stride as u64,
        // sliding-window layers keep no bulk: their moments stay empty
        |l, h| match model.config.layers[l].is_global() {
            true => cache
                .head(l, h)
                .map(|v| v.keys())
                .unwrap_or(qada_stats::Rows::F32(&[])),
            false => qada_stats::Rows::F32(&[]),
        },
    )?)
}

fn moments(a: MomentsArgs) -> CliResult<()> {
    let model = load_model(&a.model, ActPrecision::F32)?;
    let length = a.length.unwrap_or(model.config.context_length);
    let corpus = Corpus::load(a.corpus.as_deref())?;
    let table = moment_table(&model, &corpus, length, a.stride, a.seed)?;
    table.save(&a.out)?;
    eprintln!(
        "wrote {}: {} checkpoints ({}..{} tokens, stride {}) of {} layers x {} KV heads, random words seed {}",
        a.out.display(),
        table.checkpoints().len(),
        a.stride,
        table.checkpoints().last().map_or(0, |c| c.tokens),
        a.stride,
        model.config.n_layers,
        model.config.n_kv_heads,
        a.seed
    );
    Ok(())
}

/// Oracle labels at `tau` over the last `steps` positions of every prompt (teacher-forced).
pub fn static_table(
    model: &Model,
    prompts: &[Vec<u32>],
    window: WindowConfig,
    steps: usize,
    tau: Tau,
) -> CliResult<StaticTable> {
    let mut cal = StaticCalibrator::new(model.signature(), model.config.n_heads, tau.get())?;
    let mut session = Session::new(model, SessionOptions::new(Box::new(Dense), window))?;
    let mut prober = Prober::default();
    probe_prompts(
        &mut session,
        prompts,
        steps,
        "calibration (static heads)",
        &mut prober,
        |probes| {
            for p in probes {
                cal.observe(p.layer, p.head, p.oracle_local(tau))?;
            }
            Ok(())
        },
    )?;
    Ok(cal.finish())
}

/// Per prompt: prefill all but the last `steps` tokens, then teacher-force those with
/// `prober` watching; `observe` gets the probes of each step. A progress bar says `what`.
pub fn probe_prompts(
    session: &mut Session<'_>,
    prompts: &[Vec<u32>],
    steps: usize,
    what: &str,
    prober: &mut Prober,
    mut observe: impl FnMut(&[HeadProbe]) -> CliResult<()>,
) -> CliResult<()> {
    let total: usize = prompts.iter().map(|p| p.len()).sum();
    let pb = progress_bar(total as u64, what);
    let mut done = 0;
    for ids in prompts {
        if ids.len() <= steps {
            return fail(format!(
                "a calibration prompt of {} tokens is not longer than --steps {steps}",
                ids.len()
            ));
        }
        session.reset();
        let (head, tail) = ids.split_at(ids.len() - steps);
        session.prefill(head, &mut |n, _| pb.set_position((done + n) as u64))?;
        for (i, &t) in tail.iter().enumerate() {
            prober.probes.clear();
            session.step_observed(t, Some(&mut *prober))?;
            observe(&prober.probes)?;
            pb.set_position((done + head.len() + i + 1) as u64);
        }
        done += ids.len();
    }
    pb.finish_and_clear();
    Ok(())
}

/// `n` corpus prompts of `length` tokens from the calibration part.
pub fn corpus_prompts(
    model: &Model,
    corpus: &Corpus,
    n: usize,
    length: usize,
    seed: u64,
) -> CliResult<Vec<Vec<u32>>> {
    let mut prompts = Vec::with_capacity(n);
    for i in 0..n {
        let text = corpus.running_text(Part::Calibration, length * 8, seed.wrapping_add(i as u64));
        let mut ids = model.tokenizer.encode(&text)?;
        ids.truncate(length);
        prompts.push(ids);
    }
    Ok(prompts)
}

/// The calibration prompts `p` names (files, or corpus text), each longer than the probed
/// positions and the local window.
pub fn calibration_prompts(
    model: &Model,
    p: &PromptsArgs,
    window: WindowConfig,
) -> CliResult<Vec<Vec<u32>>> {
    let ctx = model.config.context_length;
    let mut prompts: Vec<Vec<u32>> = Vec::new();
    if p.prompt_files.is_empty() {
        if p.prompts == 0 {
            return fail("--prompts must be at least 1");
        }
        if p.length > ctx || p.length <= p.steps + window.local() {
            return fail(format!(
                "--length must exceed --steps + the local window ({}) and fit the context ({ctx})",
                p.steps + window.local()
            ));
        }
        let corpus = Corpus::load(p.corpus.as_deref())?;
        prompts = corpus_prompts(model, &corpus, p.prompts, p.length, p.seed)?;
    } else {
        for file in &p.prompt_files {
            let text = std::fs::read_to_string(file)
                .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
            let mut ids = model.tokenizer.encode(&text)?;
            ids.truncate(ctx);
            if ids.len() <= p.steps + window.local() {
                return fail(format!(
                    "{} has {} tokens: a calibration prompt needs more than --steps + the local window ({})",
                    file.display(),
                    ids.len(),
                    p.steps + window.local()
                ));
            }
            prompts.push(ids);
        }
    }
    Ok(prompts)
}

fn static_heads(a: StaticArgs) -> CliResult<()> {
    let tau = Tau::new(a.tau_static)?;
    let model = load_model(&a.model, ActPrecision::F32)?;
    let window = WindowConfig::new(a.sink, a.local)?;
    let prompts = calibration_prompts(&model, &a.prompts, window)?;
    let table = static_table(&model, &prompts, window, a.prompts.steps, tau)?;
    table.save(&a.out)?;
    let freq = table.frequencies();
    let observed = table.observed();
    let seen: Vec<f64> = freq
        .iter()
        .zip(&observed)
        .filter(|(_, &o)| o)
        .map(|(&f, _)| f)
        .collect();
    let mean = seen.iter().sum::<f64>() / seen.len().max(1) as f64;
    let unseen = match freq.len() - seen.len() {
        0 => String::new(),
        n => format!(" ({n} heads in layers no criterion decides are left out)"),
    };
    eprintln!(
        "wrote {}: local frequencies of {} heads at tau_static {} over {} prompts x {} positions (mean {:.3}){unseen}",
        a.out.display(),
        seen.len(),
        a.tau_static,
        prompts.len(),
        a.prompts.steps,
        mean
    );
    Ok(())
}
