//! `qada analyze`: how good is a criterion (QAdA by default, any with `--criterion`), head by
//! head, against the oracle.
//!
//! Decodes greedily with dense attention and, at the last prompt position and at every
//! generated position, probes every layer and query head: exact `log A_bulk`, the criterion's
//! estimate `log A_bulk_hat` (QAdA's Gaussian one by default) and `log A_local`. The labels of
//! both at `--tau` follow.

use std::path::PathBuf;

use qada_core::Tau;
use qada_eval::probe::probe_decode;
use qada_eval::{ProbeOptions, ProbeRun, Report, Summary};
use qada_model::{ActPrecision, Model, ModelConfig};
use serde_json::{json, Value};

use crate::common::{
    load_model, progress_bar, CliResult, CriterionArgs, Fallback, ModelArgs, PromptArgs,
};
use crate::plot;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    prompt: PromptArgs,
    #[command(flatten)]
    criterion: CriterionArgs,
    /// Tokens to decode after the prompt (positions probed: the last prompt token and these).
    #[arg(long, default_value_t = 16)]
    steps: usize,
    /// Print everything as one JSON object.
    #[arg(long)]
    json: bool,
    /// Draw the (layer x head) long-context frequencies of oracle and approx (PNG).
    #[arg(long)]
    plot: Option<PathBuf>,
}

fn summary_json(s: &Summary) -> Value {
    json!({ "mean": s.mean, "median": s.median, "std": s.std, "count": s.count })
}

/// The report as JSON (NaN becomes null).
pub fn report_json(r: &Report) -> Value {
    let a = &r.agreement;
    json!({
        "tau": r.tau,
        "count": r.count,
        "frac_local_oracle": r.frac_local_oracle,
        "frac_local_approx": r.frac_local_approx,
        "agreement": {
            "accuracy": a.accuracy(),
            "recall_long": a.recall_long(),
            "precision_long": a.precision_long(),
            "both_long": a.both_long,
            "both_local": a.both_local,
            "oracle_long_approx_local": a.missed_long,
            "oracle_local_approx_long": a.false_long,
        },
        "log_error_gauss": summary_json(&r.log_error_gauss),
        "log_gap_bulk_local": summary_json(&r.log_gap_bulk_local),
        "missed_share": summary_json(&r.missed_share),
        "missed_share_max": r.missed_share_max,
        "frac_over_budget": r.frac_over_budget,
        "per_layer_missed_share": r.per_layer_missed_share,
        "per_layer_frac_local_oracle": r.per_layer_frac_local_oracle,
        "per_layer_frac_local_approx": r.per_layer_frac_local_approx,
        "per_head_frac_long_oracle": r.per_head_frac_long_oracle,
        "per_head_frac_long_approx": r.per_head_frac_long_approx,
        "n_layers": r.shape.0,
        "n_heads": r.shape.1,
    })
}

pub fn run(mut a: Args) -> CliResult<()> {
    let model = load_model(&a.model, ActPrecision::F32)?;
    if let (Some(why), false) = (a.criterion.resolve(&model, Fallback::Approx)?, a.json) {
        eprintln!("{why}");
    }
    let tau = Tau::new(a.criterion.tau())?;
    let tokens = a.prompt.tokens(&model)?;
    let run = probe(&a, &model, &tokens)?;
    let c = model.config();
    let r = Report::new(&run.probes, tau, c.n_layers, c.n_heads);
    let name = a.criterion.name();
    if let Some(path) = &a.plot {
        let label = match name {
            "approx" => "approx (QAdA)",
            n => n,
        };
        plot::heatmaps(
            path,
            &format!(
                "long-context frequency per head, tau {} ({} positions)",
                r.tau,
                a.steps + 1
            ),
            [
                ("oracle", &r.per_head_frac_long_oracle),
                (label, &r.per_head_frac_long_approx),
            ],
            c.n_layers,
            c.n_heads,
        )?;
    }
    if a.json {
        let mut v = report_json(&r);
        v["prompt_tokens"] = json!(tokens.len());
        v["steps"] = json!(a.steps);
        v["moments"] = json!(a.criterion.moments);
        v["criterion"] = json!(name);
        v["generated_ids"] = json!(run.generated);
        println!("{v}");
        return Ok(());
    }
    print_report(&a, &r, &run, tokens.len(), c, tau)
}

/// Dense greedy decoding of the prompt with the criterion probed against the oracle at every
/// position, a progress bar over the prefill.
fn probe(a: &Args, model: &Model, tokens: &[u32]) -> CliResult<ProbeRun> {
    // approx keeps the Gaussian probe (cheaper, and tau-free); any other criterion is asked
    let estimator = match a.criterion.name() {
        "approx" => None,
        _ => Some(a.criterion.criterion(model)?),
    };
    let opts = ProbeOptions {
        window: a.criterion.window()?,
        moments: a.criterion.moments(model)?,
        kv_dtype: a.criterion.kv,
        steps: a.steps,
    };
    let pb = progress_bar(tokens.len().saturating_sub(1) as u64, "prefill");
    let run = probe_decode(model, tokens, opts, estimator, &mut |done, _| {
        pb.set_position(done as u64)
    });
    pb.finish_and_clear();
    Ok(run?)
}

/// The report as text: agreement with the oracle, the Gaussian's error, the mass left out
/// (and the decisions that lost the most), then per layer.
fn print_report(
    a: &Args,
    r: &Report,
    run: &ProbeRun,
    n_tokens: usize,
    c: &ModelConfig,
    tau: Tau,
) -> CliResult<()> {
    let name = a.criterion.name();
    let window = a.criterion.window()?;
    let ag = &r.agreement;
    println!(
        "prompt {n_tokens} tokens, {} positions probed, {} (position, layer, head) decisions",
        a.steps + 1,
        r.count
    );
    println!("criterion {name} against the oracle (the approx columns below are {name}'s)");
    println!(
        "tau {}, moments {}, sink {}, local {}",
        r.tau,
        a.criterion.moments,
        window.sink(),
        window.local()
    );
    println!(
        "fraction local: oracle {:.3}, approx {:.3}",
        r.frac_local_oracle, r.frac_local_approx
    );
    println!(
        "agreement (positive = long-context): accuracy {:.3}, recall {:.3}, precision {:.3}",
        ag.accuracy(),
        ag.recall_long(),
        ag.precision_long()
    );
    println!(
        "  both long {}, both local {}, oracle long / approx local {}, oracle local / approx long {}",
        ag.both_long, ag.both_local, ag.missed_long, ag.false_long
    );
    let (g, b) = (&r.log_error_gauss, &r.log_gap_bulk_local);
    println!(
        "|log A_bulk - log A_bulk_hat|: mean {:.3}, median {:.3}, std {:.3}",
        g.mean, g.median, g.std
    );
    println!(
        "|log A_bulk - log A_local|:    mean {:.3}, median {:.3}, std {:.3}",
        b.mean, b.median, b.std
    );
    let m = &r.missed_share;
    println!(
        "mass left out (exact share of a head's softmax mass its read skips): mean {:.4}, \
         median {:.4}, max {:.4}; above 1 - tau in {:.3} of the decisions",
        m.mean, m.median, r.missed_share_max, r.frac_over_budget
    );
    print_worst(r, run, tau);
    print_layers(r, c);
    Ok(())
}

/// The decisions that lost the most: a local call (the estimate's) or a read too narrow.
fn print_worst(r: &Report, run: &ProbeRun, tau: Tau) {
    let mut worst: Vec<_> = run
        .probes
        .iter()
        .map(|p| (p.missed_share(tau), p))
        .collect();
    worst.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (m, p) in worst.iter().take(5).filter(|(m, _)| *m > 1.0 - r.tau) {
        println!(
            "  left out {m:.4} at layer {}, head {}: {} (oracle's local share {:.4})",
            p.layer,
            p.head,
            if p.approx_local(tau) {
                "called local"
            } else {
                "its read too narrow"
            },
            p.oracle_share().exp()
        );
    }
}

/// Per layer: the fraction local of the oracle and the criterion, the mass left out, and the
/// oracle's long-context frequency per head.
fn print_layers(r: &Report, c: &ModelConfig) {
    println!("per layer, fraction local (oracle / approx), mean mass left out:");
    for l in 0..c.n_layers {
        if let Some(w) = c.layers[l].span.window() {
            println!(
                "  layer {l:>2}: sliding window of {w} tokens (local by construction, not decided)"
            );
            continue;
        }
        let heads: Vec<String> = (0..c.n_heads)
            .map(|h| format!("{:.2}", r.per_head_frac_long_oracle[l * c.n_heads + h]))
            .collect();
        println!(
            "  layer {l:>2}: {:.2} / {:.2}, missed {:.4}   oracle long freq per head: {}",
            r.per_layer_frac_local_oracle[l],
            r.per_layer_frac_local_approx[l],
            r.per_layer_missed_share[l],
            heads.join(" ")
        );
    }
}
