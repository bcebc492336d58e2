//! Properties of the quantized row products.
//!
//! (a) Every SIMD kernel set the CPU has (AVX2, and AVX-512 VNNI where detected: on such a
//! host the AVX2 kernels are checked too) agrees with the portable kernels on random blocks
//! with scales over the whole finite f16 range (subnormal to 65504, either sign) and
//! activations spread over 50 binary orders of magnitude: `|simd - portable| <= 1e-5 M`, where
//! `M = sum_i amax(x_block(i)) |t_i|` and `|t_i|` is the sum of the absolute terms value `i`
//! is made of (`|d q_i| + |m|` for Q4_1, `|d sc q_i| + |dmin m|` for Q4_K / Q5_K, `|d sc q_i|`
//! for Q6_K, `|d q_i|` otherwise, `q_i` the signed quant) and bounds every term either kernel
//! adds. Both round in f32 over at most 32 terms per lane and block (a few more roundings for
//! the K-quants' scales) and 12 blocks a row, about `50 * 2^-24 M = 3e-6 M`; a wrong nibble,
//! bit, sign or scale moves the result by a sizeable fraction of `M`.
//!
//! (c) below: int8 activations stay within their rounding of the f32 product.
//!
//! (b) Wrong lengths are an error, never a panic: rows that are not whole blocks or do not
//! match the activations, layers whose data, bias, activations or outputs have another length.

use half::f16;
use proptest::prelude::*;
use qada_model::qlinear::{dot_row, ActPrecision, Kernels, Q8Acts, QLinear};
use qada_model::quant::GgmlType;

/// Finite f16 values over the whole range.
fn scale() -> impl Strategy<Value = f16> {
    any::<u16>()
        .prop_map(f16::from_bits)
        .prop_filter("finite", |h| h.is_finite())
}

/// Where a block of `ty` keeps its f16 scales (byte offsets).
fn scale_offsets(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q6_K => &[208],
        _ => &[0],
    }
}

/// One block of `ty` from random bytes, its f16 scales replaced by random finite ones.
fn block(ty: GgmlType) -> impl Strategy<Value = Vec<u8>> {
    let bytes = ty.block().unwrap().1 as usize;
    (
        prop::collection::vec(scale(), 2),
        prop::collection::vec(any::<u8>(), bytes),
    )
        .prop_map(move |(h, mut b)| {
            for (&at, h) in scale_offsets(ty).iter().zip(h) {
                b[at..at + 2].copy_from_slice(&h.to_le_bytes());
            }
            b
        })
}

/// 1 to 12 blocks of 32 values (1 to 4 of 256) of `ty`, and activations of the same length:
/// values in (-1, 1) scaled by `2^e` per 32-block, `e` in -30..20.
fn row_and_x(ty: GgmlType) -> impl Strategy<Value = (Vec<Vec<u8>>, Vec<f32>)> {
    let per = ty.block().unwrap().0 as usize;
    let most = if per == 32 { 12 } else { 4 };
    (1usize..=most).prop_flat_map(move |nb| {
        (
            prop::collection::vec(block(ty), nb),
            prop::collection::vec(-1.0f32..1.0, nb * per),
            prop::collection::vec(-30i32..20, nb * per / 32),
        )
            .prop_map(|(blocks, u, e)| {
                let x = u
                    .iter()
                    .enumerate()
                    .map(|(i, v)| v * 2f32.powi(e[i / 32]))
                    .collect();
                (blocks, x)
            })
    })
}

/// The 6-bit scale and min of sub-block `j` of a Q4_K / Q5_K block (ggml's
/// `get_scale_min_k4`), written out again here so the test does not read the crate's.
fn k4_scale_min(j: usize, q: &[u8]) -> (f64, f64) {
    let (s, m) = if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    };
    (s as f64, m as f64)
}

/// `|t_i|` for each value `i` of block `b`: the absolute terms its dequantized value is made
/// of (`|d q|` plus `|m|` or `|dmin m_s|`), in ggml's value order.
fn abs_terms(ty: GgmlType, b: &[u8]) -> Vec<f64> {
    let h = |i: usize| f16::from_le_bytes([b[i], b[i + 1]]).to_f64().abs();
    let nib = |qs: &[u8], j: usize| {
        if j < 16 {
            qs[j] & 15
        } else {
            qs[j - 16] >> 4
        }
    };
    match ty {
        GgmlType::Q4_0 => (0..32)
            .map(|j| h(0) * (nib(&b[2..18], j) as f64 - 8.0).abs())
            .collect(),
        GgmlType::Q4_1 => (0..32)
            .map(|j| h(0) * nib(&b[4..20], j) as f64 + h(2))
            .collect(),
        GgmlType::Q5_0 => {
            let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
            (0..32)
                .map(|j| {
                    let q = nib(&b[6..22], j) as u32 | (((qh >> j) & 1) << 4);
                    h(0) * (q as f64 - 16.0).abs()
                })
                .collect()
        }
        GgmlType::Q4_K | GgmlType::Q5_K => {
            let (scales, qh, qs) = if ty == GgmlType::Q4_K {
                (&b[4..16], None, &b[16..144])
            } else {
                (&b[4..16], Some(&b[16..48]), &b[48..176])
            };
            (0..256)
                .map(|i| {
                    let (g, hi, l) = (i / 64, (i / 32) % 2, i % 32);
                    let mut q = if hi == 0 {
                        qs[32 * g + l] & 15
                    } else {
                        qs[32 * g + l] >> 4
                    } as f64;
                    if let Some(qh) = qh {
                        q += 16.0 * ((qh[l] >> (2 * g + hi)) & 1) as f64;
                    }
                    let (sc, m) = k4_scale_min(2 * g + hi, scales);
                    h(0) * sc * q + h(2) * m
                })
                .collect()
        }
        GgmlType::Q6_K => (0..256)
            .map(|i| {
                let (n, r) = (i / 128, i % 128);
                let (quarter, l) = (r / 32, r % 32);
                let ql = b[64 * n + l + 32 * (quarter % 2)];
                let low = if quarter < 2 { ql & 15 } else { ql >> 4 };
                let high = (b[128 + 32 * n + l] >> (2 * quarter)) & 3;
                let q = (low | (high << 4)) as f64 - 32.0;
                let sc = b[192 + 8 * n + l / 16 + 2 * quarter] as i8 as f64;
                h(208) * (sc * q).abs()
            })
            .collect(),
        _ => b[2..34]
            .iter()
            .map(|&q| h(0) * (q as i8 as f64).abs())
            .collect(),
    }
}

/// How the activations enter a row's product: f32, or int8 in the form the dispatch picks
/// (Q8_K, one scale per 256 values, for K-quant rows), or int8 per 32 values only (the
/// kernels K-quant rows took before the Q8_K form, kept for comparison).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    F32,
    Int8,
    Int8Per32,
}

impl Form {
    fn acts(self) -> Q8Acts {
        match self {
            Form::F32 => Q8Acts::new(ActPrecision::F32),
            Form::Int8 => Q8Acts::new(ActPrecision::Int8),
            Form::Int8Per32 => Q8Acts::new(ActPrecision::Int8).without_q8k(),
        }
    }

    /// Values per activation scale for rows of `ty`: 256 for K-quant rows against Q8_K,
    /// else 32 (f32 activations: the 32-blocks the tolerance has always used).
    fn block(self, ty: GgmlType) -> usize {
        let k_quant = matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K);
        if self == Form::Int8 && k_quant {
            256
        } else {
            32
        }
    }
}

/// `M`: the sum over the row of `|t_i|` times the largest `|x|` of the block of `per` values
/// that holds value `i` (the activations' quantization block: `|d_x q_x,i| <= amax` there, so
/// `M` bounds every term either kernel adds).
fn magnitude(ty: GgmlType, blocks: &[Vec<u8>], x: &[f32], per: usize) -> f64 {
    let amax: Vec<f64> = x
        .chunks(per)
        .map(|xs| xs.iter().fold(0.0f64, |a, &v| a.max(v.abs() as f64)))
        .collect();
    blocks
        .iter()
        .flat_map(|b| abs_terms(ty, b))
        .enumerate()
        .map(|(i, t)| t * amax[i / per])
        .sum()
}

/// The portable kernels and every SIMD kernel set this CPU has.
fn all_kernels() -> Vec<Kernels> {
    let mut ks = vec![Kernels::Portable];
    ks.extend(Kernels::every_simd());
    ks
}

/// Whether this CPU has kernels other than the portable ones to compare with them. Where it
/// has not (or `QADA_PORTABLE` is set), an agreement test would compare the portable kernel
/// with itself and pass whatever it computes: it says "skipped" once and checks nothing.
fn simd_kernels_here(test: &str) -> bool {
    static SAID: std::sync::Once = std::sync::Once::new();
    let here = !Kernels::every_simd().is_empty();
    if !here {
        // written to the process's stderr, not through the harness's capture, so that the
        // skip shows in the test output of a passing run
        SAID.call_once(|| {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "skipped: {test} and the other SIMD-against-portable agreement tests (no AVX2, \
                 FMA and F16C here, or QADA_PORTABLE set)"
            );
        });
    }
    here
}

/// Each SIMD kernel set's product of one row agrees with the portable one within `1e-5 M`.
fn check_agreement(ty: GgmlType, form: Form, blocks: &[Vec<u8>], x: &[f32]) {
    let row = blocks.concat();
    let mut a = form.acts();
    a.quantize(x);
    let portable = dot_row(ty, &row, &a, Kernels::Portable).unwrap();
    let tol = 1e-5 * magnitude(ty, blocks, x, form.block(ty));
    for k in Kernels::every_simd() {
        let fast = dot_row(ty, &row, &a, k).unwrap();
        let diff = (fast as f64 - portable as f64).abs();
        assert!(
            diff <= tol,
            "{ty} {form:?}: {k:?} {fast} vs portable {portable}, |diff| {diff} > {tol}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn q4_1_f32_kernels_agree((blocks, x) in row_and_x(GgmlType::Q4_1)) {
        if !simd_kernels_here("q4_1_f32_kernels_agree") {
            return Ok(());
        }
        check_agreement(GgmlType::Q4_1, Form::F32, &blocks, &x);
    }

    #[test]
    fn q8_0_f32_kernels_agree((blocks, x) in row_and_x(GgmlType::Q8_0)) {
        if !simd_kernels_here("q8_0_f32_kernels_agree") {
            return Ok(());
        }
        check_agreement(GgmlType::Q8_0, Form::F32, &blocks, &x);
    }

    #[test]
    fn q4_0_f32_kernels_agree((blocks, x) in row_and_x(GgmlType::Q4_0)) {
        if !simd_kernels_here("q4_0_f32_kernels_agree") {
            return Ok(());
        }
        check_agreement(GgmlType::Q4_0, Form::F32, &blocks, &x);
    }

    #[test]
    fn q5_0_f32_kernels_agree((blocks, x) in row_and_x(GgmlType::Q5_0)) {
        if !simd_kernels_here("q5_0_f32_kernels_agree") {
            return Ok(());
        }
        check_agreement(GgmlType::Q5_0, Form::F32, &blocks, &x);
    }

    #[test]
    fn q4_k_f32_kernels_agree((blocks, x) in row_and_x(GgmlType::Q4_K)) {
        if !simd_kernels_here("q4_k_f32_kernels_agree") {
            return Ok(());
        }
        check_agreement(GgmlType::Q4_K, Form::F32, &blocks, &x);
    }

    #[test]
    fn q5_k_f32_kernels_agree((blocks, x) in row_and_x(GgmlType::Q5_K)) {
        if !simd_kernels_here("q5_k_f32_kernels_agree") {
            return Ok(());
        }
        check_agreement(GgmlType::Q5_K, Form::F32, &blocks, &x);
    }

    #[test]
    fn q6_k_f32_kernels_agree((blocks, x) in row_and_x(GgmlType::Q6_K)) {
        if !simd_kernels_here("q6_k_f32_kernels_agree") {
            return Ok(());
        }
        check_agreement(GgmlType::Q6_K, Form::F32, &blocks, &x);
    }

    #[test]
    fn int8_kernels_agree(
        (ty, (blocks, x)) in int8_types().prop_flat_map(|ty| (Just(ty), row_and_x(ty)))
    ) {
        if !simd_kernels_here("int8_kernels_agree") {
            return Ok(());
        }
        check_agreement(ty, Form::Int8, &blocks, &x);
        check_agreement(ty, Form::Int8Per32, &blocks, &x);
    }

    /// (c) Int8 activations move the product by at most their rounding: `|x - d_x q_x| <=
    /// d_x / 2 = amax / 254` per value (`amax` over the activations' quantization block: 32
    /// values, 256 for K-quant rows against Q8_K), so `|int8 - f32| <= M / 254` plus the f32
    /// roundings (`2e-5 M`). A wrong quant, bit, scale or activation block breaks it.
    #[test]
    fn int8_activations_move_a_row_by_at_most_their_rounding(
        (ty, (blocks, x)) in int8_types().prop_flat_map(|ty| (Just(ty), row_and_x(ty))),
        per32 in any::<bool>(),
    ) {
        let form = if per32 { Form::Int8Per32 } else { Form::Int8 };
        let row = blocks.concat();
        let (mut f, mut i) = (Q8Acts::new(ActPrecision::F32), form.acts());
        f.quantize(&x);
        i.quantize(&x);
        let exact = dot_row(ty, &row, &f, Kernels::Portable).unwrap() as f64;
        let m = magnitude(ty, &blocks, &x, form.block(ty));
        let bound = m / 254.0 + 2e-5 * m;
        for kernels in all_kernels() {
            let int8 = dot_row(ty, &row, &i, kernels).unwrap() as f64;
            prop_assert!(
                (int8 - exact).abs() <= bound,
                "{} {:?} {:?}: int8 {} vs f32 {}, |diff| {} > {}", ty, form, kernels, int8,
                exact, (int8 - exact).abs(), bound
            );
        }
    }



}

/// f16 scales at the extremes (zero, +-65504, the smallest subnormal, the largest
/// subnormal, the smallest normal) or any finite one.
fn extreme_scale() -> impl Strategy<Value = f16> {
    prop_oneof![
        Just(f16::ZERO),
        Just(f16::MAX),
        Just(f16::MIN),
        Just(f16::from_bits(0x0001)),
        Just(f16::from_bits(0x83ff)),
        Just(f16::MIN_POSITIVE),
        scale(),
    ]
}

/// One K-quant block: random bytes, all zero or all ones (every quant, scale and min at its
/// largest; Q6_K's scales -1), its f16 scales from [`extreme_scale`].
fn k_block(ty: GgmlType) -> impl Strategy<Value = Vec<u8>> {
    let bytes = ty.block().unwrap().1 as usize;
    (
        prop::collection::vec(extreme_scale(), 2),
        prop_oneof![
            prop::collection::vec(any::<u8>(), bytes),
            Just(vec![0u8; bytes]),
            Just(vec![0xffu8; bytes]),
        ],
    )
        .prop_map(move |(h, mut b)| {
            for (&at, h) in scale_offsets(ty).iter().zip(h) {
                b[at..at + 2].copy_from_slice(&h.to_le_bytes());
            }
            b
        })
}

/// 1 to 4 K-quant blocks of `ty` and activations for them: per 256-block all zero, or values
/// in (-1, 1) (a quarter of them zero) times `2^e`, `e` in -30..20, with one outlier up to
/// `1e4` times larger.
fn k_row_and_x(ty: GgmlType) -> impl Strategy<Value = (Vec<Vec<u8>>, Vec<f32>)> {
    let act_block = (
        prop::collection::vec(prop_oneof![3 => -1.0f32..1.0, 1 => Just(0.0f32)], 256),
        -30i32..20,
        (0usize..256, -1e4f32..1e4),
        0u8..8,
    )
        .prop_map(|(mut v, e, (at, outlier), kind)| {
            if kind == 0 {
                return vec![0.0; 256];
            }
            v[at] = outlier;
            v.iter().map(|x| x * 2f32.powi(e)).collect::<Vec<f32>>()
        });
    (1usize..=4).prop_flat_map(move |nb| {
        (
            prop::collection::vec(k_block(ty), nb),
            prop::collection::vec(act_block.clone(), nb).prop_map(|v| v.concat()),
        )
    })
}

fn k_types() -> impl Strategy<Value = GgmlType> {
    prop::sample::select(&[GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K][..])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// (a) for the Q8_K kernels at the extremes: every SIMD kernel set (AVX2, AVX-512 VNNI
    /// where detected) and portable share their integer sums, so they differ by the f32
    /// roundings of the last products only, `<= 1e-5 M` (`M` over the 256-blocks of the
    /// activations).
    #[test]
    fn q8k_kernels_agree_at_extreme_scales(
        (ty, (blocks, x)) in k_types().prop_flat_map(|ty| (Just(ty), k_row_and_x(ty)))
    ) {
        if !simd_kernels_here("q8k_kernels_agree_at_extreme_scales") {
            return Ok(());
        }
        check_agreement(ty, Form::Int8, &blocks, &x);
    }

    /// (d) Against the dequantize-then-f32 product `sum_i w_i x_i` (in f64): Q8_K moves each
    /// value by at most half its block's step, `|x_i - d_x q_x,i| <= d_x / 2`, so
    /// `|int8 - exact| <= sum_i |w_i| d_x(i) / 2`, plus the f32 roundings of both (`2e-5 M`).
    #[test]
    fn q8k_products_stay_within_half_a_step_per_value_of_the_dequantized_product(
        (ty, (blocks, x)) in k_types().prop_flat_map(|ty| (Just(ty), k_row_and_x(ty))),
    ) {
        let row = blocks.concat();
        let mut w = vec![0.0f32; x.len()];
        prop_assert!(qada_model::quant::dequantize(ty, &row, &mut w));
        let exact: f64 = w.iter().zip(&x).map(|(&w, &x)| w as f64 * x as f64).sum();
        let mut a = Form::Int8.acts();
        a.quantize(&x);
        let step: Vec<f64> = x
            .chunks(256)
            .map(|xs| xs.iter().fold(0.0f64, |m, &v| m.max(v.abs() as f64)) / 127.0)
            .collect();
        let rounding: f64 = w
            .iter()
            .enumerate()
            .map(|(i, &w)| (w as f64).abs() * step[i / 256] / 2.0)
            .sum();
        let bound = rounding + 2e-5 * magnitude(ty, &blocks, &x, 256);
        for kernels in all_kernels() {
            let int8 = dot_row(ty, &row, &a, kernels).unwrap() as f64;
            prop_assert!(
                (int8 - exact).abs() <= bound,
                "{} {:?}: int8 {} vs dequantized {}, |diff| {} > {}", ty, kernels, int8, exact,
                (int8 - exact).abs(), bound
            );
        }
    }
}

/// The types with int8 kernels.
fn int8_types() -> impl Strategy<Value = GgmlType> {
    prop::sample::select(
        &[
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q5_0,
            GgmlType::Q8_0,
            GgmlType::Q4_K,
            GgmlType::Q5_K,
            GgmlType::Q6_K,
        ][..],
    )
}

const TYPES: [GgmlType; 14] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q8_1,
    GgmlType::Q2_K,
    GgmlType::Unknown(99),
];

fn ty() -> impl Strategy<Value = GgmlType> {
    prop::sample::select(&TYPES[..])
}

fn precision() -> impl Strategy<Value = ActPrecision> {
    prop::sample::select(&[ActPrecision::F32, ActPrecision::Int8][..])
}

/// A length by `choice`: the right one `n`, one more, one less, or `other`.
fn pick(choice: usize, n: usize, other: usize) -> usize {
    match choice {
        0 => n,
        1 => n + 1,
        2 => n.saturating_sub(1),
        _ => other,
    }
}

/// Lengths near the right one: exact, off by a little, or anything up to 600.
fn near(n: usize) -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(n),
        (0usize..3).prop_map(move |d| n.saturating_sub(d)),
        (1usize..40).prop_map(move |d| n + d),
        0usize..600,
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_row_of_the_wrong_length_is_an_error(
        ty in ty(),
        precision in precision(),
        blocks in 0usize..4,
        (row_delta, acts_choice, other) in (0usize..3, 0usize..4, 0usize..1100),
        detected in any::<bool>(),
    ) {
        let kernels = if detected { Kernels::detect() } else { Kernels::Portable };
        let (per, bytes) = ty.block().map_or((1, 1), |(p, b)| (p as usize, b as usize));
        let acts = pick(acts_choice, blocks * per, other);
        let row = vec![0u8; blocks * bytes + row_delta];
        let x: Vec<f32> = (0..acts).map(|i| i as f32).collect();
        let mut a = Q8Acts::new(precision);
        a.quantize(&x);
        let fits = ty.can_dequantize() && acts.is_multiple_of(per) && acts / per * bytes == row.len();
        let got = dot_row(ty, &row, &a, kernels);
        prop_assert_eq!(got.is_ok(), fits, "{} row of {} bytes, {} acts: {:?}", ty, row.len(), acts, got);
        if let Err(e) = got {
            prop_assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn a_layer_refuses_every_length_that_does_not_fit(
        ty in ty(),
        precision in precision(),
        rows in 1usize..6,
        blocks in 1usize..3,
        (data_delta, bias_len, y_len) in (0usize..3, 0usize..8, 0usize..12),
        (acts_choice, other) in (0usize..4, 0usize..1100),
        with_bias in any::<bool>(),
    ) {
        let (per, bytes) = ty.block().map_or((1, 1), |(p, b)| (p as usize, b as usize));
        let cols = blocks * per;
        let acts_len = pick(acts_choice, cols, other);
        let data = vec![0u8; rows * blocks * bytes + data_delta];
        let bias = with_bias.then(|| vec![0.5f32; bias_len]);
        let layer = QLinear::from_blocks(rows, cols, ty, data, bias);
        let fits = ty.can_dequantize() && data_delta == 0 && (!with_bias || bias_len == rows);
        prop_assert_eq!(layer.is_ok(), fits, "{:?}", layer.as_ref().err());
        let Ok(layer) = layer else { return Ok(()) };
        let x = vec![0.25f32; acts_len];
        let mut a = Q8Acts::new(precision);
        a.quantize(&x);
        let mut y = vec![0.0f32; y_len];
        let got = layer.matvec(&a, &mut y);
        prop_assert_eq!(got.is_ok(), acts_len == cols && y_len == rows, "{:?}", got);
        // prefill's product: at least n rows in and out
        let n = 2;
        let got = layer.matmul_rows(&x, n, &mut y);
        prop_assert_eq!(got.is_ok(), acts_len >= n * cols && y_len >= n * rows, "{:?}", got);
        let mut out = vec![0.0f32; acts_len.min(cols + 1)];
        let got = layer.row_f32(y_len, &mut out);
        prop_assert_eq!(got.is_ok(), y_len < rows && out.len() == cols, "{:?}", got);
    }

    #[test]
    fn f32_weights_of_the_wrong_length_are_an_error(
        rows in 0usize..5, cols in 0usize..5, len in near(12),
    ) {
        let got = QLinear::from_f32(rows, cols, vec![1.0; len], None);
        prop_assert_eq!(got.is_ok(), len == rows * cols);
    }
}

/// Up to three layers of `cols` columns with random rows of `ty` blocks (and maybe biases),
/// as the query, key and value products of one layer come.
fn stacked_layers(
    ty: GgmlType,
    cols_blocks: usize,
) -> impl Strategy<Value = (Vec<QLinear>, Vec<f32>)> {
    let (per, _) = ty.block().map(|(p, b)| (p as usize, b as usize)).unwrap();
    let cols = cols_blocks * per;
    let layer = (0usize..40, any::<bool>()).prop_flat_map(move |(rows, with_bias)| {
        (
            prop::collection::vec(block(ty), rows * cols_blocks),
            prop::collection::vec(-2.0f32..2.0, if with_bias { rows } else { 0 }),
        )
            .prop_map(move |(blocks, bias)| {
                let data = blocks.concat();
                let bias = with_bias.then_some(bias);
                QLinear::from_blocks(rows, cols, ty, data, bias).unwrap()
            })
    });
    (
        prop::collection::vec(layer, 1..4),
        prop::collection::vec(-4.0f32..4.0, cols),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// One parallel loop over several matrices gives each matrix's own product, bit for bit,
    /// in its place: whatever the rows (0 included), chunk boundaries inside a matrix or
    /// across two, biases or none.
    #[test]
    fn stacked_products_are_the_separate_products_one_after_another(
        (layers, x) in prop::sample::select(&[GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0][..])
            .prop_flat_map(|ty| stacked_layers(ty, 2)),
        precision in precision(),
    ) {
        let mut a = Q8Acts::new(precision);
        a.quantize(&x);
        let mut want = Vec::new();
        for w in &layers {
            let mut y = vec![0.0f32; w.rows()];
            w.matvec(&a, &mut y).unwrap();
            want.extend(y);
        }
        let ws: Vec<&QLinear> = layers.iter().collect();
        let mut got = vec![f32::NAN; want.len()];
        QLinear::matvec_stacked(&ws, &a, &mut got).unwrap();
        prop_assert_eq!(
            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        // one value short or over is an error, as is a matrix of other columns
        let mut short = vec![0.0f32; want.len() + 1];
        prop_assert!(QLinear::matvec_stacked(&ws, &a, &mut short).is_err());
        let mut b = Q8Acts::new(precision);
        b.quantize(&x[..x.len() - 32]);
        prop_assert!(QLinear::matvec_stacked(&ws, &b, &mut got).is_err());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Decoding multiplies rows eight at a time where the kernels can (AVX2, int8 activations,
    /// the 32-value types): every row of a layer's product is the bits `dot_row` gives that row
    /// alone, whatever rows share its kernel call, its place among the groups of eight (the
    /// last `rows % 8` rows go alone) and the block count (odd or even: two FMA chains). A
    /// lane mixed up with another, a block dropped or a group misplaced changes the bits.
    #[test]
    fn each_row_of_a_layer_is_the_row_alone(
        ty in prop::sample::select(
            &[GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q8_0][..]),
        rows in 1usize..30,
        (blocks, x) in (1usize..=6).prop_flat_map(|nb| (
            Just(nb),
            prop::collection::vec(-1.0f32..1.0, nb * 32),
        )).prop_flat_map(|(nb, x)| (
            prop::collection::vec(any::<u64>(), 29 * nb),
            Just(x),
        )),
    ) {
        let nb = x.len() / 32;
        // blocks from the seeds: random bytes, a finite f16 scale (and minimum)
        let bytes = ty.block().unwrap().1 as usize;
        let data: Vec<u8> = blocks[..rows * nb]
            .iter()
            .flat_map(|&seed| {
                let mut s = seed | 1;
                let mut b: Vec<u8> = (0..bytes)
                    .map(|_| {
                        s ^= s << 13;
                        s ^= s >> 7;
                        s ^= s << 17;
                        s as u8
                    })
                    .collect();
                for &at in scale_offsets(ty) {
                    let h = f16::from_f32(((s % 2000) as f32 - 1000.0) / 997.0);
                    b[at..at + 2].copy_from_slice(&h.to_le_bytes());
                    s /= 2000;
                }
                b
            })
            .collect();
        let row_bytes = data.len() / rows;
        let layer = QLinear::from_blocks(rows, 32 * nb, ty, data.clone(), None).unwrap();
        let mut a = Q8Acts::new(ActPrecision::Int8);
        a.quantize(&x);
        let mut y = vec![f32::NAN; rows];
        layer.matvec(&a, &mut y).unwrap();
        // (where the portable kernels run, both sides are them: the AVX2 agreement tests
        // above compare those with the portable ones)
        for (r, got) in y.iter().enumerate() {
            let row = &data[r * row_bytes..(r + 1) * row_bytes];
            let alone = dot_row(ty, row, &a, Kernels::detect()).unwrap();
            prop_assert_eq!(got.to_bits(), alone.to_bits(), "{} row {} of {}", ty, r, rows);
        }
    }
}
