//! Per-head cost at d = 64: dense attention over T keys, local attention over the 128-token
//! window (16 sink + 112 recent), and the QAdA decision (Gaussian score model from moments);
//! the GQA block kernels, group decisions, one layer of Gemma 3 through `attend_layer`, and
//! prefill's attention for a block of 512 queries deep in the context.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use qada_core::attention::{dense_attention, local_attention, scores, KvSegments};
use qada_core::{Approx, HeadInput, LocalityCriterion};
use qada_stats::KeyMoments;

const D: usize = 64;
const SINK: usize = 16;
const LOCAL: usize = 128;

fn data(t: usize, salt: f32) -> Vec<f32> {
    (0..t * D)
        .map(|i| ((i as f32) * 0.0137 + salt).sin())
        .collect()
}

/// `t` rows of `d` halves, `sin(0.0137 i + salt)`.
fn half_rows(t: usize, d: usize, salt: f32) -> Vec<qada_stats::f16> {
    (0..t * d)
        .map(|i| qada_stats::f16::from_f32(((i as f32) * 0.0137 + salt).sin()))
        .collect()
}

/// One KV head over `keys` and `values` (rows of `d`): `sink` rows, then `bulk`, then the
/// window (the rest).
fn segments<'a>(
    d: usize,
    (sink, bulk): (usize, usize),
    keys: &'a [qada_stats::f16],
    values: &'a [qada_stats::f16],
    moments: &'a KeyMoments,
) -> KvSegments<'a> {
    let (b0, w0) = (sink * d, (sink + bulk) * d);
    KvSegments {
        dim: d,
        sink_keys: (&keys[..b0]).into(),
        sink_values: (&values[..b0]).into(),
        bulk_keys: (&keys[b0..w0]).into(),
        bulk_values: (&values[b0..w0]).into(),
        window_keys: (&keys[w0..]).into(),
        window_values: (&values[w0..]).into(),
        bulk_moments: moments,
        bulk_pages: None,
        bulk_clusters: None,
    }
}

fn per_head(c: &mut Criterion) {
    let mut group = c.benchmark_group("head_d64");
    let q: Vec<f32> = (0..D).map(|i| (i as f32 * 0.3).cos()).collect();
    let scale = 1.0 / (D as f32).sqrt();
    for t in [1024usize, 4096, 16384, 65536] {
        let keys = data(t, 0.0);
        let values = data(t, 1.0);
        let w = t - (LOCAL - SINK);
        let moments = KeyMoments::from_rows(D, &keys[SINK * D..w * D]).unwrap();
        let kv = KvSegments {
            dim: D,
            sink_keys: (&keys[..SINK * D]).into(),
            sink_values: (&values[..SINK * D]).into(),
            bulk_keys: (&keys[SINK * D..w * D]).into(),
            bulk_values: (&values[SINK * D..w * D]).into(),
            window_keys: (&keys[w * D..]).into(),
            window_values: (&values[w * D..]).into(),
            bulk_moments: &moments,
            bulk_pages: None,
            bulk_clusters: None,
        };
        let mut scratch = Vec::new();
        let mut out = vec![0.0f32; D];
        group.bench_function(BenchmarkId::new("dense_attention", t), |b| {
            b.iter(|| dense_attention(black_box(&q), &kv, scale, &mut scratch, &mut out))
        });
        group.bench_function(BenchmarkId::new("local_attention", t), |b| {
            b.iter(|| local_attention(black_box(&q), &kv, scale, &mut scratch, &mut out))
        });
        let mut local_scores = vec![0.0f32; LOCAL];
        scores(&q, kv.sink_keys, scale, &mut local_scores[..SINK]);
        scores(&q, kv.window_keys, scale, &mut local_scores[SINK..]);
        let approx = Approx::new(0.6).unwrap();
        group.bench_function(BenchmarkId::new("approx_decision", t), |b| {
            b.iter(|| {
                let input = HeadInput {
                    layer: 0,
                    head: 0,
                    query: black_box(&q),
                    scale,
                    local_scores: &local_scores,
                    bulk_len: kv.bulk_len(),
                    bulk_moments: &moments,
                    bulk_keys: kv.bulk_keys,
                    bulk_pages: None,
                    bulk_clusters: None,
                };
                approx.decide(&input).unwrap()
            })
        });
        let factored = qada_stats::FactoredMoments::new(&moments, 1e-3).unwrap();
        group.bench_function(BenchmarkId::new("approx_decision_factored", t), |b| {
            b.iter(|| {
                let input = HeadInput {
                    layer: 0,
                    head: 0,
                    query: black_box(&q),
                    scale,
                    local_scores: &local_scores,
                    bulk_len: kv.bulk_len(),
                    bulk_moments: &factored,
                    bulk_keys: kv.bulk_keys,
                    bulk_pages: None,
                    bulk_clusters: None,
                };
                approx.decide(&input).unwrap()
            })
        });
    }
    group.finish();
}

/// One bulk chunk (512 rows, f16) for the 3 query heads of a GQA group: scores and weighted
/// values with every row read once for the group (`block_*`), against head by head.
fn gqa_block(c: &mut Criterion) {
    use qada_core::attention::Elem;
    use qada_stats::f16;
    const N: usize = 512;
    const H: usize = 3;
    let mut group = c.benchmark_group("gqa_chunk_f16_d64");
    let rows: Vec<f16> = data(N, 0.5).iter().map(|&x| f16::from_f32(x)).collect();
    let q: Vec<f32> = (0..H * D).map(|i| (i as f32 * 0.3).cos()).collect();
    let w: Vec<f32> = (0..H * N).map(|i| 1.0 / (1 + i) as f32).collect();
    let mut s = vec![0.0f32; H * N];
    let mut acc = vec![0.0f32; H * D];
    group.bench_function("block_scores_and_accumulate", |b| {
        b.iter(|| {
            f16::block_scores(black_box(&q), &rows, D, 0.125, &mut s).unwrap();
            f16::block_accumulate(&mut acc, black_box(&w), &rows, D).unwrap();
        })
    });
    group.bench_function("scores_max_exp_accumulate", |b| {
        use qada_core::attention::{exp_in_place, max_score};
        b.iter(|| {
            f16::block_scores(black_box(&q), &rows, D, 0.125, &mut s).unwrap();
            for sj in s.chunks_exact_mut(N) {
                let m = max_score(sj, f32::NEG_INFINITY);
                black_box(exp_in_place(sj, m));
            }
            f16::block_accumulate(&mut acc, &s, &rows, D).unwrap();
        })
    });
    group.bench_function("block_scores", |b| {
        b.iter(|| f16::block_scores(black_box(&q), &rows, D, 0.125, &mut s).unwrap())
    });
    group.bench_function("block_accumulate", |b| {
        b.iter(|| f16::block_accumulate(&mut acc, black_box(&w), &rows, D).unwrap())
    });
    group.bench_function("head_by_head", |b| {
        b.iter(|| {
            for j in 0..H {
                let qj = &black_box(&q)[j * D..(j + 1) * D];
                for (i, k) in rows.chunks_exact(D).enumerate() {
                    s[j * N + i] = 0.125 * f16::dot(qj, k);
                }
            }
            for j in 0..H {
                for (i, v) in rows.chunks_exact(D).enumerate() {
                    f16::axpy(&mut acc[j * D..(j + 1) * D], black_box(&w)[j * N + i], v);
                }
            }
        })
    });
    group.finish();
}

/// A GQA group of 7 query heads (Qwen2.5-0.5B: 14 heads over 2 KV heads) against 4096 rows of
/// d = 64, f16 rows against q8_0 rows: block scores, block accumulate, and both.
fn gqa_group7_q8_vs_f16(c: &mut Criterion) {
    use qada_core::attention::Elem;
    use qada_stats::{f16, Q8Block};
    const N: usize = 4096;
    const H: usize = 7;
    let x = data(N, 0.5);
    let rows16: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
    let mut rows8 = Vec::new();
    Q8Block::quantize_into(&x, &mut rows8);
    let q: Vec<f32> = (0..H * D).map(|i| (i as f32 * 0.3).cos()).collect();
    let w: Vec<f32> = (0..H * N).map(|i| 1.0 / (1 + i) as f32).collect();
    let mut s = vec![0.0f32; H * N];
    let mut acc = vec![0.0f32; H * D];
    let mut group = c.benchmark_group("gqa_group7_d64_4096");
    group.bench_function("f16/block_scores", |b| {
        b.iter(|| f16::block_scores(black_box(&q), &rows16, D, 0.125, &mut s).unwrap())
    });
    group.bench_function("q8/block_scores", |b| {
        b.iter(|| Q8Block::block_scores(black_box(&q), &rows8, D, 0.125, &mut s).unwrap())
    });
    group.bench_function("f16/block_accumulate", |b| {
        b.iter(|| f16::block_accumulate(&mut acc, black_box(&w), &rows16, D).unwrap())
    });
    group.bench_function("q8/block_accumulate", |b| {
        b.iter(|| Q8Block::block_accumulate(&mut acc, black_box(&w), &rows8, D).unwrap())
    });
    group.bench_function("f16/scores_and_accumulate", |b| {
        b.iter(|| {
            f16::block_scores(black_box(&q), &rows16, D, 0.125, &mut s).unwrap();
            f16::block_accumulate(&mut acc, black_box(&w), &rows16, D).unwrap();
        })
    });
    group.bench_function("q8/scores_and_accumulate", |b| {
        b.iter(|| {
            Q8Block::block_scores(black_box(&q), &rows8, D, 0.125, &mut s).unwrap();
            Q8Block::block_accumulate(&mut acc, black_box(&w), &rows8, D).unwrap();
        })
    });
    group.finish();
}

/// The decisions of one GQA group of 3 query heads (SmolLM2's) at T = 4096, d = 64: QAdA and
/// the 4-cluster mixture, head by head (`decide` three times) against the group at once
/// (`decide_group`: each covariance read once for the three heads).
fn group_decisions(c: &mut Criterion) {
    use qada_core::{Decision, Mixture};
    use qada_stats::ClusterMoments;
    const H: usize = 3;
    const T: usize = 4096;
    let keys = data(T, 0.0);
    let w = T - (LOCAL - SINK);
    let bulk = &keys[SINK * D..w * D];
    let moments = KeyMoments::from_rows(D, bulk).unwrap();
    let mut clusters = ClusterMoments::new(D, 4).unwrap();
    clusters.fit(bulk.into()).unwrap();
    let scale = 1.0 / (D as f32).sqrt();
    let qs: Vec<Vec<f32>> = (0..H)
        .map(|h| (0..D).map(|i| ((i + 7 * h) as f32 * 0.3).cos()).collect())
        .collect();
    let local: Vec<Vec<f32>> = qs
        .iter()
        .map(|q| {
            let mut s = vec![0.0f32; LOCAL];
            scores(q, (&keys[..SINK * D]).into(), scale, &mut s[..SINK]);
            scores(q, (&keys[w * D..]).into(), scale, &mut s[SINK..]);
            s
        })
        .collect();
    let inputs: Vec<HeadInput<'_>> = (0..H)
        .map(|h| HeadInput {
            layer: 0,
            head: h,
            query: &qs[h],
            scale,
            local_scores: &local[h],
            bulk_len: w - SINK,
            bulk_moments: &moments,
            bulk_keys: bulk.into(),
            bulk_pages: None,
            bulk_clusters: Some(&clusters),
        })
        .collect();
    let mut out = [Decision::LONG; H];
    let mut group = c.benchmark_group("group3_decision_d64_4096");
    let approx = Approx::new(0.6).unwrap();
    let mixture = Mixture::new(0.6, 4).unwrap();
    let criteria: [(&str, &dyn LocalityCriterion); 2] =
        [("approx", &approx), ("mixture", &mixture)];
    for (name, crit) in criteria {
        group.bench_function(BenchmarkId::new(name, "head_by_head"), |b| {
            b.iter(|| {
                for (i, o) in inputs.iter().zip(out.iter_mut()) {
                    *o = crit.decide(black_box(i)).unwrap();
                }
            })
        });
        group.bench_function(BenchmarkId::new(name, "group"), |b| {
            b.iter(|| crit.decide_group(black_box(&inputs), &mut out).unwrap())
        });
    }
    group.finish();
}

/// One decoding step of a Gemma 3 270M layer through `attend_layer` (dense): one KV head of 4
/// query heads, d = 256, f16 rows. A sliding layer (its 512-position window, all local) and a
/// global layer at T = 4096 (sink 16 and window 112 local, the bulk in parallel chunks).
fn layer_gemma_d256(c: &mut Criterion) {
    use qada_core::{attend_layer, Dense, LayerScratch};
    const DG: usize = 256;
    const H: usize = 4;
    let q: Vec<f32> = (0..H * DG).map(|i| (i as f32 * 0.3).cos()).collect();
    let scale = 1.0 / (DG as f32).sqrt();
    let mut group = c.benchmark_group("layer_gemma_d256");
    for (name, sink, bulk, window) in [("sliding_512", 0, 0, 512), ("global_4096", 16, 3968, 112)] {
        let t = sink + bulk + window;
        let (keys, values) = (half_rows(t, DG, 0.0), half_rows(t, DG, 1.0));
        let moments = KeyMoments::new(DG);
        let kv = [segments(DG, (sink, bulk), &keys, &values, &moments)];
        let mut scratch = LayerScratch::new();
        let mut out = vec![0.0f32; H * DG];
        group.bench_function(name, |b| {
            b.iter(|| {
                attend_layer(&Dense, 0, black_box(&q), &kv, scale, &mut scratch, &mut out).unwrap()
            })
        });
    }
    group.finish();
}

/// Prefill's attention for a block of 512 queries after 8192 cached positions, f16 cache:
/// Qwen2.5-0.5B's shape (14 query heads over 2 KV heads, d = 64) and a global layer of
/// Gemma 3 270M (4 over 1, d = 256).
fn prefill_block(c: &mut Criterion) {
    use qada_core::attention::{prefill_attention, PrefillHead, PrefillShape};
    use qada_stats::f16;
    const N: usize = 512;
    const POS0: usize = 8192;
    let mut group = c.benchmark_group("prefill_512_at_8192");
    group.sample_size(10);
    for (name, n_heads, n_kv, d) in [("qwen_14x2_d64", 14, 2, 64), ("gemma_4x1_d256", 4, 1, 256)] {
        let t = POS0 + N;
        let rows: Vec<Vec<f16>> = (0..2 * n_kv).map(|h| half_rows(t, d, h as f32)).collect();
        let kv: Vec<PrefillHead<'_>> = (0..n_kv)
            .map(|g| PrefillHead {
                keys: rows[2 * g].as_slice().into(),
                values: rows[2 * g + 1].as_slice().into(),
                first: 0,
            })
            .collect();
        let shape = PrefillShape {
            n_heads,
            dim: d,
            scale: 1.0 / (d as f32).sqrt(),
            softcap: None,
            window: None,
        };
        let q: Vec<f32> = (0..N * n_heads * d)
            .map(|i| (i as f32 * 0.3).cos())
            .collect();
        let mut out = vec![0.0f32; N * n_heads * d];
        group.bench_function(name, |b| {
            b.iter(|| prefill_attention(&kv, &shape, black_box(&q), N, POS0, &mut out).unwrap())
        });
    }
    group.finish();
}

/// The channel rule's page choice for one KV group of Qwen2.5-0.5B at 16k: 7 long heads,
/// d = 64, 16,384 bulk keys in pages of 32, 8 and 16 channels (16: Qwen's calibrated count).
/// `column_page_masses` alone (the scores of the columns and a log-sum-exp per page and
/// head), and the whole `choose_pages` (channels chosen, page means and variances scored,
/// masses, budget per head).
fn channel_selection_group7(c: &mut Criterion) {
    use qada_core::attention::column_page_masses;
    use qada_core::{Decision, PageRule, PageSelection, Pages};
    use qada_stats::{PageBounds, Rows};
    const T: usize = 16_384;
    const H: usize = 7;
    const P: usize = 32;
    let keys = data(T, 0.25);
    let mut pages = PageBounds::new(D, P).unwrap();
    pages.keep_channel_keys().unwrap();
    pages.push_rows_of(Rows::F32(&keys)).unwrap();
    let mut moments = KeyMoments::new(D);
    for k in keys.chunks(D) {
        moments.push(k).unwrap();
    }
    let q: Vec<f32> = (0..H * D).map(|i| 2.0 * (i as f32 * 0.37).cos()).collect();
    let local: Vec<Vec<f32>> = (0..H)
        .map(|h| {
            (0..LOCAL)
                .map(|i| ((h * LOCAL + i) as f32 * 0.1).sin())
                .collect()
        })
        .collect();
    let mut group = c.benchmark_group("channel_selection_group7_d64_16384");
    let copy = pages.channel_keys().unwrap();
    let mut out = vec![0.0f32; H * T.div_ceil(P)];
    let mut tile = Vec::new();
    for r in [8, 16] {
        let columns: Vec<_> = (0..r).map(|c| copy.column(c).unwrap()).collect();
        let weights: Vec<f32> = (0..H * r).map(|i| 0.125 * (i as f32 * 0.7).sin()).collect();
        group.bench_function(format!("column_page_masses/{r}"), |b| {
            b.iter(|| {
                column_page_masses(black_box(&columns), &weights, T, P, &mut tile, &mut out)
                    .unwrap()
            })
        });
    }
    let rows = Rows::F32(&keys);
    let inputs: Vec<HeadInput<'_>> = (0..H)
        .map(|h| HeadInput {
            layer: 0,
            head: h,
            query: &q[h * D..(h + 1) * D],
            scale: 0.125,
            local_scores: &local[h],
            bulk_len: T,
            bulk_moments: &moments,
            bulk_keys: rows,
            bulk_pages: Some(&pages),
            bulk_clusters: None,
        })
        .collect();
    for r in [8, 16] {
        let crit = Pages::new(Approx::new(0.8).unwrap(), 0.8, P, PageRule::Channels(r)).unwrap();
        let mut sel = PageSelection::new();
        let mut decisions = vec![Decision::LONG; H];
        group.bench_function(format!("choose_pages/{r}"), |b| {
            b.iter(|| {
                decisions.fill(Decision::LONG);
                crit.choose_pages(black_box(&inputs), &mut decisions, &mut sel)
                    .unwrap()
            })
        });
    }
    // as a decoding step finds them: the summaries and the copy out of the caches (a step
    // streams the weights between two layers' choices), 64 MB written before each call
    let mut evict = vec![0u8; 64 << 20];
    let crit = Pages::new(Approx::new(0.8).unwrap(), 0.8, P, PageRule::Channels(16)).unwrap();
    let mut sel = PageSelection::new();
    let mut decisions = vec![Decision::LONG; H];
    group.bench_function("choose_pages/16/cold", |b| {
        b.iter_batched(
            || {
                evict
                    .iter_mut()
                    .step_by(64)
                    .for_each(|x| *x = x.wrapping_add(1));
                black_box(&evict);
            },
            |()| {
                decisions.fill(Decision::LONG);
                crit.choose_pages(black_box(&inputs), &mut decisions, &mut sel)
                    .unwrap()
            },
            criterion::BatchSize::PerIteration,
        )
    });
    group.finish();
}

/// The bulk phase of one Qwen2.5-0.5B layer at 16k through `attend_layer` (2 KV heads of 7
/// query heads, d = 64, f16 rows, 16,384 bulk keys in pages of 32): dense, against fixed
/// selections of the shape the channel rule makes at tau 0.97 (`qada bench` at 16384: a
/// head reads about 0.27 of the pages, its group their union, about 0.6). `union_all_heads`
/// gives every head the union's pages, `per_head` each head its own (about 0.45 of the
/// union's, at least one head a page), `per_head_only` the same number of pages a head with
/// no sharing (union 0.27). The bulk time against the work it does (rows times heads) shows
/// what a selected page costs beyond its multiply-adds.
fn selected_bulk_qwen16k(c: &mut Criterion) {
    use qada_core::{
        attend_layer, Decision, Dense, GroupRead, LayerScratch, PageSelection, Result,
    };
    const T: usize = 16_384;
    const H: usize = 7;
    const KV: usize = 2;
    const P: usize = 32;
    const WINDOW: usize = LOCAL - SINK;

    /// Page `p` for the heads of `masks[g][p]` in group `g`.
    struct Fixed {
        masks: Vec<Vec<u64>>,
    }
    impl LocalityCriterion for Fixed {
        fn decide(&self, _input: &HeadInput<'_>) -> Result<Decision> {
            Ok(Decision::LONG)
        }
        fn choose_pages(
            &self,
            inputs: &[HeadInput<'_>],
            _out: &mut [Decision],
            selection: &mut PageSelection,
        ) -> Result<GroupRead> {
            selection.clear(P);
            let g = inputs[0].head / H;
            for (p, &m) in self.masks[g].iter().enumerate() {
                selection.push(p, m)?;
            }
            Ok(GroupRead::Selected)
        }
    }
    // a small LCG: the same pages on every run
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut uniform = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let n_pages = T / P;
    let all = (1u64 << H) - 1;
    let (mut union_all, mut per_head, mut alone) = (vec![], vec![], vec![]);
    for _ in 0..KV {
        let (mut u, mut h, mut a) = (vec![0; n_pages], vec![0; n_pages], vec![0; n_pages]);
        for p in 0..n_pages {
            if uniform() < 0.6 {
                u[p] = all;
                let mut m = 0u64;
                while m == 0 {
                    m = (0..H)
                        .filter(|_| uniform() < 0.45)
                        .fold(0, |m, j| m | 1 << j);
                }
                h[p] = m;
            }
            a[p] = (0..H)
                .filter(|_| uniform() < 0.27)
                .fold(0, |m, j| m | 1 << j);
        }
        union_all.push(u);
        per_head.push(h);
        alone.push(a);
    }
    let t = SINK + T + WINDOW;
    let kvs: Vec<_> = (0..KV)
        .map(|g| (half_rows(t, D, g as f32), half_rows(t, D, g as f32 + 0.5)))
        .collect();
    let moments = KeyMoments::new(D);
    let kv: Vec<KvSegments<'_>> = kvs
        .iter()
        .map(|(keys, values)| segments(D, (SINK, T), keys, values, &moments))
        .collect();
    let q: Vec<f32> = (0..KV * H * D).map(|i| (i as f32 * 0.3).cos()).collect();
    let mut group = c.benchmark_group("selected_bulk_qwen_16384");
    let mut scratch = LayerScratch::with_capacity(KV, H, D, T);
    let mut out = vec![0.0f32; KV * H * D];
    group.bench_function("dense", |b| {
        b.iter(|| {
            attend_layer(
                &Dense,
                0,
                black_box(&q),
                &kv[..],
                0.125,
                &mut scratch,
                &mut out,
            )
        })
    });
    let mut fixed_union = None;
    for (name, masks) in [
        ("union_all_heads", union_all),
        ("per_head", per_head),
        ("per_head_only", alone),
    ] {
        let rows: u64 = masks.iter().flatten().map(|m| m.count_ones() as u64).sum();
        let pages = masks.iter().flatten().filter(|&&m| m != 0).count();
        eprintln!(
            "{name}: a group reads {:.3} of the pages, a head {:.3}",
            pages as f64 / (KV * n_pages) as f64,
            rows as f64 / (KV * H * n_pages) as f64
        );
        let crit = Fixed { masks };
        group.bench_function(name, |b| {
            b.iter(|| {
                attend_layer(
                    &crit,
                    0,
                    black_box(&q),
                    &kv[..],
                    0.125,
                    &mut scratch,
                    &mut out,
                )
            })
        });
        if name == "union_all_heads" {
            fixed_union = Some(crit);
        }
    }
    // as a decoding step finds the layer: its 8.4 MB of keys and values out of the caches (a
    // step streams the weights between two layers), 64 MB read before each call (read, not
    // written: no dirty lines to write back while the call runs). What
    // the runs of selected pages cost beyond their bytes, and what prefetching within them
    // (`attention::prefetch_rows`) recovers, shows here, not in the warm case, where the
    // layer sits in L3.
    let evict: Vec<u8> = (0..64usize << 20).map(|i| i as u8).collect();
    let cold: [(&str, &dyn LocalityCriterion); 2] = [
        ("dense/cold", &Dense),
        (
            "union_all_heads/cold",
            fixed_union.as_ref().expect("built above"),
        ),
    ];
    for (name, crit) in cold {
        group.bench_function(name, |b| {
            b.iter_batched(
                || {
                    let sum = evict
                        .iter()
                        .step_by(64)
                        .fold(0u8, |a, &x| a.wrapping_add(x));
                    black_box(sum);
                },
                |()| {
                    attend_layer(
                        crit,
                        0,
                        black_box(&q),
                        &kv[..],
                        0.125,
                        &mut scratch,
                        &mut out,
                    )
                },
                criterion::BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    channel_selection_group7,
    per_head,
    gqa_block,
    gqa_group7_q8_vs_f16,
    group_decisions,
    layer_gemma_d256,
    prefill_block,
    selected_bulk_qwen16k
);
criterion_main!(benches);
