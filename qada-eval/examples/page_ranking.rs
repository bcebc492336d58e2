//! How well each page estimate ranks the bulk's pages, against their exact masses, while a
//! model answers one `qada eval` prompt densely.
//!
//! At every answer step, every layer and KV group, and every query head the oracle calls long
//! at `tau` (bulk share above `1 - tau`): the oracle's budget `B` is the fewest pages (of
//! `P = 32` keys) whose exact mass leaves out at most `1 - tau` of the head's total. Each
//! estimate then keeps its own top `B` pages, and we measure what it leaves out:
//!
//! - `missed`: the exact softmax mass of the pages it leaves out, as a share of the head's
//!   total (the oracle's is at most `1 - tau` by construction);
//! - `needle recall`: for heads whose needle tokens hold at least 5 % of their mass, the share
//!   of that needle mass in the pages kept (what an answer is read from).
//!
//! The estimates (all of the form `ln A_p_hat = lse_{i in p}(scale q_R . k_iR) + scale q_R' .
//! mu_p + scale^2 q_R'^2 . v_p / 2`, `R` the channels scored key by key, the rest of the page as
//! its diagonal Gaussian):
//! - `channels-r`: `R` the `r` channels of largest `(sum_h |q_hj|) (max k_j - min k_j) / 2`
//!   over the group's long heads (the `channels` rule, its keys in f32, its page summaries
//!   the f16 ones of [`PageBounds`]);
//! - `pca-r`: the same in the basis of the bulk keys' principal axes (eigenvectors of their
//!   covariance at the end of prefill, fixed after), queries and keys rotated into it;
//! - `channels-r in b bits`: `channels-r` with the keys as a copy by channel in `b`-bit codes
//!   gives them back (a scale per page and channel; the cache keeps 8 bits);
//! - `channels-bound-E`: channels in the same order, from 8 to at most 32, until every long
//!   head's bound on the rest, `scale sum_{j not in R} |q_hj| spread_j`, is at most `E` nats;
//! - `gaussian`: no channel scored (`R` empty), every page its diagonal Gaussian;
//! - `quest`: Quest's bound `ln n_p + scale (q . c_p + |q| . r_p)` from the page's center and
//!   radius.
//!
//! ```sh
//! qada eval --model qwen2.5-0.5b --task niah-multivalue --lengths 16384 --samples 2 \
//!     --prompts-only --out-dir /tmp/prompts
//! cargo run --release -p qada-eval --example page_ranking -- \
//!     models/qwen2.5-0.5b/Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf /tmp/prompts/prompts.jsonl 1
//! ```
//!
//! Arguments: the GGUF file, the prompts file, the line (from 0), and optionally `tau`
//! (default 0.9). Dense decoding with f32 activations, f16 cache, the paper's window.

use std::collections::HashMap;
use std::error::Error;

use faer::{Mat, Side};
use qada_core::{Decision, KvSegments};
use qada_kv::WindowConfig;
use qada_model::StepObserver;
use qada_stats::{f16, PageBounds, Rows};

mod common;
use common::{answer_densely, estimate, lse, probed_groups, quantile, Prompt, PAGE};

/// What one estimate left out, summed over the probed heads.
#[derive(Default, Clone)]
struct Tally {
    heads: usize,
    missed_sum: f64,
    missed_over: usize,
    missed: Vec<f64>,
    needle_heads: usize,
    needle_recall_sum: f64,
    needle_recall: Vec<f64>,
    /// Channels scored key by key, summed over heads (for the mean).
    columns: usize,
}

/// A KV group's keys as f32 rows, original and rotated, kept across steps (only new rows
/// are converted).
#[derive(Default)]
struct GroupKeys {
    keys: Vec<f32>,
    rotated: Vec<f32>,
    /// `d x d`, column `c` the `c`-th principal axis (largest eigenvalue first).
    basis: Vec<f32>,
}

struct Probe {
    tau: f64,
    sink: usize,
    needle: Vec<bool>,
    names: Vec<String>,
    tallies: Vec<Tally>,
    groups: HashMap<(usize, usize), GroupKeys>,
}

/// Principal axes of the rows of `keys` (`t x d`): the covariance's eigenvectors, largest
/// eigenvalue first, as the columns of a `d x d` row-major matrix.
fn principal_axes(keys: &[f32], d: usize) -> Vec<f32> {
    let t = keys.len() / d;
    let mut mean = vec![0.0f64; d];
    for row in keys.chunks(d) {
        for (m, &x) in mean.iter_mut().zip(row) {
            *m += x as f64;
        }
    }
    mean.iter_mut().for_each(|m| *m /= t as f64);
    let mut cov = vec![0.0f64; d * d];
    for row in keys.chunks(d) {
        for a in 0..d {
            let xa = row[a] as f64 - mean[a];
            for b in 0..=a {
                cov[a * d + b] += xa * (row[b] as f64 - mean[b]);
            }
        }
    }
    let m = Mat::<f64>::from_fn(d, d, |i, j| {
        let (a, b) = if i >= j { (i, j) } else { (j, i) };
        cov[a * d + b] / t as f64
    });
    let evd = m.selfadjoint_eigendecomposition(Side::Lower);
    let s = evd.s().column_vector();
    let u = evd.u();
    let mut order: Vec<usize> = (0..d).collect();
    order.sort_by(|&i, &j| s.read(j).total_cmp(&s.read(i)));
    let mut basis = vec![0.0f32; d * d];
    for (c, &i) in order.iter().enumerate() {
        for r in 0..d {
            basis[r * d + c] = u.read(r, i) as f32;
        }
    }
    basis
}

/// `out = x U` for a row `x` and the `d x d` basis `U`.
fn rotate(x: &[f32], basis: &[f32], out: &mut [f32]) {
    let d = x.len();
    out.fill(0.0);
    for (r, &xr) in x.iter().enumerate() {
        for (o, &u) in out.iter_mut().zip(&basis[r * d..(r + 1) * d]) {
            *o += xr * u;
        }
    }
}

/// Per page (`n_pages x d`): each channel's mean and variance, center and radius, as the
/// cache's [`PageBounds`] keep them (f16); over the bulk, each channel's spread
/// `(max - min) / 2` ([`PageBounds::channel_spread`]).
struct PageStats {
    mean: Vec<f64>,
    var: Vec<f64>,
    center: Vec<f64>,
    radius: Vec<f64>,
    spread: Vec<f64>,
}

fn page_stats(keys: &[f32], d: usize) -> qada_stats::Result<PageStats> {
    let mut bounds = PageBounds::new(d, PAGE)?;
    bounds.push_rows_of(Rows::F32(keys))?;
    let wide = |v: &[f16]| v.iter().map(|x| x.to_f64()).collect();
    Ok(PageStats {
        mean: wide(bounds.means()),
        var: wide(bounds.variances()),
        center: wide(bounds.centers()),
        radius: wide(bounds.radii()),
        spread: (0..d)
            .map(|j| bounds.channel_spread(j).map_or(f64::NAN, f64::from))
            .collect(),
    })
}

/// As [`estimate`] in the principal basis `U`, the rest of the page from its diagonal
/// Gaussian in the original channels: `q_perp = q - sum_{c in R} q~_c U_c`, the part of the
/// query the chosen axes leave (what a cache that keeps only the rotated copy of the chosen
/// axes, and the pages' means and variances per channel, can compute).
fn pca_estimate(
    q: &[f32],
    q_rot: &[f32],
    rotated: &[f32],
    st: &PageStats,
    chosen: &[usize],
    basis: &[f32],
    scale: f64,
) -> Vec<f64> {
    let d = q.len();
    let t = rotated.len() / d;
    let n_pages = t.div_ceil(PAGE);
    let mut perp: Vec<f64> = q.iter().map(|&x| x as f64).collect();
    for &c in chosen {
        for (r, p) in perp.iter_mut().enumerate() {
            *p -= q_rot[c] as f64 * basis[r * d + c] as f64;
        }
    }
    (0..n_pages)
        .map(|p| {
            let rows = &rotated[p * PAGE * d..((p + 1) * PAGE).min(t) * d];
            let g: f64 = (0..d)
                .map(|j| {
                    scale * perp[j] * st.mean[p * d + j]
                        + 0.5 * scale * scale * perp[j] * perp[j] * st.var[p * d + j]
                })
                .sum();
            let part = lse(rows.chunks(d).map(|row| {
                scale
                    * chosen
                        .iter()
                        .map(|&c| q_rot[c] as f64 * row[c] as f64)
                        .sum::<f64>()
            }));
            part + g
        })
        .collect()
}

/// Channels in the order of `(sum_h |q_hj|) spread_j` over the long heads' queries, the
/// fewest (from `lo` to `hi`) that leave every head's bound on the rest,
/// `scale sum_{j not in R} |q_hj| spread_j`, at most `nats`.
fn choose_bounded(
    queries: &[Vec<f32>],
    spread: &[f64],
    scale: f64,
    nats: f64,
    lo: usize,
    hi: usize,
) -> Vec<usize> {
    let mut idx = choose(queries, spread, spread.len());
    let rest = |r: usize| {
        queries
            .iter()
            .map(|q| {
                scale
                    * idx[r..]
                        .iter()
                        .map(|&j| q[j].abs() as f64 * spread[j])
                        .sum::<f64>()
            })
            .fold(0.0, f64::max)
    };
    let mut r = lo.min(idx.len());
    while r < hi.min(idx.len()) && rest(r) > nats {
        r += 1;
    }
    idx.truncate(r);
    idx
}

/// The keys (`t x d`) as a copy by channel in `bits`-bit codes would give them back: per page
/// and channel a scale `s = max |k| / m`, `m = 2^(bits - 1) - 1`, and `s round(k / s)`
/// (what [`qada_stats::ChannelKeys`] keeps at 8 bits).
fn quantized(keys: &[f32], d: usize, bits: u32) -> Vec<f32> {
    let m = ((1u32 << (bits - 1)) - 1) as f32;
    let mut out = keys.to_vec();
    for page in out.chunks_mut(PAGE * d) {
        for j in 0..d {
            let top = page
                .iter()
                .skip(j)
                .step_by(d)
                .fold(0.0f32, |a, x| a.max(x.abs()));
            let s = top / m;
            for x in page.iter_mut().skip(j).step_by(d) {
                *x = if s > 0.0 {
                    (*x / s).round().clamp(-m, m) * s
                } else {
                    0.0
                };
            }
        }
    }
    out
}

/// The `r` channels of largest `(sum_h |q_hj|) spread_j` over the long heads' queries.
fn choose(queries: &[Vec<f32>], spread: &[f64], r: usize) -> Vec<usize> {
    let d = spread.len();
    let w: Vec<f64> = (0..d)
        .map(|j| queries.iter().map(|q| q[j].abs() as f64).sum::<f64>() * spread[j])
        .collect();
    let mut idx: Vec<usize> = (0..d).collect();
    idx.sort_by(|&a, &b| w[b].total_cmp(&w[a]));
    idx.truncate(r.min(d));
    idx
}

impl Probe {
    fn tally(&mut self, name: &str, columns: usize, missed: f64, needle_recall: Option<f64>) {
        let i = match self.names.iter().position(|n| n == name) {
            Some(i) => i,
            None => {
                self.names.push(name.to_string());
                self.tallies.push(Tally::default());
                self.names.len() - 1
            }
        };
        let t = &mut self.tallies[i];
        t.heads += 1;
        t.columns += columns;
        t.missed_sum += missed;
        t.missed.push(missed);
        if missed > 1.0 - self.tau + 1e-9 {
            t.missed_over += 1;
        }
        if let Some(r) = needle_recall {
            t.needle_heads += 1;
            t.needle_recall_sum += r;
            t.needle_recall.push(r);
        }
    }
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
        for (g, k) in groups {
            let t = k.bulk_len();
            let gk = self.groups.entry((layer, g)).or_default();
            let had = gk.keys.len() / d;
            gk.keys.resize(t * d, 0.0);
            for i in had..t {
                k.bulk_keys.row_f32(i, &mut gk.keys[i * d..(i + 1) * d]);
            }
            if gk.basis.is_empty() {
                gk.basis = principal_axes(&gk.keys, d);
            }
            let had_r = gk.rotated.len() / d;
            gk.rotated.resize(t * d, 0.0);
            for i in had_r..t {
                let (src, dst) = (
                    &gk.keys[i * d..(i + 1) * d],
                    &mut gk.rotated[i * d..(i + 1) * d],
                );
                rotate(src, &gk.basis, dst);
            }
            let keys = gk.keys.clone();
            let keys_q8 = quantized(&keys, d, 8);
            let keys_q4 = quantized(&keys, d, 4);
            let rotated = gk.rotated.clone();
            let basis = gk.basis.clone();
            let st = page_stats(&keys, d)?;
            let st_rot = page_stats(&rotated, d)?;
            let n_pages = t.div_ceil(PAGE);
            // every head's exact masses, and which heads are long
            let mut long = Vec::new();
            for j in 0..group {
                let h = g * group + j;
                let q = &queries[h * d..(h + 1) * d];
                let dot = |row: &[f32]| {
                    scale
                        * q.iter()
                            .zip(row)
                            .map(|(&a, &b)| a as f64 * b as f64)
                            .sum::<f64>()
                };
                let mut local = Vec::new();
                let mut row = vec![0.0f32; d];
                for i in 0..k.sink_keys.n_rows(d) {
                    k.sink_keys.row_f32(i, &mut row);
                    local.push(dot(&row));
                }
                for i in 0..k.window_keys.n_rows(d) {
                    k.window_keys.row_f32(i, &mut row);
                    local.push(dot(&row));
                }
                let s: Vec<f64> = keys.chunks(d).map(dot).collect();
                let pages: Vec<f64> = s.chunks(PAGE).map(|c| lse(c.iter().copied())).collect();
                let log_local = lse(local.iter().copied());
                let log_bulk = lse(pages.iter().copied());
                let total = lse([log_local, log_bulk].into_iter());
                if (log_bulk - total).exp() <= 1.0 - self.tau {
                    continue;
                }
                // needle mass per page (bulk row i is position sink + i)
                let needle: Vec<f64> = s
                    .chunks(PAGE)
                    .enumerate()
                    .map(|(p, c)| {
                        lse(c.iter().enumerate().filter_map(|(o, &x)| {
                            let pos = self.sink + p * PAGE + o;
                            self.needle.get(pos).copied().unwrap_or(false).then_some(x)
                        }))
                    })
                    .collect();
                long.push((q.to_vec(), pages, needle, total));
            }
            if long.is_empty() {
                continue;
            }
            let qs: Vec<Vec<f32>> = long.iter().map(|l| l.0.clone()).collect();
            let qs_rot: Vec<Vec<f32>> = qs
                .iter()
                .map(|q| {
                    let mut o = vec![0.0; d];
                    rotate(q, &basis, &mut o);
                    o
                })
                .collect();
            for (i, (q, exact, needle, total)) in long.iter().enumerate() {
                // the oracle's budget
                let mut order: Vec<usize> = (0..n_pages).collect();
                order.sort_by(|&a, &b| exact[b].total_cmp(&exact[a]));
                let budget_mass = (1.0 - self.tau) * total.exp();
                let mut left = exact.iter().map(|x| x.exp()).sum::<f64>();
                let mut b = 0;
                while b < n_pages && left > budget_mass {
                    left -= exact[order[b]].exp();
                    b += 1;
                }
                let b = b.max(1);
                let needle_total = lse(needle.iter().copied());
                let attends_needles = (needle_total - total).exp() >= 0.05;
                let judge =
                    |name: &str, cols: usize, est: &[f64], budget: usize, this: &mut Probe| {
                        let mut ord: Vec<usize> = (0..n_pages).collect();
                        ord.sort_by(|&a, &c| est[c].total_cmp(&est[a]));
                        let kept = &ord[..budget.min(n_pages)];
                        let mut keep = vec![false; n_pages];
                        kept.iter().for_each(|&p| keep[p] = true);
                        let missed = lse((0..n_pages).filter(|p| !keep[*p]).map(|p| exact[p]));
                        let recall = attends_needles.then(|| {
                            (lse((0..n_pages).filter(|p| keep[*p]).map(|p| needle[p]))
                                - needle_total)
                                .exp()
                        });
                        this.tally(name, cols, (missed - total).exp(), recall);
                    };
                let quest: Vec<f64> = (0..n_pages)
                    .map(|p| {
                        let n = (keys.len() / d - p * PAGE).min(PAGE) as f64;
                        n.ln()
                            + scale
                                * (0..d)
                                    .map(|j| {
                                        q[j] as f64 * st.center[p * d + j]
                                            + (q[j] as f64).abs() * st.radius[p * d + j]
                                    })
                                    .sum::<f64>()
                    })
                    .collect();
                let mut ests: Vec<(String, usize, Vec<f64>)> = vec![
                    ("oracle".into(), d, exact.clone()),
                    ("quest".into(), 0, quest),
                    (
                        "gaussian".into(),
                        0,
                        estimate(q, &keys, &st.mean, &st.var, &[], scale),
                    ),
                ];
                for r in [8, 16] {
                    let ch = choose(&qs, &st.spread, r);
                    let est = estimate(q, &keys, &st.mean, &st.var, &ch, scale);
                    ests.push((format!("channels-{r}"), r, est));
                    let ch = choose(&qs_rot, &st_rot.spread, r);
                    let est = estimate(&qs_rot[i], &rotated, &st_rot.mean, &st_rot.var, &ch, scale);
                    ests.push((format!("pca-{r}"), r, est));
                    let est = pca_estimate(q, &qs_rot[i], &rotated, &st, &ch, &basis, scale);
                    ests.push((format!("pca-{r}/rest by channel"), r, est));
                }
                for r in [16, 24, 32] {
                    let ch = choose(&qs, &st.spread, r);
                    for (bits, kq) in [(8, &keys_q8), (4, &keys_q4)] {
                        let est = estimate(q, kq, &st.mean, &st.var, &ch, scale);
                        ests.push((format!("channels-{r} in {bits} bits"), r, est));
                    }
                }
                for nats in [16.0, 32.0] {
                    let ch = choose_bounded(&qs, &st.spread, scale, nats, 8, 32);
                    let est = estimate(q, &keys, &st.mean, &st.var, &ch, scale);
                    ests.push((format!("channels-bound-{nats}"), ch.len(), est));
                }
                for (name, cols, est) in &ests {
                    judge(name, *cols, est, b, self);
                    judge(&format!("{name} @2B"), *cols, est, 2 * b, self);
                }
            }
        }
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        return Err("usage: page_ranking MODEL.gguf PROMPTS.jsonl LINE [TAU]".into());
    }
    let tau: f64 = args.get(4).map_or(Ok(0.9), |s| s.parse())?;
    let prompt = Prompt::read(&args[2], &args[3])?;
    let mut needle = vec![false; prompt.ids.len() + 1024];
    for &(a, b) in &prompt.needles {
        needle[a..b].iter_mut().for_each(|x| *x = true);
    }
    eprintln!("probing at tau {tau}");
    let mut probe = Probe {
        tau,
        sink: WindowConfig::PAPER.sink(),
        needle,
        names: Vec::new(),
        tallies: Vec::new(),
        groups: HashMap::new(),
    };
    answer_densely(&args[1], &prompt, prompt.answer_tokens, &mut probe)?;
    println!(
        "| estimate | heads | channels: mean | missed: mean | p90 | p99 | share > 1 - tau | needle heads | needle recall: mean | p10 | min |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (name, t) in probe.names.iter().zip(&mut probe.tallies) {
        println!(
            "| {name} | {} | {:.1} | {:.4} | {:.4} | {:.4} | {:.3} | {} | {:.3} | {:.3} | {:.3} |",
            t.heads,
            t.columns as f64 / t.heads.max(1) as f64,
            t.missed_sum / t.heads as f64,
            quantile(&mut t.missed, 0.9),
            quantile(&mut t.missed, 0.99),
            t.missed_over as f64 / t.heads as f64,
            t.needle_heads,
            t.needle_recall_sum / t.needle_heads.max(1) as f64,
            quantile(&mut t.needle_recall, 0.1),
            quantile(&mut t.needle_recall, 0.0),
        );
    }
    Ok(())
}
