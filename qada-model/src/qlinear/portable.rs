//! Portable kernels: one row of blocks against the activations, in plain Rust.
//!
//! Int8 activations: integer sums per block, then f32, the same sums as the AVX2 kernels.
//! f32 activations: each block dequantized into a stack buffer and multiplied in f32
//! ([`dot_f32`], generic over the block type). Callers check lengths (`dispatch`); indexing
//! here is bounds-checked anyway.

use super::{Q8Acts, QK};
use crate::quant::{f16_value, BlockQ4_0, BlockQ4_1, BlockQ8_0, Dequantize, GgmlType};

/// Row of any block type against f32 activations `x` (`VALUES` per block).
pub(crate) fn dot_f32<B: Dequantize>(row: &[B], x: &[f32]) -> f32 {
    let mut buf = [0.0f32; 256];
    let buf = &mut buf[..B::VALUES];
    let mut acc = 0.0f32;
    for (blk, xs) in row.iter().zip(x.chunks(B::VALUES)) {
        blk.dequantize(buf);
        acc += qada_core::attention::dot(buf, xs);
    }
    acc
}

/// Row of one-value "blocks" (F16, BF16) against f32 activations, 256 values at a time.
pub(crate) fn dot_scalar_f32(ty: GgmlType, row: &[u8], x: &[f32]) -> f32 {
    let mut buf = [0.0f32; 256];
    let width = ty.block().map_or(2, |(_, bytes)| bytes as usize);
    let mut acc = 0.0f32;
    for (bytes, xs) in row.chunks(256 * width).zip(x.chunks(256)) {
        let ok = crate::quant::dequantize(ty, bytes, &mut buf[..xs.len()]);
        debug_assert!(ok, "{ty} row of {} bytes", row.len());
        acc += qada_core::attention::dot(&buf[..xs.len()], xs);
    }
    acc
}

/// One Q4_1 row against int8 activations.
pub(crate) fn dot_q4_1(row: &[BlockQ4_1], a: &Q8Acts) -> f32 {
    let mut acc = 0.0f32;
    for (b, blk) in row.iter().enumerate() {
        let (d, m) = (f16_value(blk.d), f16_value(blk.m));
        let q = &a.q[b * QK..];
        let mut s = 0i32;
        for j in 0..16 {
            s += (blk.qs[j] & 0x0f) as i32 * q[j] as i32
                + (blk.qs[j] >> 4) as i32 * q[j + 16] as i32;
        }
        acc += d * a.d[b] * s as f32 + m * a.s[b];
    }
    acc
}

/// One Q4_0 row against int8 activations.
pub(crate) fn dot_q4_0(row: &[BlockQ4_0], a: &Q8Acts) -> f32 {
    let mut acc = 0.0f32;
    for (b, blk) in row.iter().enumerate() {
        let d = f16_value(blk.d);
        let q = &a.q[b * QK..];
        let mut s = 0i32;
        for j in 0..16 {
            s += ((blk.qs[j] & 0x0f) as i32 - 8) * q[j] as i32
                + ((blk.qs[j] >> 4) as i32 - 8) * q[j + 16] as i32;
        }
        acc += d * a.d[b] * s as f32;
    }
    acc
}

/// One Q8_0 row against int8 activations.
pub(crate) fn dot_q8_0(row: &[BlockQ8_0], a: &Q8Acts) -> f32 {
    let mut acc = 0.0f32;
    for (b, blk) in row.iter().enumerate() {
        let d = f16_value(blk.d);
        let q = &a.q[b * QK..b * QK + QK];
        let s: i32 = blk
            .qs
            .iter()
            .zip(q)
            .map(|(&w, &x)| w as i32 * x as i32)
            .sum();
        acc += d * a.d[b] * s as f32;
    }
    acc
}
