//! Properties of the quantized row products.
//!
//! (a) The AVX2 kernels and the portable ones agree on random blocks with scales over the
//! whole finite f16 range (subnormal to 65504, either sign) and activations spread over 50
//! binary orders of magnitude: `|avx2 - portable| <= 1e-5 M`, where
//! `M = sum_blocks amax(x_block) sum_j (|d q_j| + |m|)` bounds every term either kernel adds
//! (`q_j` the signed quant, `m` the Q4_1 minimum). Both round in f32 over at most 32 terms per
//! block and 12 blocks a row, about `44 * 2^-24 M = 2.6e-6 M`; a wrong nibble, sign or scale
//! moves the result by a sizeable fraction of `M`.
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

/// One block of `ty` (Q4_0, Q4_1 or Q8_0) from random quant bytes and scales.
fn block(ty: GgmlType) -> impl Strategy<Value = Vec<u8>> {
    let quants = match ty {
        GgmlType::Q8_0 => 32,
        _ => 16,
    };
    (scale(), scale(), prop::collection::vec(any::<u8>(), quants)).prop_map(move |(d, m, qs)| {
        let mut b = d.to_le_bytes().to_vec();
        if ty == GgmlType::Q4_1 {
            b.extend_from_slice(&m.to_le_bytes());
        }
        b.extend(qs);
        b
    })
}

/// 1 to 12 blocks of `ty`, and activations of the same length: values in (-1, 1) scaled by
/// `2^e` per 32-block, `e` in -30..20.
fn row_and_x(ty: GgmlType) -> impl Strategy<Value = (Vec<Vec<u8>>, Vec<f32>)> {
    (1usize..=12).prop_flat_map(move |nb| {
        (
            prop::collection::vec(block(ty), nb),
            prop::collection::vec(-1.0f32..1.0, nb * 32),
            prop::collection::vec(-30i32..20, nb),
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

/// `M`: the sum over blocks of `amax(x_block) sum_j (|d q_j| + |m|)`.
fn magnitude(ty: GgmlType, blocks: &[Vec<u8>], x: &[f32]) -> f64 {
    let h = |b: &[u8], i: usize| f16::from_le_bytes([b[i], b[i + 1]]).to_f64().abs();
    let mut total = 0.0;
    for (b, xs) in blocks.iter().zip(x.chunks(32)) {
        let amax = xs.iter().fold(0.0f64, |a, &v| a.max(v.abs() as f64));
        let sum_q: f64 = match ty {
            GgmlType::Q4_0 => b[2..18]
                .iter()
                .map(|&q| ((q & 15) as f64 - 8.0).abs() + ((q >> 4) as f64 - 8.0).abs())
                .sum(),
            GgmlType::Q4_1 => b[4..20]
                .iter()
                .map(|&q| (q & 15) as f64 + (q >> 4) as f64)
                .sum(),
            _ => b[2..34].iter().map(|&q| (q as i8 as f64).abs()).sum(),
        };
        let m = if ty == GgmlType::Q4_1 { h(b, 2) } else { 0.0 };
        total += amax * (h(b, 0) * sum_q + 32.0 * m);
    }
    total
}

/// The AVX2 and portable results of one row, and the tolerance `1e-5 M`.
fn both(ty: GgmlType, precision: ActPrecision, blocks: &[Vec<u8>], x: &[f32]) -> (f32, f32, f64) {
    let row = blocks.concat();
    let mut a = Q8Acts::new(precision);
    a.quantize(x);
    let fast = dot_row(ty, &row, &a, Kernels::detect()).unwrap();
    let portable = dot_row(ty, &row, &a, Kernels::Portable).unwrap();
    (fast, portable, 1e-5 * magnitude(ty, blocks, x))
}

fn check_agreement(ty: GgmlType, precision: ActPrecision, blocks: &[Vec<u8>], x: &[f32]) {
    if Kernels::detect() == Kernels::Portable {
        eprintln!("no AVX2 kernels here (or QADA_PORTABLE set): nothing to compare");
    }
    let (fast, portable, tol) = both(ty, precision, blocks, x);
    let diff = (fast as f64 - portable as f64).abs();
    assert!(
        diff <= tol,
        "{ty} {precision:?}: AVX2 {fast} vs portable {portable}, |diff| {diff} > {tol}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn q4_1_f32_kernels_agree((blocks, x) in row_and_x(GgmlType::Q4_1)) {
        check_agreement(GgmlType::Q4_1, ActPrecision::F32, &blocks, &x);
    }

    #[test]
    fn q8_0_f32_kernels_agree((blocks, x) in row_and_x(GgmlType::Q8_0)) {
        check_agreement(GgmlType::Q8_0, ActPrecision::F32, &blocks, &x);
    }

    #[test]
    fn q4_1_int8_kernels_agree((blocks, x) in row_and_x(GgmlType::Q4_1)) {
        check_agreement(GgmlType::Q4_1, ActPrecision::Int8, &blocks, &x);
    }

    #[test]
    fn q4_0_int8_kernels_agree((blocks, x) in row_and_x(GgmlType::Q4_0)) {
        check_agreement(GgmlType::Q4_0, ActPrecision::Int8, &blocks, &x);
    }

    #[test]
    fn q8_0_int8_kernels_agree((blocks, x) in row_and_x(GgmlType::Q8_0)) {
        check_agreement(GgmlType::Q8_0, ActPrecision::Int8, &blocks, &x);
    }
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
        let fits = ty.can_dequantize() && acts % per == 0 && acts / per * bytes == row.len();
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
