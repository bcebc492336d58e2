//! The quantized products of decoding: one row and one whole matrix-vector product.
//! Every type with kernels, with f32 activations (the default) and int8 activations: the
//! 32-value types at SmolLM2's shapes (576 columns, the 1536 x 576 up projection), Q4_K, Q5_K
//! and Q6_K (256-value blocks) at Qwen2.5-0.5B's down projection (4864 columns, 896 x 4864),
//! their int8 products both against Q8_K activations (`Int8`, one scale per 256 values) and
//! per 32 values (`Int8Per32`, the kernels before Q8_K). Then prefill's products of 128
//! tokens: f32 tiles through gemm (`matmul_rows`) beside the int8 tiles (`matmul_rows_int8`)
//! at Qwen2.5-0.5B's shapes (Q5_0 896 x 896, Q8_0 128 x 896, Q4_K and Q6_K 896 x 4864).
//!
//! `cargo bench -p qada-model --bench qlinear`

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use qada_model::qlinear::{dot_row, ActPrecision, Kernels, Q8Acts, QLinear};
use qada_model::quant::GgmlType;

/// `(rows, cols)` of the benchmarked matrix for blocks of `ty`.
fn shape(ty: GgmlType) -> (usize, usize) {
    match ty {
        GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => (896, 4864),
        _ => (1536, 576),
    }
}

/// Byte offsets of the f16 scales in a block of `ty`.
fn scale_offsets(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q6_K => &[208],
        _ => &[0],
    }
}

/// `rows` rows of `cols` pseudo-random values in blocks of type `ty` (finite f16 scales).
fn blocks(ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let (per, bytes) = ty.block().unwrap();
    let (per, bytes) = (per as usize, bytes as usize);
    let mut out = Vec::with_capacity(rows * cols / per * bytes);
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..rows * cols / per {
        let start = out.len();
        for _ in 0..bytes {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            out.push(s as u8);
        }
        for (k, &at) in scale_offsets(ty).iter().enumerate() {
            let h = half::f16::from_f32(0.01 + 0.001 * k as f32).to_le_bytes();
            out[start + at..start + at + 2].copy_from_slice(&h);
        }
    }
    out
}

fn products(c: &mut Criterion) {
    let mut group = c.benchmark_group("qlinear");
    let both = &[ActPrecision::F32, ActPrecision::Int8][..];
    let cases = [
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ]
    .map(|ty| (ty, both));
    for (ty, precisions) in cases {
        let (rows, cols) = shape(ty);
        let x: Vec<f32> = (0..cols).map(|i| (i as f32 * 0.37).sin()).collect();
        let data = blocks(ty, rows, cols);
        let row_bytes = data.len() / rows;
        let layer = QLinear::from_blocks(rows, cols, ty, data.clone(), None).unwrap();
        let k_quant = matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K);
        // K-quants against int8 activations: Q8_K (one scale per 256 values, the default)
        // beside the kernels per 32 values it replaced, in the same run
        let forms = precisions
            .iter()
            .map(|&p| (p, false))
            .chain(k_quant.then_some((ActPrecision::Int8, true)));
        for (precision, per32) in forms {
            let mut a = Q8Acts::new(precision);
            if per32 {
                a = a.without_q8k();
            }
            a.quantize(&x);
            let name = if per32 {
                format!("{ty:?}_Int8Per32")
            } else {
                format!("{ty:?}_{precision:?}")
            };
            group.bench_function(format!("row_{name}"), |b| {
                b.iter(|| dot_row(ty, black_box(&data[..row_bytes]), &a, Kernels::detect()))
            });
            let mut y = vec![0.0f32; rows];
            group.bench_function(format!("matvec_{rows}x{cols}_{name}"), |b| {
                b.iter(|| layer.matvec(black_box(&a), &mut y))
            });
        }
    }
    group.finish();
}

fn prefill(c: &mut Criterion) {
    let mut group = c.benchmark_group("prefill_tiles");
    group.sample_size(20);
    let n = 128;
    for (ty, rows, cols) in [
        (GgmlType::Q5_0, 896, 896),
        (GgmlType::Q8_0, 128, 896),
        (GgmlType::Q4_K, 896, 4864),
        (GgmlType::Q6_K, 896, 4864),
    ] {
        let x: Vec<f32> = (0..n * cols).map(|i| (i as f32 * 0.37).sin()).collect();
        let layer = QLinear::from_blocks(rows, cols, ty, blocks(ty, rows, cols), None).unwrap();
        let mut y = vec![0.0f32; n * rows];
        group.bench_function(format!("{n}x{rows}x{cols}_{ty:?}_f32_tiles"), |b| {
            b.iter(|| layer.matmul_rows(black_box(&x), n, &mut y))
        });
        group.bench_function(format!("{n}x{rows}x{cols}_{ty:?}_int8_tiles"), |b| {
            b.iter(|| {
                let xq = QLinear::prepare_int8(black_box(&x), n, cols).unwrap();
                layer.matmul_rows_int8(&x, &xq, n, &mut y)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, products, prefill);
criterion_main!(benches);
