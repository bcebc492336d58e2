//! `qada generate`: stream text from a real model with adaptive attention, then report what
//! the criterion saved.

use std::io::Write;
use std::ops::ControlFlow;
use std::time::Instant;

use qada_core::{Accounting, Dense};
use qada_model::ActPrecision;
use qada_model::{
    generate_after_prefill, GenerateConfig, Generation, Model, SamplingParams, Session,
    SessionOptions, StopReason,
};
use serde_json::json;

use crate::common::{
    fail, load_model, progress_bar, CliResult, CriterionArgs, Fallback, ModelArgs, PromptArgs,
};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    prompt: PromptArgs,
    #[command(flatten)]
    criterion: CriterionArgs,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 256)]
    max_new_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Sample from the k most likely tokens only (0: all).
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// Sample from the smallest set of tokens whose probability reaches p.
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// Random seed for sampling.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Do not stop at the end-of-sequence token.
    #[arg(long)]
    ignore_eos: bool,
    /// Stop when the text contains this string (repeatable).
    #[arg(long = "stop")]
    stop: Vec<String>,
    /// Keep only the last tokens of a prompt longer than the context (default: refuse it).
    #[arg(long)]
    truncate_prompt: bool,
    /// Print one JSON object instead of streaming text and a summary.
    #[arg(long)]
    json: bool,
    /// Also decode the same prompt with this criterion (only `dense`) from the same prefill,
    /// and print its speed, K/V bytes and answer beside the chosen criterion's.
    #[arg(long, value_parser = ["dense"])]
    compare: Option<String>,
}

/// What a run computed: the chosen criterion's generation and accounting, and with
/// `--compare dense` dense's from the same prefill.
struct Outcome {
    g: Generation,
    acc: Accounting,
    compared: Option<(Generation, Accounting)>,
}

pub fn run(mut a: Args) -> CliResult<()> {
    let model = load_model(&a.model, ActPrecision::Int8)?;
    let why = a.criterion.resolve(&model, Fallback::Shipped)?;
    if let (Some(why), false) = (&why, a.json) {
        eprintln!("{why}");
    }
    let prompt = prompt_tokens(&a, &model)?;
    let out = decode(&a, &model, &prompt)?;
    if a.json {
        println!("{}", json_report(&a, &model, why.as_deref(), &out));
    } else {
        println!();
        text_report(&a, &model, &out);
    }
    Ok(())
}

/// The prompt's tokens, refused when empty, and cut to its last `ctx - 1` tokens with
/// `--truncate-prompt` when longer than the context (refused without it).
fn prompt_tokens(a: &Args, model: &Model) -> CliResult<Vec<u32>> {
    let mut prompt = a.prompt.tokens(model)?;
    let ctx = model.config().context_length;
    if prompt.is_empty() {
        return fail(
            "the prompt is empty: give some text (with --raw, an empty string has no tokens)",
        );
    }
    if prompt.len() >= ctx {
        if !a.truncate_prompt {
            return fail(format!(
                "the prompt has {} tokens but the context length is {ctx}: shorten it, or pass \
                 --truncate-prompt to keep its last {} tokens",
                prompt.len(),
                ctx - 1
            ));
        }
        let cut = prompt.len() - (ctx - 1);
        eprintln!(
            "note: prompt truncated: dropped its first {cut} of {} tokens",
            prompt.len()
        );
        prompt.drain(..cut);
    }
    Ok(prompt)
}

/// Prefill `prompt`, then generate under the chosen criterion, streaming the text to stdout
/// (not with `--json`); with `--compare dense`, generate again with dense from a checkpoint
/// of the same prefill.
fn decode(a: &Args, model: &Model, prompt: &[u32]) -> CliResult<Outcome> {
    let opts = SessionOptions {
        criterion: a.criterion.criterion(model)?,
        window: a.criterion.window()?,
        moments: a.criterion.moments(model)?,
        capacity: None,
        kv_dtype: a.criterion.kv,
    };
    let mut session = Session::new(model, opts)?;
    let cfg = GenerateConfig {
        max_new_tokens: a.max_new_tokens,
        stop_at_eos: !a.ignore_eos,
        stop_strings: a.stop.clone(),
        sampling: SamplingParams {
            temperature: a.temperature,
            top_k: a.top_k,
            top_p: a.top_p,
            seed: a.seed,
        },
    };
    let pb = progress_bar(prompt.len() as u64, "prefill");
    if prompt.len() <= qada_model::PREFILL_BLOCK || a.json {
        pb.finish_and_clear();
    }
    let t0 = Instant::now();
    session.prefill(prompt, &mut |done, _| pb.set_position(done as u64))?;
    let prefill_secs = t0.elapsed().as_secs_f64();
    pb.finish_and_clear();
    // the state after prefill, for the comparison run
    let checkpoint = a.compare.is_some().then(|| session.checkpoint());
    let mut stdout = std::io::stdout();
    let json_mode = a.json;
    let g = generate_after_prefill(&mut session, prompt, prefill_secs, &cfg, &mut |piece| {
        if !json_mode {
            let _ = stdout.write_all(piece.as_bytes());
            let _ = stdout.flush();
        }
        ControlFlow::Continue(())
    })?;
    let acc = session.accounting().clone();
    let compared = match checkpoint {
        Some(cp) => {
            session.restore(&cp)?;
            session.set_criterion(Box::new(Dense))?;
            let pb = progress_bar(cfg.max_new_tokens as u64, "decoding again with dense");
            let dense =
                generate_after_prefill(&mut session, prompt, prefill_secs, &cfg, &mut |_| {
                    pb.inc(1);
                    ControlFlow::Continue(())
                })?;
            pb.finish_and_clear();
            Some((dense, session.accounting().clone()))
        }
        None => None,
    };
    Ok(Outcome { g, acc, compared })
}

/// Sparsity of every layer, in layer order.
fn per_layer_sparsity(model: &Model, acc: &Accounting) -> Vec<f64> {
    (0..model.config().n_layers)
        .map(|l| acc.layer_sparsity(l))
        .collect()
}

/// `--json`: one object with the text, the ids, the setting and what it saved.
fn json_report(a: &Args, model: &Model, why: Option<&str>, out: &Outcome) -> serde_json::Value {
    let (g, acc) = (&out.g, &out.acc);
    json!({
        "prompt_ids": g.prompt_ids,
        "generated_ids": g.generated_ids,
        "text": g.text,
        "stop_reason": g.stop.as_str(),
        "criterion": a.criterion.name(),
        "tau": a.criterion.tau(),
        "group": a.criterion.group.to_string(),
        "setting": why,
        "sink": a.criterion.sink(),
        "local": a.criterion.local(),
        "moments": a.criterion.moments,
        "sparsity": acc.sparsity(),
        "reused_choice_share": acc.reused_share(),
        "decisions": acc.total().decisions,
        "nonfinite_decisions": acc.total().nonfinite,
        "per_layer_sparsity": per_layer_sparsity(model, acc),
        "prefill_tokens_per_s": g.prompt_ids.len() as f64 / g.prefill_secs.max(1e-9),
        "decode_tokens_per_s": decode_rate(g),
        "attention_flops_ratio": acc.flops_ratio(),
        "kv_bytes_ratio": acc.kv_bytes_ratio(),
        "global_layers": model.config().global_layers().collect::<Vec<_>>(),
        "sliding_kv_bytes": acc.sliding_kv_bytes,
        "activations": model.activations().name(),
        "compare": out.compared.as_ref().map(|(d, dacc)| comparison_json(g, d, acc, dacc)),
    })
}

/// The summary after the streamed text, on stderr: speeds, why it stopped, what the
/// criterion saved per layer, the comparison with dense, the sliding layers.
fn text_report(a: &Args, model: &Model, out: &Outcome) {
    let (g, acc) = (&out.g, &out.acc);
    let mut e = std::io::stderr();
    let _ = writeln!(e, "---");
    let _ = writeln!(
        e,
        "prompt {} tokens, prefill {:.2} s ({:.1} tokens/s)",
        g.prompt_ids.len(),
        g.prefill_secs,
        g.prompt_ids.len() as f64 / g.prefill_secs.max(1e-9)
    );
    let _ = writeln!(
        e,
        "generated {} tokens, decode {:.2} s ({:.1} tokens/s), stopped: {}",
        g.generated_ids.len(),
        g.decode_secs,
        decode_rate(g),
        g.stop.as_str()
    );
    if g.stop == StopReason::ContextFull {
        let _ = writeln!(
            e,
            "note: generation reached the context length of {} tokens",
            model.config().context_length
        );
    }
    let _ = writeln!(e, "criterion: {}", a.criterion.describe());
    let t = acc.total();
    if t.decisions == 0 {
        let _ = writeln!(
            e,
            "sparsity: no decision had a choice (the context never exceeded the {}-token window)",
            a.criterion.local()
        );
    } else {
        let _ = writeln!(
            e,
            "sparsity {:.3} over {} head decisions{}; attention FLOPs {:.3}x dense, K/V bytes read {:.3}x dense",
            acc.sparsity(),
            t.decisions,
            if t.nonfinite > 0 { format!(" ({} non-finite, labeled long)", t.nonfinite) } else { String::new() },
            acc.flops_ratio(),
            acc.kv_bytes_ratio()
        );
        let cells: Vec<String> = per_layer_sparsity(model, acc)
            .iter()
            .enumerate()
            .filter(|&(l, _)| model.config().layers[l].is_global())
            .map(|(l, s)| format!("{l}:{s:.2}"))
            .collect();
        for line in cells.chunks(10) {
            let _ = writeln!(e, "  per-layer sparsity {}", line.join(" "));
        }
        if a.criterion.reuse_steps > 0 {
            let _ = writeln!(
                e,
                "page choices: {} of {} KV group-steps that read chosen pages read a choice of an \
                 earlier step (--reuse-steps {}, --reuse-cosine {}, --reuse-drift {})",
                acc.reused_groups,
                acc.selected_groups,
                a.criterion.reuse_steps,
                a.criterion.reuse_cosine,
                a.criterion
                    .reuse_drift
                    .map_or("any".to_string(), |x| x.to_string())
            );
        }
    }
    if let Some((dense, dense_acc)) = &out.compared {
        report_comparison(
            &mut e,
            a.criterion.resolved_flags.as_deref(),
            g,
            dense,
            acc,
            dense_acc,
        );
    }
    if acc.sliding_layer_steps > 0 {
        let n_layers = model.config().n_layers;
        let sliding = n_layers - model.config().global_layers().count();
        let _ = writeln!(
            e,
            "sliding-window layers: {sliding} of {n_layers} read their last {} tokens by construction \
             ({:.1} MB of K/V over the run; not decided, not counted above)",
            model.config().sliding_window().unwrap_or(0),
            acc.sliding_kv_bytes / 1e6
        );
    }
}

/// Tokens per second of a generation's decoding.
fn decode_rate(g: &Generation) -> f64 {
    g.decode_steps as f64 / g.decode_secs.max(1e-9)
}

/// The tokens two generations share from the start.
fn common_prefix(a: &Generation, b: &Generation) -> usize {
    a.generated_ids
        .iter()
        .zip(&b.generated_ids)
        .take_while(|(x, y)| x == y)
        .count()
}

/// Decode steps below which `--compare dense` calls its speeds rough: a step varies by tens of
/// percent on a shared 2-core host (the main job's five steps on Qwen2.5-0.5B at 16k read
/// 0.90x, 0.95x and 1.08x dense in three runs), where `qada bench` times `NEW_TOKENS` a run.
const STEADY_STEPS: usize = 16;

/// `--compare dense`: the chosen criterion against dense from the same prefill; `flags`
/// give bench the same criterion where the user's own do not.
fn report_comparison(
    e: &mut impl Write,
    flags: Option<&str>,
    g: &Generation,
    dense: &Generation,
    acc: &Accounting,
    dense_acc: &Accounting,
) {
    let (r, rd) = (decode_rate(g), decode_rate(dense));
    let _ = writeln!(e, "compared with dense, from the same prefill:");
    let _ = writeln!(
        e,
        "  decode {r:.1} against {rd:.1} tokens/s ({:.2}x); K/V bytes read {:.1} against {:.1} MB \
         per token ({:.3}x)",
        r / rd.max(1e-9),
        acc.kv_bytes / 1e6 / (g.decode_steps.max(1) as f64),
        dense_acc.kv_bytes / 1e6 / (dense.decode_steps.max(1) as f64),
        acc.kv_bytes_ratio()
    );
    let steps = g.decode_steps.min(dense.decode_steps);
    if steps < STEADY_STEPS {
        // bench defaults to approx, not to generate's shipped setting: name what it must take
        let depth = g.prompt_ids.len();
        let same = match flags {
            Some(f) => format!("`qada bench --depth {depth} {f}`"),
            None => format!("`qada bench --depth {depth}` with the same criterion flags"),
        };
        let _ = writeln!(
            e,
            "  ({steps} decode steps: the speeds are a rough figure, within the host's spread; \
             {same} on the same model times {} a run, dense and it alternated)",
            super::bench::NEW_TOKENS
        );
    }
    let same = common_prefix(g, dense);
    let _ = writeln!(
        e,
        "  {same} of {} generated tokens equal dense's ({} tokens){}",
        g.generated_ids.len(),
        dense.generated_ids.len(),
        if same == g.generated_ids.len() && same == dense.generated_ids.len() {
            ": the same answer".to_string()
        } else {
            format!("; dense answered: {:?}", dense.text.trim())
        }
    );
}

/// `--compare dense` in `--json`.
fn comparison_json(
    g: &Generation,
    dense: &Generation,
    acc: &Accounting,
    dense_acc: &Accounting,
) -> serde_json::Value {
    json!({
        "criterion": "dense",
        "text": dense.text,
        "generated_ids": dense.generated_ids,
        "decode_tokens_per_s": decode_rate(dense),
        "speedup": decode_rate(g) / decode_rate(dense).max(1e-9),
        "kv_bytes_per_token": dense_acc.kv_bytes / (dense.decode_steps.max(1) as f64),
        "chosen_kv_bytes_per_token": acc.kv_bytes / (g.decode_steps.max(1) as f64),
        "common_prefix_tokens": common_prefix(g, dense),
    })
}
