//! What the probe examples (`page_ranking`, `tail_compensation`) share: a prompt from
//! `qada eval --prompts-only`, dense decoding of it with an observer, and the page estimate
//! they rank pages by.

// each example uses a part of it
#![allow(dead_code)]

use std::error::Error;
use std::path::Path;

use qada_core::KvSegments;
use qada_kv::{KvDtype, WindowConfig};
use qada_model::{
    ActPrecision, LoadOptions, Model, Sampler, SamplingParams, Session, SessionOptions,
    StepObserver,
};

/// Keys per page.
pub const PAGE: usize = 32;

/// The KV groups of an observed layer whose bulk holds at least 8 pages, each with its index
/// `g`, and the key length `d` and query heads per group (`None` for a layer without KV heads).
pub fn probed_groups<'a>(
    queries: &[f32],
    kv: &'a [KvSegments<'a>],
) -> Option<(
    usize,
    usize,
    impl Iterator<Item = (usize, &'a KvSegments<'a>)>,
)> {
    let d = kv.first()?.dim;
    let group = queries.len() / d / kv.len();
    let long = kv
        .iter()
        .enumerate()
        .filter(|(_, k)| k.bulk_len() >= 8 * PAGE);
    Some((d, group, long))
}

/// `ln sum exp(x)`, in f64.
pub fn lse(xs: impl Iterator<Item = f64> + Clone) -> f64 {
    let m = xs.clone().fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY {
        return m;
    }
    m + xs.map(|x| (x - m).exp()).sum::<f64>().ln()
}

/// The `q`-quantile of `xs` (sorted in place); NaN when empty.
pub fn quantile(xs: &mut [f64], q: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[((xs.len() - 1) as f64 * q).round() as usize]
}

/// One line of a `prompts.jsonl`: the prompt's ids, its needles' token ranges, the answer
/// steps it asks for, and the record itself (task, length, sample, expected).
pub struct Prompt {
    pub ids: Vec<u32>,
    pub needles: Vec<(usize, usize)>,
    pub answer_tokens: usize,
    pub record: serde_json::Value,
}

impl Prompt {
    /// Line `line` (from 0) of the prompts file `path`.
    pub fn read(path: &str, line: &str) -> Result<Self, Box<dyn Error>> {
        let text = std::fs::read_to_string(path)?
            .lines()
            .nth(line.parse()?)
            .ok_or("no such line in the prompts file")?
            .to_string();
        let record: serde_json::Value = serde_json::from_str(&text)?;
        let ids = record["ids"]
            .as_array()
            .ok_or("no ids")?
            .iter()
            .map(|v| v.as_u64().unwrap_or(0) as u32)
            .collect();
        let needles = record["needles"]
            .as_array()
            .ok_or("no needles")?
            .iter()
            .map(|r| {
                let at = |i: usize| r[i].as_u64().unwrap_or(0) as usize;
                (at(0), at(1))
            })
            .collect();
        let answer_tokens = record["answer_tokens"].as_u64().unwrap_or(32) as usize;
        Ok(Self {
            ids,
            needles,
            answer_tokens,
            record,
        })
    }
}

/// Load `model_path` (f32 activations), prefill the prompt but its last token into an f16
/// cache with the paper's window, then decode `steps` greedy tokens densely, `probe` watching
/// every layer of every step. Prints the answer and the expected one.
pub fn answer_densely(
    model_path: &str,
    prompt: &Prompt,
    steps: usize,
    probe: &mut (dyn StepObserver + Send),
) -> Result<(), Box<dyn Error>> {
    let model = Model::load(
        Path::new(model_path),
        &LoadOptions {
            activations: ActPrecision::F32,
            ..LoadOptions::default()
        },
    )?;
    let mut session = Session::new(
        &model,
        SessionOptions {
            kv_dtype: KvDtype::F16,
            ..SessionOptions::new(Box::new(qada_core::Dense), WindowConfig::PAPER)
        },
    )?;
    let (head, last) = prompt.ids.split_at(prompt.ids.len() - 1);
    let t0 = std::time::Instant::now();
    session.prefill(head, &mut |_, _| {})?;
    let p = &prompt.record;
    eprintln!(
        "{} {} sample {}: {} tokens prefilled in {:.0} s; {steps} answer steps probed",
        p["task"],
        p["length"],
        p["sample"],
        prompt.ids.len(),
        t0.elapsed().as_secs_f64()
    );
    let tok = model.tokenizer();
    let mut sampler = Sampler::new(SamplingParams::default())?;
    let mut next = last[0];
    let mut answer = Vec::new();
    for _ in 0..steps {
        let logits = session.step_observed(next, Some(&mut *probe))?;
        next = sampler.sample(logits)?;
        if Some(next) == tok.eos() {
            break;
        }
        answer.push(next);
    }
    println!("answer: {:?}", tok.decode(&answer));
    println!("expected: {}", p["expected"]);
    Ok(())
}

/// `ln A_p_hat` per page of `keys` (`t x d`): channels `chosen` scored key by key, the rest
/// of the page as its diagonal Gaussian from its per-channel `mean` and `var` (`n_pages x d`):
/// `lse_{i in p}(scale q_R . k_iR) + scale q_R' . mu_p + scale^2 q_R'^2 . v_p / 2`. With no
/// channel chosen the first term is `ln n_p`.
pub fn estimate(
    q: &[f32],
    keys: &[f32],
    mean: &[f64],
    var: &[f64],
    chosen: &[usize],
    scale: f64,
) -> Vec<f64> {
    let d = q.len();
    let t = keys.len() / d;
    let mut rest = q.iter().map(|&x| x as f64).collect::<Vec<_>>();
    for &c in chosen {
        rest[c] = 0.0;
    }
    (0..t.div_ceil(PAGE))
        .map(|p| {
            let page = &keys[p * PAGE * d..((p + 1) * PAGE).min(t) * d];
            let g: f64 = (0..d)
                .map(|j| {
                    scale * rest[j] * mean[p * d + j]
                        + 0.5 * scale * scale * rest[j] * rest[j] * var[p * d + j]
                })
                .sum();
            let part = if chosen.is_empty() {
                ((page.len() / d) as f64).ln()
            } else {
                lse(page.chunks(d).map(|row| {
                    scale
                        * chosen
                            .iter()
                            .map(|&c| q[c] as f64 * row[c] as f64)
                            .sum::<f64>()
                }))
            };
            part + g
        })
        .collect()
}
