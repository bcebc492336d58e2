//! Properties of the attention kernels and of the adaptive layer step.

mod common;

use common::{heads_of, scores_f64, Head};
use proptest::prelude::*;
use qada_core::attention::{dense_attention, local_attention};
use qada_core::{
    attend_layer, Accounting, Approx, Decision, DecisionCost, Dense, LayerScratch, Oracle, Window,
};

fn close(a: &[f32], b: &[f32], tol: f32) -> Result<(), TestCaseError> {
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        prop_assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "index {i}: {x} vs {y}"
        );
    }
    Ok(())
}

/// softmax(s) V in f64 over every position: the reference.
fn brute_force(h: &Head, q: &[f32], scale: f32, only_local: bool) -> Vec<f32> {
    let s = scores_f64(q, &h.keys, scale);
    let keep: Vec<usize> = (0..h.t())
        .filter(|&i| !only_local || h.is_local_pos(i))
        .collect();
    let m = keep.iter().map(|&i| s[i]).fold(f64::NEG_INFINITY, f64::max);
    let mut out = vec![0.0f64; h.d];
    let mut z = 0.0;
    for &i in &keep {
        let w = (s[i] - m).exp();
        z += w;
        for (o, &v) in out.iter_mut().zip(&h.values[i * h.d..(i + 1) * h.d]) {
            *o += w * v as f64;
        }
    }
    out.iter().map(|o| (o / z) as f32).collect()
}

/// A layer: `n_kv` KV heads of `t` tokens each, `group` query heads per KV head (up to 5: a
/// tile of 3 heads and a remainder of 1 or 2 in the block kernels).
fn layer_strategy() -> impl Strategy<Value = (Vec<Head>, Vec<f32>, usize)> {
    (
        // small row lengths take the portable kernels, multiples of 8 the AVX2 block kernels
        prop_oneof![1usize..5, Just(8usize), Just(32usize)],
        1usize..3,
        1usize..6,
        0usize..4,
        1usize..8,
        1usize..60,
    )
        .prop_flat_map(|(d, n_kv, group, sink, extra, t)| {
            (
                prop::collection::vec(
                    prop::collection::vec(-2.0f32..2.0, 2 * t * d..=2 * t * d),
                    n_kv..=n_kv,
                ),
                prop::collection::vec(-2.0f32..2.0, n_kv * group * d..=n_kv * group * d),
            )
                .prop_map(move |(kvs, q)| (heads_of(kvs, d, sink, sink + extra), q, group))
        })
}

proptest! {
    #[test]
    fn dense_attention_equals_brute_force((heads, q, _) in layer_strategy()) {
        let h = &heads[0];
        let q = &q[..h.d];
        let mut out = vec![0.0; h.d];
        dense_attention(q, &h.segments(), 0.7, &mut Vec::new(), &mut out);
        close(&out, &brute_force(h, q, 0.7, false), 1e-5)?;
        local_attention(q, &h.segments(), 0.7, &mut Vec::new(), &mut out);
        close(&out, &brute_force(h, q, 0.7, true), 1e-5)?;
    }

    #[test]
    fn local_attention_equals_dense_when_t_fits_the_window(
        d in 1usize..5, sink in 0usize..4, extra in 1usize..30, frac in 0.0f64..1.0,
        seed in prop::collection::vec(-2.0f32..2.0, 300),
    ) {
        let local = sink + extra;
        let t = 1 + ((local - 1) as f64 * frac) as usize; // 1 <= t <= local
        let keys: Vec<f32> = (0..t * d).map(|i| seed[i % 300] + (i / 300) as f32 * 0.01).collect();
        let values: Vec<f32> = keys.iter().rev().copied().collect();
        let h = Head::new(d, sink, local, keys, values);
        let q = &seed[..d];
        let (mut a, mut b) = (vec![0.0; d], vec![0.0; d]);
        dense_attention(q, &h.segments(), 1.0, &mut Vec::new(), &mut a);
        local_attention(q, &h.segments(), 1.0, &mut Vec::new(), &mut b);
        prop_assert_eq!(a, b);
    }

    #[test]
    fn adaptive_output_equals_dense_when_every_head_is_long_and_local_when_every_head_is_local(
        (heads, q, group) in layer_strategy(),
    ) {
        let d = heads[0].d;
        let n_heads = heads.len() * group;
        let kv: Vec<_> = heads.iter().map(|h| h.segments()).collect();
        let mut scratch = LayerScratch::new();
        let mut out = vec![0.0; n_heads * d];
        let scale = 1.0 / (d as f32).sqrt();

        attend_layer(&Dense, 0, &q, &kv, scale, &mut scratch, &mut out).unwrap();
        for h in 0..n_heads {
            let head = &heads[h / group];
            let mut expect = vec![0.0; d];
            dense_attention(&q[h * d..(h + 1) * d], &head.segments(), scale, &mut Vec::new(), &mut expect);
            close(&out[h * d..(h + 1) * d], &expect, 1e-6)?;
        }

        attend_layer(&Window, 0, &q, &kv, scale, &mut scratch, &mut out).unwrap();
        prop_assert!(scratch.decisions().iter().all(|d| d.local));
        for h in 0..n_heads {
            let head = &heads[h / group];
            let mut expect = vec![0.0; d];
            local_attention(&q[h * d..(h + 1) * d], &head.segments(), scale, &mut Vec::new(), &mut expect);
            close(&out[h * d..(h + 1) * d], &expect, 1e-6)?;
        }
    }

    /// With a real criterion each head's output is the dense or the local output, as decided.
    #[test]
    fn adaptive_output_follows_each_decision((heads, q, group) in layer_strategy(), tau in 0.05f64..0.95) {
        let d = heads[0].d;
        let n_heads = heads.len() * group;
        let kv: Vec<_> = heads.iter().map(|h| h.segments()).collect();
        let mut out = vec![0.0; n_heads * d];
        for crit in [&Oracle::new(tau).unwrap() as &dyn qada_core::LocalityCriterion, &Approx::new(tau).unwrap()] {
            let mut scratch = LayerScratch::new();
            attend_layer(crit, 3, &q, &kv, 1.0, &mut scratch, &mut out).unwrap();
            let decisions = scratch.decisions();
            for h in 0..n_heads {
                let head = &heads[h / group];
                let expect = brute_force(head, &q[h * d..(h + 1) * d], 1.0, decisions[h].local);
                close(&out[h * d..(h + 1) * d], &expect, 1e-4)?;
            }
        }
    }
}

#[test]
fn scores_of_ten_thousand_give_finite_outputs() {
    let d = 4;
    let values: Vec<f32> = (0..300 * d).map(|i| (i % 7) as f32).collect();
    let (q, h) = common::extreme_head(Some(values));
    let mut out = vec![0.0; d];
    dense_attention(&q, &h.segments(), 1.0, &mut Vec::new(), &mut out);
    assert!(out.iter().all(|o| o.is_finite()), "{out:?}");
    local_attention(&q, &h.segments(), 1.0, &mut Vec::new(), &mut out);
    assert!(out.iter().all(|o| o.is_finite()), "{out:?}");
}

#[test]
fn mismatched_layer_shapes_are_errors() {
    let h = Head::new(4, 2, 8, vec![0.5; 40 * 4], vec![0.5; 40 * 4]);
    let kv = [h.segments()];
    let mut out = vec![0.0; 8];
    let mut s = LayerScratch::new();
    assert!(attend_layer(&Dense, 0, &[0.0; 7], &kv, 1.0, &mut s, &mut out,).is_err());
    assert!(attend_layer(&Dense, 0, &[0.0; 8], &kv, 1.0, &mut s, &mut [0.0; 4],).is_err());
    assert!(attend_layer(&Dense, 0, &[0.0; 8], &[], 1.0, &mut s, &mut out,).is_err());
}

#[test]
fn accounting_counts_sparsity_flops_and_bytes() {
    let mut acc = Accounting::new(2, 4);
    let l = Decision::LOCAL;
    let g = Decision::LONG;
    // layer 0: group 0 all local, group 1 one long head. T = 1000, |I| = 100, d = 10.
    acc.record_layer(
        0,
        &[l, l, l, g],
        1000,
        100,
        10,
        2,
        4.0,
        DecisionCost::default(),
    );
    assert_eq!(acc.layer_sparsity(0), 0.75);
    assert_eq!(acc.head(0, 3).decisions, 1);
    assert_eq!(acc.dense_flops, 4.0 * 4.0 * 1000.0 * 10.0);
    assert_eq!(acc.flops, 3.0 * 4.0 * 100.0 * 10.0 + 4.0 * 1000.0 * 10.0);
    // group 0 reads its window only, group 1 everything
    assert_eq!(acc.dense_kv_bytes, 2.0 * 1000.0 * 2.0 * 10.0 * 4.0);
    assert_eq!(acc.kv_bytes, (100.0 + 1000.0) * 2.0 * 10.0 * 4.0);
    // a step without a bulk counts cost but no decision
    acc.record_layer(
        1,
        &[l, l, l, l],
        50,
        50,
        10,
        2,
        4.0,
        DecisionCost::default(),
    );
    assert_eq!(acc.total().decisions, 4);
    assert_eq!(acc.sparsity(), 0.75);
    // a criterion's own reads (page bounds) count per KV head, only where there is a bulk
    let before = acc.kv_bytes;
    let cost = DecisionCost {
        flops: 0,
        bytes: 640,
    };
    acc.record_layer(0, &[l, l, l, l], 1000, 100, 10, 2, 4.0, cost);
    assert_eq!(
        acc.kv_bytes - before,
        2.0 * (100.0 * 2.0 * 10.0 * 4.0 + 640.0)
    );
    let before = acc.kv_bytes;
    acc.record_layer(1, &[l, l, l, l], 50, 50, 10, 2, 4.0, cost);
    assert_eq!(acc.kv_bytes - before, 2.0 * 50.0 * 2.0 * 10.0 * 4.0);
}

/// A bulk of several chunks, so that partial states from parallel tasks are merged.
#[test]
fn adaptive_output_equals_dense_across_many_bulk_chunks() {
    let (d, group, t) = (16, 3, 2300);
    let heads: Vec<Head> = (0..2)
        .map(|g| {
            let k: Vec<f32> = (0..t * d)
                .map(|i| ((i * 7 + g * 13) as f32 * 0.0137).sin() * 2.0)
                .collect();
            let v: Vec<f32> = (0..t * d)
                .map(|i| ((i * 3 + g) as f32 * 0.021).cos())
                .collect();
            Head::new(d, 4, 64, k, v)
        })
        .collect();
    let q: Vec<f32> = (0..2 * group * d)
        .map(|i| (i as f32 * 0.31).sin())
        .collect();
    let kv: Vec<_> = heads.iter().map(|h| h.segments()).collect();
    let mut out = vec![0.0; 2 * group * d];
    attend_layer(&Dense, 0, &q, &kv, 0.25, &mut LayerScratch::new(), &mut out).unwrap();
    for h in 0..2 * group {
        let expect = brute_force(&heads[h / group], &q[h * d..(h + 1) * d], 0.25, false);
        for (a, b) in out[h * d..(h + 1) * d].iter().zip(&expect) {
            assert!((a - b).abs() < 1e-4, "head {h}: {a} vs {b}");
        }
    }
}

/// An f16 cache: the kernels read half-precision rows; outputs equal f64 attention over the
/// same rounded keys and values.
#[test]
fn f16_rows_give_the_attention_of_the_rounded_keys_and_values() {
    use qada_stats::{f16, Rows};
    let (d, group, t) = (16, 3, 1500);
    let keys: Vec<f32> = (0..t * d)
        .map(|i| (i as f32 * 0.0137).sin() * 2.0)
        .collect();
    let values: Vec<f32> = (0..t * d).map(|i| (i as f32 * 0.021).cos()).collect();
    let round = |v: &[f32]| -> Vec<f32> { v.iter().map(|&x| f16::from_f32(x).to_f32()).collect() };
    let reference = Head::new(d, 4, 64, round(&keys), round(&values));
    let k16: Vec<f16> = keys.iter().map(|&x| f16::from_f32(x)).collect();
    let v16: Vec<f16> = values.iter().map(|&x| f16::from_f32(x)).collect();
    let f32_view = reference.segments();
    let (b0, b1) = (4, t - 60);
    let seg = qada_core::KvSegments {
        dim: d,
        sink_keys: Rows::F16(&k16[..b0 * d]),
        sink_values: Rows::F16(&v16[..b0 * d]),
        bulk_keys: Rows::F16(&k16[b0 * d..b1 * d]),
        bulk_values: Rows::F16(&v16[b0 * d..b1 * d]),
        window_keys: Rows::F16(&k16[b1 * d..]),
        window_values: Rows::F16(&v16[b1 * d..]),
        bulk_moments: f32_view.bulk_moments,
        bulk_pages: None,
        bulk_clusters: None,
    };
    let q: Vec<f32> = (0..group * d).map(|i| (i as f32 * 0.37).sin()).collect();
    let mut out = vec![0.0; group * d];
    attend_layer(
        &Dense,
        0,
        &q,
        &[seg],
        0.25,
        &mut LayerScratch::new(),
        &mut out,
    )
    .unwrap();
    for h in 0..group {
        let expect = brute_force(&reference, &q[h * d..(h + 1) * d], 0.25, false);
        for (a, b) in out[h * d..(h + 1) * d].iter().zip(&expect) {
            assert!((a - b).abs() < 1e-4, "head {h}: {a} vs {b}");
        }
    }
    attend_layer(
        &Window,
        0,
        &q,
        &[seg],
        0.25,
        &mut LayerScratch::new(),
        &mut out,
    )
    .unwrap();
    for h in 0..group {
        let expect = brute_force(&reference, &q[h * d..(h + 1) * d], 0.25, true);
        for (a, b) in out[h * d..(h + 1) * d].iter().zip(&expect) {
            assert!((a - b).abs() < 1e-4, "local head {h}: {a} vs {b}");
        }
    }
}

/// A q8 cache: every kernel (the reference dense and local attention, the adaptive step's
/// local scores and its block kernels over the bulk) reads q8_0 blocks in place; outputs equal
/// f64 attention over the dequantized keys and values (`d q`, exact in f32). Rows of one block
/// carry an outlier, so scales differ between blocks.
#[test]
fn q8_rows_give_the_attention_of_the_dequantized_keys_and_values() {
    use qada_core::attention::dense_attention;
    use qada_stats::{Q8Block, Rows};
    let (d, group, t) = (64, 3, 1500);
    let keys: Vec<f32> = (0..t * d)
        .map(|i| (i as f32 * 0.0137).sin() * if i % 96 == 7 { 40.0 } else { 2.0 })
        .collect();
    let values: Vec<f32> = (0..t * d).map(|i| (i as f32 * 0.021).cos()).collect();
    let quantize = |v: &[f32]| -> Vec<Q8Block> {
        let mut b = Vec::new();
        Q8Block::quantize_into(v, &mut b);
        b
    };
    let (k8, v8) = (quantize(&keys), quantize(&values));
    let dequantize = |b: &[Q8Block]| -> Vec<f32> {
        let mut x = vec![0.0f32; b.len() * 32];
        Q8Block::dequantize_into(b, &mut x);
        x
    };
    let reference = Head::new(d, 4, 64, dequantize(&k8), dequantize(&v8));
    let f32_view = reference.segments();
    let (b0, b1) = (4 * d / 32, (t - 60) * d / 32);
    let seg = qada_core::KvSegments {
        dim: d,
        sink_keys: Rows::Q8(&k8[..b0]),
        sink_values: Rows::Q8(&v8[..b0]),
        bulk_keys: Rows::Q8(&k8[b0..b1]),
        bulk_values: Rows::Q8(&v8[b0..b1]),
        window_keys: Rows::Q8(&k8[b1..]),
        window_values: Rows::Q8(&v8[b1..]),
        bulk_moments: f32_view.bulk_moments,
        bulk_pages: None,
        bulk_clusters: None,
    };
    seg.validate().unwrap();
    let q: Vec<f32> = (0..group * d).map(|i| (i as f32 * 0.37).sin()).collect();
    let mut out = vec![0.0; group * d];
    for (local, criterion) in [
        (false, &Dense as &dyn qada_core::LocalityCriterion),
        (true, &Window),
    ] {
        attend_layer(
            criterion,
            0,
            &q,
            &[seg],
            0.25,
            &mut LayerScratch::new(),
            &mut out,
        )
        .unwrap();
        for h in 0..group {
            let expect = brute_force(&reference, &q[h * d..(h + 1) * d], 0.25, local);
            for (a, b) in out[h * d..(h + 1) * d].iter().zip(&expect) {
                assert!((a - b).abs() < 1e-4, "local {local} head {h}: {a} vs {b}");
            }
        }
    }
    let mut one = vec![0.0; d];
    dense_attention(&q[..d], &seg, 0.25, &mut Vec::new(), &mut one);
    let expect = brute_force(&reference, &q[..d], 0.25, false);
    for (a, b) in one.iter().zip(&expect) {
        assert!((a - b).abs() < 1e-4, "dense_attention: {a} vs {b}");
    }
}

/// f64 reference of the block kernels over f32 rows.
fn block_reference(
    q: &[f32],
    rows: &[f32],
    w: &[f32],
    d: usize,
    scale: f32,
) -> (Vec<f64>, Vec<f64>) {
    let (h, n) = (q.len() / d, rows.len() / d);
    let mut s = vec![0.0f64; h * n];
    let mut acc = vec![0.0f64; h * d];
    for j in 0..h {
        for i in 0..n {
            let r = &rows[i * d..(i + 1) * d];
            s[j * n + i] = scale as f64
                * (0..d)
                    .map(|k| q[j * d + k] as f64 * r[k] as f64)
                    .sum::<f64>();
            for k in 0..d {
                acc[j * d + k] += w[j * n + i] as f64 * r[k] as f64;
            }
        }
    }
    (s, acc)
}

proptest! {
    /// The GQA block kernels (each row read once for every head; AVX2 where the CPU has it)
    /// equal per-head products, for f32 and f16 rows and dimensions on and off the SIMD width.
    #[test]
    fn block_kernels_equal_per_head_products(
        d in prop_oneof![Just(8usize), Just(13), Just(64), Just(72), Just(128)],
        h in 1usize..10,
        n in 1usize..150,
        seed in any::<u64>(),
    ) {
        use qada_core::attention::Elem;
        use qada_stats::f16;
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut v = |len: usize| -> Vec<f32> { (0..len).map(|_| rng.gen_range(-2.0f32..2.0)).collect() };
        // rows exactly representable in f16, so both element types see the same numbers
        let rows: Vec<f32> = v(n * d).iter().map(|&x| f16::from_f32(x).to_f32()).collect();
        let (q, w) = (v(h * d), v(h * n));
        let scale = 0.125;
        let (s_ref, acc_ref) = block_reference(&q, &rows, &w, d, scale);
        let rows16: Vec<f16> = rows.iter().map(|&x| f16::from_f32(x)).collect();
        let mut s = [vec![0.0f32; h * n], vec![0.0f32; h * n]];
        f32::block_scores(&q, &rows, d, scale, &mut s[0]).unwrap();
        f16::block_scores(&q, &rows16, d, scale, &mut s[1]).unwrap();
        let mut acc = [vec![0.5f32; h * d], vec![0.5f32; h * d]];
        f32::block_accumulate(&mut acc[0], &w, &rows, d).unwrap();
        f16::block_accumulate(&mut acc[1], &w, &rows16, d).unwrap();
        let tol = 1e-5 * (d as f64) * 4.0;
        for k in 0..2 {
            for (a, b) in s[k].iter().zip(&s_ref) {
                prop_assert!((*a as f64 - b).abs() <= tol * scale as f64, "scores {a} vs {b}");
            }
            for (a, b) in acc[k].iter().zip(&acc_ref) {
                prop_assert!((*a as f64 - 0.5 - b).abs() <= tol * n as f64, "acc {a} vs {b}");
            }
        }
    }
}
