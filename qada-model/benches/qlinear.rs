//! The quantized products of decoding: one row (576 columns, SmolLM2's hidden size) and one
//! whole matrix-vector product (the 1536 x 576 up projection), Q4_1 and Q8_0 weights, with
//! f32 activations (the default) and int8 activations.
//!
//! `cargo bench -p qada-model --bench qlinear`

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use qada_model::qlinear::{dot_row, ActPrecision, Kernels, Q8Acts, QLinear};
use qada_model::quant::GgmlType;

const COLS: usize = 576;
const ROWS: usize = 1536;

/// `rows` rows of pseudo-random blocks of type `ty` (valid f16 scales).
fn blocks(ty: GgmlType, rows: usize) -> Vec<u8> {
    let (per, bytes) = ty.block().unwrap();
    let (per, bytes) = (per as usize, bytes as usize);
    let mut out = Vec::with_capacity(rows * COLS / per * bytes);
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..rows * COLS / per {
        let start = out.len();
        for _ in 0..bytes {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            out.push(s as u8);
        }
        let scales = if ty == GgmlType::Q4_1 { 2 } else { 1 };
        for k in 0..scales {
            let h = half::f16::from_f32(0.01 + 0.001 * k as f32).to_le_bytes();
            out[start + 2 * k..start + 2 * k + 2].copy_from_slice(&h);
        }
    }
    out
}

fn products(c: &mut Criterion) {
    let x: Vec<f32> = (0..COLS).map(|i| (i as f32 * 0.37).sin()).collect();
    let mut group = c.benchmark_group("qlinear");
    for ty in [GgmlType::Q4_1, GgmlType::Q8_0] {
        let data = blocks(ty, ROWS);
        let row_bytes = data.len() / ROWS;
        let layer = QLinear::from_blocks(ROWS, COLS, ty, data.clone(), None).unwrap();
        for precision in [ActPrecision::F32, ActPrecision::Int8] {
            let mut a = Q8Acts::new(precision);
            a.quantize(&x);
            let name = format!("{ty:?}_{precision:?}");
            group.bench_function(format!("row_{name}"), |b| {
                b.iter(|| dot_row(ty, black_box(&data[..row_bytes]), &a, Kernels::detect()))
            });
            let mut y = vec![0.0f32; ROWS];
            group.bench_function(format!("matvec_1536x576_{name}"), |b| {
                b.iter(|| layer.matvec(black_box(&a), &mut y))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, products);
criterion_main!(benches);
