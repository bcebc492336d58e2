//! Two questions about the pages a selection leaves unread, asked while a model answers one
//! `qada eval` prompt densely: how much of a head's output they carry and a per-page mean
//! value would give back; and how many pages a KV group reads when its heads choose alone
//! or prefer the pages an earlier head of the group chose.
//!
//! At every answer step, layer, KV group and query head the oracle calls long at `tau` (bulk
//! share above `1 - tau`), pages of `P = 32` bulk keys are kept in the order of a page estimate
//! until the estimated unread mass is at most `1 - tau` of the estimated total (top-p). The
//! heads choose in turn; a page an earlier head chose ranks `w` times its mass (`independent`:
//! `w = 1`; `union xW`; `union first`: every such page before any other). The head's output
//! `o = sum_i a_i v_i` is then computed three ways, against the exact one:
//!
//! - `drop`: softmax over sink, window and the kept pages only (what the selection reads);
//! - `+ mean v, exact mass`: each unread page adds `A_p vbar_p`, its exact mass `A_p` times its
//!   mean value `vbar_p`, to numerator and `A_p` to the denominator (the error left is the
//!   spread of values within a page);
//! - `+ mean v, est. mass`: the same with the estimate's mass `A_p_hat`.
//!
//! Reported per head: the relative error `|o_x - o| / |o|` (mean, p90, p99) and the share of
//! the bulk's pages it computes over; per group (`GROUP` rows, the error columns then holding
//! it): the share of the pages the group reads, the union of its long heads'. The estimates:
//! `oracle` (the exact page masses) and `channels-16` (16 channels of largest
//! `(sum_h |q_hj|) spread_j` scored key by key, the rest of the page as its diagonal
//! Gaussian, the `channels` rule in f32).
//!
//! ```sh
//! qada eval --model qwen2.5-0.5b --task niah-multivalue --lengths 8192 --samples 1 \
//!     --prompts-only --out-dir /tmp/prompts
//! cargo run --release -p qada-eval --example tail_compensation -- \
//!     models/qwen2.5-0.5b/Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf /tmp/prompts/prompts.jsonl 0 16
//! ```
//!
//! Arguments: the GGUF file, the prompts file, the line (from 0), and optionally the answer
//! steps to probe (default: the prompt's). Dense decoding, f32 activations, f16 cache, the
//! paper's window; taus 0.8, 0.9, 0.95 and 0.98.

use std::error::Error;

use qada_core::{Decision, KvSegments};
use qada_model::StepObserver;
use qada_stats::{f16, PageBounds, Rows};

mod common;
use common::{answer_densely, estimate, probed_groups, quantile, Prompt, PAGE};

const TAUS: [f64; 4] = [0.8, 0.9, 0.95, 0.98];

fn rows(r: Rows<'_>, d: usize) -> Vec<f32> {
    let n = r.n_rows(d);
    let mut out = vec![0.0f32; n * d];
    for i in 0..n {
        r.row_f32(i, &mut out[i * d..(i + 1) * d]);
    }
    out
}

/// Relative errors and bulk shares read, per (tau, estimate, way).
#[derive(Default)]
struct Tally {
    name: String,
    errs: Vec<f64>,
    read: Vec<f64>,
}

struct Probe {
    tallies: Vec<Tally>,
}

impl Probe {
    fn push(&mut self, name: String, err: f64, read: f64) {
        let i = match self.tallies.iter().position(|t| t.name == name) {
            Some(i) => i,
            None => {
                self.tallies.push(Tally {
                    name,
                    ..Tally::default()
                });
                self.tallies.len() - 1
            }
        };
        self.tallies[i].errs.push(err);
        self.tallies[i].read.push(read);
    }
}

impl StepObserver for Probe {
    fn observe_layer(
        &mut self,
        _layer: usize,
        queries: &[f32],
        kv: &[KvSegments<'_>],
        scale: f32,
        _decisions: &[Decision],
    ) -> qada_model::Result<()> {
        let Some((d, group, groups)) = probed_groups(queries, kv) else {
            return Ok(());
        };
        let scale = scale as f64;
        for (g, k) in groups {
            let t = k.bulk_len();
            let keys = rows(k.bulk_keys, d);
            let values = rows(k.bulk_values, d);
            let mut local_k = rows(k.sink_keys, d);
            local_k.extend(rows(k.window_keys, d));
            let mut local_v = rows(k.sink_values, d);
            local_v.extend(rows(k.window_values, d));
            let mut bounds = PageBounds::new(d, PAGE)?;
            bounds.push_rows_of(Rows::F32(&keys))?;
            let wide = |v: &[f16]| v.iter().map(|x| x.to_f64()).collect::<Vec<_>>();
            let (mean, var) = (wide(bounds.means()), wide(bounds.variances()));
            let spread: Vec<f64> = (0..d)
                .map(|j| bounds.channel_spread(j).map_or(0.0, f64::from))
                .collect();
            let n_pages = t.div_ceil(PAGE);
            // every page's mean value
            let mut vbar = vec![0.0f64; n_pages * d];
            for p in 0..n_pages {
                let page = &values[p * PAGE * d..((p + 1) * PAGE).min(t) * d];
                let n = (page.len() / d) as f64;
                for row in page.chunks(d) {
                    for (m, &x) in vbar[p * d..(p + 1) * d].iter_mut().zip(row) {
                        *m += x as f64 / n;
                    }
                }
            }
            let qs: Vec<&[f32]> = (0..group)
                .map(|j| &queries[(g * group + j) * d..(g * group + j + 1) * d])
                .collect();
            // channels of largest (sum_h |q_hj|) spread_j over the group's heads
            let w: Vec<f64> = (0..d)
                .map(|j| qs.iter().map(|q| q[j].abs() as f64).sum::<f64>() * spread[j])
                .collect();
            let mut ch: Vec<usize> = (0..d).collect();
            ch.sort_by(|&a, &b| w[b].total_cmp(&w[a]));
            ch.truncate(16);
            struct Head {
                mass: Vec<f64>,
                est: Vec<f64>,
                num: Vec<f64>,
                local_mass: f64,
                local_num: Vec<f64>,
                exact: Vec<f64>,
                norm: f64,
                total: f64,
            }
            let mut heads = Vec::new();
            for q in qs {
                let dot = |row: &[f32]| {
                    scale
                        * q.iter()
                            .zip(row)
                            .map(|(&a, &b)| a as f64 * b as f64)
                            .sum::<f64>()
                };
                let s: Vec<f64> = keys.chunks(d).map(dot).collect();
                let sl: Vec<f64> = local_k.chunks(d).map(dot).collect();
                let m = s
                    .iter()
                    .chain(&sl)
                    .copied()
                    .fold(f64::NEG_INFINITY, f64::max);
                // exact page masses and numerators (shifted by m)
                let mut mass = vec![0.0f64; n_pages];
                let mut num = vec![0.0f64; n_pages * d];
                for (i, &x) in s.iter().enumerate() {
                    let e = (x - m).exp();
                    mass[i / PAGE] += e;
                    for (a, &v) in num[(i / PAGE) * d..(i / PAGE + 1) * d]
                        .iter_mut()
                        .zip(&values[i * d..(i + 1) * d])
                    {
                        *a += e * v as f64;
                    }
                }
                let mut local_num = vec![0.0f64; d];
                let mut local_mass = 0.0;
                for (i, &x) in sl.iter().enumerate() {
                    let e = (x - m).exp();
                    local_mass += e;
                    for (a, &v) in local_num.iter_mut().zip(&local_v[i * d..(i + 1) * d]) {
                        *a += e * v as f64;
                    }
                }
                let total = local_mass + mass.iter().sum::<f64>();
                let exact: Vec<f64> = (0..d)
                    .map(|j| {
                        (local_num[j] + (0..n_pages).map(|p| num[p * d + j]).sum::<f64>()) / total
                    })
                    .collect();
                let norm = exact.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-30);
                let est: Vec<f64> = estimate(q, &keys, &mean, &var, &ch, scale)
                    .into_iter()
                    .map(|x| (x - m).exp())
                    .collect();
                heads.push(Head {
                    mass,
                    est,
                    num,
                    local_mass,
                    local_num,
                    exact,
                    norm,
                    total,
                });
            }
            let error = |h: &Head, keep: &[bool], way: &str, est: &[f64]| {
                let mut z = h.local_mass;
                let mut o = h.local_num.clone();
                for p in 0..n_pages {
                    let (a, from_mean) = if keep[p] {
                        (h.mass[p], false)
                    } else {
                        match way {
                            "drop" => continue,
                            "+ mean v, exact mass" => (h.mass[p], true),
                            _ => (est[p], true),
                        }
                    };
                    z += a;
                    for j in 0..d {
                        o[j] += if from_mean {
                            a * vbar[p * d + j]
                        } else {
                            h.num[p * d + j]
                        };
                    }
                }
                o.iter()
                    .zip(&h.exact)
                    .map(|(x, e)| (x / z - e).powi(2))
                    .sum::<f64>()
                    .sqrt()
                    / h.norm
            };
            for tau in TAUS {
                for (ename, by_est) in [("oracle", false), ("channels-16", true)] {
                    // union-aware: a page some earlier head of the group chose already ranks
                    // `bonus` times its mass (its bytes are read; only the multiply-adds cost)
                    for bonus in [1.0f64, 4.0, 16.0, 1e30] {
                        let sel = if bonus == 1.0 {
                            "independent".to_string()
                        } else if bonus > 1e20 {
                            "union first".to_string()
                        } else {
                            format!("union x{bonus}")
                        };
                        let mut union = vec![false; n_pages];
                        let mut long = 0usize;
                        let mut per_head = 0usize;
                        for h in &heads {
                            if h.total - h.local_mass <= (1.0 - tau) * h.total {
                                continue; // local: no page read
                            }
                            long += 1;
                            let est = if by_est { &h.est } else { &h.mass };
                            let est_total = h.local_mass + est.iter().sum::<f64>();
                            let rank: Vec<f64> = (0..n_pages)
                                .map(|p| if union[p] { est[p] * bonus } else { est[p] })
                                .collect();
                            let mut order: Vec<usize> = (0..n_pages).collect();
                            order.sort_by(|&a, &b| rank[b].total_cmp(&rank[a]));
                            let mut unread: f64 = est.iter().sum();
                            let mut keep = vec![false; n_pages];
                            let mut kept = 0usize;
                            for &p in &order {
                                if unread <= (1.0 - tau) * est_total {
                                    break;
                                }
                                keep[p] = true;
                                unread -= est[p];
                                kept += 1;
                            }
                            per_head += kept;
                            let read = kept as f64 / n_pages as f64;
                            let ways: &[&str] = if bonus == 1.0 {
                                &["drop", "+ mean v, exact mass", "+ mean v, est. mass"]
                            } else {
                                &["drop"]
                            };
                            for way in ways {
                                let err = error(h, &keep, way, est);
                                self.push(format!("{tau} | {ename} | {sel} | {way}"), err, read);
                            }
                            for (u, k) in union.iter_mut().zip(&keep) {
                                *u |= *k;
                            }
                        }
                        if long > 0 {
                            let u = union.iter().filter(|x| **x).count() as f64 / n_pages as f64;
                            // the group's union read, and the pages computed per long head
                            self.push(
                                format!(
                                    "{tau} | {ename} | {sel} | GROUP union (read: pages a head)"
                                ),
                                u,
                                per_head as f64 / long as f64 / n_pages as f64,
                            );
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        return Err("usage: tail_compensation MODEL.gguf PROMPTS.jsonl LINE [STEPS]".into());
    }
    let prompt = Prompt::read(&args[2], &args[3])?;
    let steps = match args.get(4) {
        Some(s) => s.parse()?,
        None => prompt.answer_tokens,
    };
    let mut probe = Probe {
        tallies: Vec::new(),
    };
    answer_densely(&args[1], &prompt, steps, &mut probe)?;
    println!("| tau | estimate | selection | way | heads | bulk read: mean | rel. error: mean | p90 | p99 |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for t in &mut probe.tallies {
        let n = t.errs.len();
        let mean = t.errs.iter().sum::<f64>() / n as f64;
        let read = t.read.iter().sum::<f64>() / n as f64;
        println!(
            "| {} | {n} | {read:.3} | {mean:.5} | {:.5} | {:.5} |",
            t.name,
            quantile(&mut t.errs, 0.9),
            quantile(&mut t.errs, 0.99)
        );
    }
    Ok(())
}
