//! What the calibrations are made from, shared by `qada calibrate` (moments, static, heads)
//! and `qada eval` (which makes its own tables): calibration prompts from the corpus's
//! calibration part or files, random-words prompts and their moment tables, the
//! teacher-forced probing loop, and static head labels.

use std::path::PathBuf;

use qada_core::{Dense, StaticCalibrator, StaticTable, Tau};
use qada_eval::{HeadProbe, Prober};
use qada_kv::{MomentsMode, WindowConfig};
use qada_model::{Model, Session, SessionOptions};
use qada_stats::MomentTable;

use crate::common::{fail, progress_bar, CliResult};
use crate::corpus::{Corpus, Part};

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
        let mut ids = model.tokenizer().encode(&text)?;
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
    let ctx = model.config().context_length;
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
        |l, h| match model.config().layers[l].is_global() {
            true => cache
                .head(l, h)
                .map(|v| v.keys())
                .unwrap_or(qada_stats::Rows::F32(&[])),
            false => qada_stats::Rows::F32(&[]),
        },
    )?)
}

/// Oracle labels at `tau` over the last `steps` positions of every prompt (teacher-forced).
pub fn static_table(
    model: &Model,
    prompts: &[Vec<u32>],
    window: WindowConfig,
    steps: usize,
    tau: Tau,
) -> CliResult<StaticTable> {
    let mut cal = StaticCalibrator::new(model.signature(), model.config().n_heads, tau.get())?;
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
        let mut ids = model.tokenizer().encode(&text)?;
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
    let ctx = model.config().context_length;
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
            let mut ids = model.tokenizer().encode(&text)?;
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
