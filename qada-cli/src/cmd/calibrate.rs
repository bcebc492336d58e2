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
use qada_core::Tau;
use qada_model::ActPrecision;

use super::calibration::{calibration_prompts, moment_table, static_table, PromptsArgs};
use crate::common::{check_output_file, load_model, CliResult, ModelArgs, WindowArgs};
use crate::corpus::Corpus;

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

#[derive(clap::Args)]
struct StaticArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    prompts: PromptsArgs,
    /// Threshold of the oracle labels.
    #[arg(long, default_value_t = 0.6)]
    tau_static: f64,
    #[command(flatten)]
    window: WindowArgs,
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

fn moments(a: MomentsArgs) -> CliResult<()> {
    check_output_file("--out", &a.out)?;
    let model = load_model(&a.model, ActPrecision::F32)?;
    let length = a.length.unwrap_or(model.config().context_length);
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
        model.config().n_layers,
        model.config().n_kv_heads,
        a.seed
    );
    Ok(())
}

fn static_heads(a: StaticArgs) -> CliResult<()> {
    let tau = Tau::new(a.tau_static)?;
    check_output_file("--out", &a.out)?;
    let model = load_model(&a.model, ActPrecision::F32)?;
    let window = a.window.window()?;
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
