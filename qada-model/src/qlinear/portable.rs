//! Portable kernels: one row of blocks against the activations, in plain Rust.
//!
//! Int8 activations: integer sums per block, then f32, the same sums as the AVX2 kernels.
//! f32 activations: each block dequantized into a stack buffer and multiplied in f32
//! ([`dot_f32`], generic over the block type). Callers check lengths (`dispatch`); indexing
//! here is bounds-checked anyway.

use super::acts::{BSUM, Q8K, QK_K};
use super::{Q8Acts, QK};
use crate::quant::{
    f16_value, k4_scales_mins, scale_min_k4, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0,
    BlockQ6K, BlockQ8_0, Dequantize, GgmlType,
};

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

/// `sum(w_j q_j)` of one 32-value sub-block: `w` the weight quants (offset already applied),
/// `q` the activations' int8 quants.
fn isum(w: impl Iterator<Item = i32>, q: &[i8]) -> i32 {
    w.zip(q).map(|(w, &x)| w * x as i32).sum()
}

/// One Q5_0 row against int8 activations.
pub(crate) fn dot_q5_0(row: &[BlockQ5_0], a: &Q8Acts) -> f32 {
    let qh_bit = |qh: u32, j: usize| (((qh >> j) & 1) << 4) as i32;
    let mut acc = 0.0f32;
    for (b, blk) in row.iter().enumerate() {
        let qh = u32::from_le_bytes(blk.qh);
        let w = (0..32).map(|j| {
            let nib = if j < 16 {
                blk.qs[j] & 0x0f
            } else {
                blk.qs[j - 16] >> 4
            };
            nib as i32 + qh_bit(qh, j) - 16
        });
        acc += f16_value(blk.d) * a.d[b] * isum(w, &a.q[b * QK..b * QK + QK]) as f32;
    }
    acc
}

/// One Q4_K or Q5_K row against int8 activations: `quant(blk, s, l)` is value `l` of
/// sub-block `s`, `scales` and `d, dmin` the block's.
fn dot_k4<B>(
    row: &[B],
    a: &Q8Acts,
    parts: impl Fn(&B) -> (&[u8; 12], f32, f32),
    quant: impl Fn(&B, usize, usize) -> i32,
) -> f32 {
    let mut acc = 0.0f32;
    for (b, blk) in row.iter().enumerate() {
        let (scales, d, dmin) = parts(blk);
        for s in 0..8 {
            let (sc, m) = scale_min_k4(s, scales);
            let at = 8 * b + s;
            let w = (0..32).map(|l| quant(blk, s, l));
            let q = isum(w, &a.q[at * QK..at * QK + QK]);
            acc += d * sc * a.d[at] * q as f32 - dmin * m * a.sums[at];
        }
    }
    acc
}

/// One Q4_K row against int8 activations.
pub(crate) fn dot_q4_k(row: &[BlockQ4K], a: &Q8Acts) -> f32 {
    dot_k4(row, a, q4_k_parts, q4_k_quant)
}

/// One Q5_K row against int8 activations.
pub(crate) fn dot_q5_k(row: &[BlockQ5K], a: &Q8Acts) -> f32 {
    dot_k4(row, a, q5_k_parts, q5_k_quant)
}

/// The unsigned 6-bit quant `l` of quarter `i` of half `n` of a Q6_K block (value
/// `128 n + 32 i + l` in the kernels' order): low four bits from `ql[64 n + 32 (i % 2) + l]`
/// (low nibble for `i < 2`), high two from bits `2 i, 2 i + 1` of `qh[32 n + l]`.
fn q6_k_quant(blk: &BlockQ6K, n: usize, i: usize, l: usize) -> i32 {
    let byte = blk.ql[64 * n + 32 * (i % 2) + l];
    let low = if i < 2 { byte & 0x0f } else { byte >> 4 };
    let high = (blk.qh[32 * n + l] >> (2 * i)) & 3;
    (low | (high << 4)) as i32
}

/// One Q6_K row against int8 activations (value order as `avx2_int8::dot_q6_k`).
pub(crate) fn dot_q6_k(row: &[BlockQ6K], a: &Q8Acts) -> f32 {
    let mut acc = 0.0f32;
    for (b, blk) in row.iter().enumerate() {
        let d = f16_value(blk.d);
        for n in 0..2 {
            for i in 0..4 {
                let at = 8 * b + 4 * n + i;
                let q = &a.q[at * QK..at * QK + QK];
                let mut s = 0i32;
                for (l, &x) in q.iter().enumerate() {
                    let w = q6_k_quant(blk, n, i, l) - 32;
                    let sc = blk.scales[8 * n + 2 * i + l / 16] as i32;
                    s += sc * w * x as i32;
                }
                acc += d * a.d[at] * s as f32;
            }
        }
    }
    acc
}

/// One Q4_K or Q5_K row against the Q8_K activations `k`: per block `b`,
/// `d d_x sum_s sc_s sum_j q_j q_x,j - dmin d_x sum_s m_s sum_j q_x,j` with the sums over the
/// eight sub-blocks `s` in i32 (the `sum_j q_x,j` of a sub-block two of `k`'s `bsums`);
/// `quant(blk, s, l)` is value `l` of sub-block `s`.
fn dot_k4_q8k<B>(
    row: &[B],
    k: &Q8K,
    parts: impl Fn(&B) -> (&[u8; 12], f32, f32),
    quant: impl Fn(&B, usize, usize) -> i32,
) -> f32 {
    let mut acc = 0.0f32;
    for (b, blk) in row.iter().enumerate() {
        let (scales, d, dmin) = parts(blk);
        let sm = k4_scales_mins(scales);
        let q = &k.q[b * QK_K..(b + 1) * QK_K];
        let bs = &k.bsums[b * QK_K / BSUM..(b + 1) * QK_K / BSUM];
        let (mut sums, mut mins) = (0i32, 0i32);
        for s in 0..8 {
            let w = (0..32).map(|l| quant(blk, s, l));
            sums += sm[s] as i32 * isum(w, &q[QK * s..QK * (s + 1)]);
            mins += sm[8 + s] as i32 * (bs[2 * s] as i32 + bs[2 * s + 1] as i32);
        }
        let dx = k.d[b];
        acc += d * dx * sums as f32 - dmin * dx * mins as f32;
    }
    acc
}

/// The scales, `d` and `dmin` of a Q4_K block, as [`dot_k4`] and [`dot_k4_q8k`] read them.
fn q4_k_parts(blk: &BlockQ4K) -> (&[u8; 12], f32, f32) {
    (&blk.scales, f16_value(blk.d), f16_value(blk.dmin))
}

/// The scales, `d` and `dmin` of a Q5_K block.
fn q5_k_parts(blk: &BlockQ5K) -> (&[u8; 12], f32, f32) {
    (&blk.scales, f16_value(blk.d), f16_value(blk.dmin))
}

/// Value `l` of sub-block `s` of a Q4_K block.
fn q4_k_quant(blk: &BlockQ4K, s: usize, l: usize) -> i32 {
    let byte = blk.qs[32 * (s / 2) + l];
    (if s.is_multiple_of(2) {
        byte & 0x0f
    } else {
        byte >> 4
    }) as i32
}

/// Value `l` of sub-block `s` of a Q5_K block.
fn q5_k_quant(blk: &BlockQ5K, s: usize, l: usize) -> i32 {
    let byte = blk.qs[32 * (s / 2) + l];
    let low = if s.is_multiple_of(2) {
        byte & 0x0f
    } else {
        byte >> 4
    };
    low as i32 + (((blk.qh[l] >> s) & 1) << 4) as i32
}

/// One Q4_K row against the Q8_K activations `k` ([`dot_k4_q8k`]).
pub(crate) fn dot_q4_k_q8k(row: &[BlockQ4K], k: &Q8K) -> f32 {
    dot_k4_q8k(row, k, q4_k_parts, q4_k_quant)
}

/// One Q5_K row against the Q8_K activations `k` ([`dot_k4_q8k`]).
pub(crate) fn dot_q5_k_q8k(row: &[BlockQ5K], k: &Q8K) -> f32 {
    dot_k4_q8k(row, k, q5_k_parts, q5_k_quant)
}

/// One Q6_K row against the Q8_K activations `k`: per block,
/// `d d_x (sum_j sc_t(j) q_j q_x,j - 32 sum_t sc_t sum_(j in t) q_x,j)` over the 16 groups `t`
/// of 16 values, `q_j` the unsigned 6-bit quant (its offset of 32 through `k`'s `bsums`).
pub(crate) fn dot_q6_k_q8k(row: &[BlockQ6K], k: &Q8K) -> f32 {
    let mut acc = 0.0f32;
    for (b, blk) in row.iter().enumerate() {
        let q = &k.q[b * QK_K..(b + 1) * QK_K];
        let bs = &k.bsums[b * QK_K / BSUM..(b + 1) * QK_K / BSUM];
        let mut sums = 0i32;
        for n in 0..2 {
            for i in 0..4 {
                for l in 0..32 {
                    let w = q6_k_quant(blk, n, i, l);
                    let sc = blk.scales[8 * n + 2 * i + l / 16] as i32;
                    sums += sc * w * q[128 * n + 32 * i + l] as i32;
                }
            }
        }
        let offset: i32 = blk
            .scales
            .iter()
            .zip(bs)
            .map(|(&sc, &s)| sc as i32 * s as i32)
            .sum();
        acc += f16_value(blk.d) * k.d[b] * (sums - 32 * offset) as f32;
    }
    acc
}
