//! AVX2 kernels: one row of blocks against the activations.
//!
//! Each is `unsafe` and `#[target_feature(enable = "avx2,fma,f16c")]`: the caller holds a
//! [`qada_stats::simd::Avx2`] token and has checked that the activations cover the row
//! (`dispatch` does both). Blocks come as typed views; loads take their pointer from a field.

use std::arch::x86_64::*;
use std::ptr::addr_of;

use qada_stats::simd::x86::hsum;

use super::QK;
use crate::quant::{
    scale_min_k4, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ6K, BlockQ8_0,
    F16Bytes,
};

/// An f16 scale as f32, by `vmovd` and `vcvtph2ps` written out. From intrinsics LLVM
/// compiles a scalar f16 conversion to `vpinsrw` into whatever register it deems free, often
/// the accumulator: every block's conversion then waited for the previous block's FMA
/// (rows against int8 activations ran at about half their speed).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16(h: F16Bytes) -> f32 {
    let bits = u16::from_le_bytes(h) as u32;
    let v: __m128;
    // SAFETY: two register instructions the CPU runs (F16C is the caller's proof); `vmovd`
    // zero-extends, so the result depends on `bits` only. No memory, stack or flags touched.
    std::arch::asm!(
        "vmovd {v}, {b:e}",
        "vcvtph2ps {v}, {v}",
        b = in(reg) bits,
        v = out(xmm_reg) v,
        options(pure, nomem, nostack, preserves_flags),
    );
    _mm_cvtss_f32(v)
}

/// Q4_1 row against f32 activations: `sum_b d_b sum_j q_j x_j + m_b sum_j x_j`.
///
/// Few cross-lane shuffles (the shuffle port bound the kernel before): the 16 quant bytes
/// are loaded into both halves of a register, each of four variable right shifts
/// (`vpsrlvd`) and a mask leaves one nibble per 32-bit lane, converted to f32 and multiplied
/// by the activations stored in that order (`acts::nibble_order`). `[d, m]` is
/// converted straight from memory.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `x_nib` (the activations in nibble order) holds at
/// least `32 * row.len()` values and `sums` (the block sums of the activations) `row.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q4_1_f32(row: &[BlockQ4_1], x_nib: &[f32], sums: &[f32]) -> f32 {
    let nb = row.len();
    assert!(x_nib.len() >= nb * QK && sums.len() >= nb);
    let mask = _mm256_set1_epi32(0x0f);
    let shifts = [
        _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4),
        _mm256_setr_epi32(8, 8, 8, 8, 12, 12, 12, 12),
        _mm256_setr_epi32(16, 16, 16, 16, 20, 20, 20, 20),
        _mm256_setr_epi32(24, 24, 24, 24, 28, 28, 28, 28),
    ];
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut mins = _mm_setzero_ps();
    // SAFETY: b < nb, so `r.add(b)` is a block of `row` (its 4 scale bytes and 16 quant bytes
    // are read through field addresses, unaligned); the assert above makes `x_nib` hold
    // 32 * nb values, so the four 8-wide loads at 32 b .. 32 b + 32 are in bounds.
    let (r, x) = (row.as_ptr(), x_nib.as_ptr());
    for (b, sum) in sums[..nb].iter().enumerate() {
        let blk = r.add(b);
        // [d, m, 0, 0]: only the 4 scale bytes (`d` and `m` are adjacent, `repr(C)`)
        let dm = _mm_cvtph_ps(_mm_cvtsi32_si128(
            addr_of!((*blk).d).cast::<i32>().read_unaligned(),
        ));
        // lane 1 gathers m * sum(x); the broadcast is a load, not a shuffle
        mins = _mm_fmadd_ps(dm, _mm_broadcast_ss(sum), mins);
        let w = _mm256_broadcastsi128_si256(_mm_loadu_si128(addr_of!((*blk).qs).cast::<__m128i>()));
        let xb = x.add(QK * b);
        let q =
            |k: usize| _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(w, shifts[k]), mask));
        let s0 = _mm256_fmadd_ps(
            q(0),
            _mm256_loadu_ps(xb),
            _mm256_mul_ps(q(1), _mm256_loadu_ps(xb.add(8))),
        );
        let s1 = _mm256_fmadd_ps(
            q(2),
            _mm256_loadu_ps(xb.add(16)),
            _mm256_mul_ps(q(3), _mm256_loadu_ps(xb.add(24))),
        );
        let d = _mm256_broadcastss_ps(dm);
        acc0 = _mm256_fmadd_ps(d, s0, acc0);
        acc1 = _mm256_fmadd_ps(d, s1, acc1);
    }
    hsum(_mm256_add_ps(acc0, acc1)) + _mm_cvtss_f32(_mm_movehdup_ps(mins))
}

/// Q8_0 row against f32 activations.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `x` holds at least `32 * row.len()` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q8_0_f32(row: &[BlockQ8_0], x: &[f32]) -> f32 {
    // SAFETY: the 8-byte quant loads at 8 k < 32 stay in the block's 32 bytes; by the contract
    // `x` holds 32 values per block, so the f32 loads at 32 b + 8 k .. + 8 are in bounds.
    let mut acc = _mm256_setzero_ps();
    for (b, blk) in row.iter().enumerate() {
        let d = f16(blk.d);
        let xp = x.as_ptr().add(b * QK);
        let mut s = _mm256_setzero_ps();
        for k in 0..4 {
            let w = _mm_loadl_epi64(blk.qs.as_ptr().add(8 * k).cast::<__m128i>());
            s = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(w)),
                _mm256_loadu_ps(xp.add(8 * k)),
                s,
            );
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), s, acc);
    }
    hsum(acc)
}

/// Eight bytes at `p`, zero-extended to eight i32 lanes.
///
/// # Safety
/// The CPU supports AVX2; `p .. p + 8` is readable.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn u8x8(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees the 8 bytes; the load is unaligned.
    _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.cast::<__m128i>()))
}

/// `sum_j w_j x_j` added to `acc` for eight i32 quants `w` and the eight f32 at `x`.
///
/// # Safety
/// The CPU supports AVX2 and FMA; `x .. x + 8` is readable.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn fma_q(w: __m256i, x: *const f32, acc: __m256) -> __m256 {
    // SAFETY: the caller guarantees the 8 values; the load is unaligned.
    _mm256_fmadd_ps(_mm256_cvtepi32_ps(w), _mm256_loadu_ps(x), acc)
}

/// Q4_0 row against f32 activations: `sum_b d_b sum_j (q_j - 8) x_j`.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `x` holds at least `32 * row.len()` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q4_0_f32(row: &[BlockQ4_0], x: &[f32]) -> f32 {
    assert!(x.len() >= QK * row.len());
    let (mask, eight) = (_mm256_set1_epi32(0x0f), _mm256_set1_epi32(8));
    let mut acc = _mm256_setzero_ps();
    for (b, blk) in row.iter().enumerate() {
        // SAFETY: the 8-byte loads at 8 k, k < 2, stay in the 16 quant bytes; the assert makes
        // `x` hold 32 values per block, so the loads at 32 b + {0, 8, 16, 24} .. + 8 are in it.
        let s = {
            let xb = x.as_ptr().add(QK * b);
            let mut s = _mm256_setzero_ps();
            for k in 0..2 {
                let q = u8x8(blk.qs.as_ptr().add(8 * k));
                let lo = _mm256_sub_epi32(_mm256_and_si256(q, mask), eight);
                let hi = _mm256_sub_epi32(_mm256_srli_epi32(q, 4), eight);
                s = fma_q(lo, xb.add(8 * k), s);
                s = fma_q(hi, xb.add(16 + 8 * k), s);
            }
            s
        };
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(blk.d)), s, acc);
    }
    hsum(acc)
}

/// Q5_0 row against f32 activations: `sum_b d_b sum_j (q_j - 16) x_j`, the fifth bit of value
/// `j` bit `j` of `qh`.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `x` holds at least `32 * row.len()` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q5_0_f32(row: &[BlockQ5_0], x: &[f32]) -> f32 {
    assert!(x.len() >= QK * row.len());
    let (mask, bit, sixteen) = (
        _mm256_set1_epi32(0x0f),
        _mm256_set1_epi32(0x10),
        _mm256_set1_epi32(16),
    );
    // value j < 16 takes bit j of qh to bit 4 (from qh << 4), value 16 + j bit j + 16
    let lanes = [
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
        _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15),
    ];
    let twelve = _mm256_set1_epi32(12);
    let mut acc = _mm256_setzero_ps();
    for (b, blk) in row.iter().enumerate() {
        let qh = _mm256_set1_epi32(i32::from_le_bytes(blk.qh));
        let qh4 = _mm256_slli_epi32(qh, 4);
        // SAFETY: the 8-byte loads at 8 k, k < 2, stay in the 16 quant bytes; the assert makes
        // `x` hold 32 values per block, so the loads at 32 b + {0, 8, 16, 24} .. + 8 are in it.
        let s = {
            let xb = x.as_ptr().add(QK * b);
            let mut s = _mm256_setzero_ps();
            for (k, &j) in lanes.iter().enumerate() {
                let q = u8x8(blk.qs.as_ptr().add(8 * k));
                let h0 = _mm256_and_si256(_mm256_srlv_epi32(qh4, j), bit);
                let h1 = _mm256_and_si256(_mm256_srlv_epi32(qh, _mm256_add_epi32(j, twelve)), bit);
                let lo = _mm256_or_si256(_mm256_and_si256(q, mask), h0);
                let hi = _mm256_or_si256(_mm256_srli_epi32(q, 4), h1);
                s = fma_q(_mm256_sub_epi32(lo, sixteen), xb.add(8 * k), s);
                s = fma_q(_mm256_sub_epi32(hi, sixteen), xb.add(16 + 8 * k), s);
            }
            s
        };
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(blk.d)), s, acc);
    }
    hsum(acc)
}

/// Q4_K row against f32 activations: over the 8 sub-blocks `s` of 32 values of each block,
/// `d sc_s sum_j q_j x_j - dmin m_s sum_j x_j`; the sums of `x` are the 32-block `sums`.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `x` holds at least `256 * row.len()` values and `sums`
/// (the sums of the activations' 32-blocks) `8 * row.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q4_k_f32(row: &[BlockQ4K], x: &[f32], sums: &[f32]) -> f32 {
    assert!(x.len() >= 256 * row.len() && sums.len() >= 8 * row.len());
    let mask = _mm256_set1_epi32(0x0f);
    // one accumulator per sub-block parity: two dependency chains
    let (mut acc1, mut acc2) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut mins = 0.0f32;
    for (b, blk) in row.iter().enumerate() {
        let d = f16(blk.d);
        let mut m = 0.0f32;
        for g in 0..4 {
            let (sc1, m1) = scale_min_k4(2 * g, &blk.scales);
            let (sc2, m2) = scale_min_k4(2 * g + 1, &blk.scales);
            m += m1 * sums[8 * b + 2 * g] + m2 * sums[8 * b + 2 * g + 1];
            // SAFETY: the 8-byte loads at 32 g + 8 k < 128 stay in the 128 quant bytes; the
            // assert makes `x` hold 256 values per block, so the loads at
            // 256 b + 64 g + {0, 32} + 8 k .. + 8 are in it.
            let (s1, s2) = {
                let xg = x.as_ptr().add(256 * b + 64 * g);
                let (mut s1, mut s2) = (_mm256_setzero_ps(), _mm256_setzero_ps());
                for k in 0..4 {
                    let q = u8x8(blk.qs.as_ptr().add(32 * g + 8 * k));
                    s1 = fma_q(_mm256_and_si256(q, mask), xg.add(8 * k), s1);
                    s2 = fma_q(_mm256_srli_epi32(q, 4), xg.add(32 + 8 * k), s2);
                }
                (s1, s2)
            };
            acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d * sc1), s1, acc1);
            acc2 = _mm256_fmadd_ps(_mm256_set1_ps(d * sc2), s2, acc2);
        }
        mins += f16(blk.dmin) * m;
    }
    hsum(_mm256_add_ps(acc1, acc2)) - mins
}

/// Q5_K row against f32 activations: as [`dot_q4_k_f32`], the fifth bit of value `l` of
/// sub-block `2 g` bit `2 g` of `qh[l]`, of sub-block `2 g + 1` bit `2 g + 1`.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `x` holds at least `256 * row.len()` values and `sums`
/// (the sums of the activations' 32-blocks) `8 * row.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q5_k_f32(row: &[BlockQ5K], x: &[f32], sums: &[f32]) -> f32 {
    assert!(x.len() >= 256 * row.len() && sums.len() >= 8 * row.len());
    let (mask, bit) = (_mm256_set1_epi32(0x0f), _mm256_set1_epi32(0x10));
    // one accumulator per sub-block parity: two dependency chains
    let (mut acc1, mut acc2) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut mins = 0.0f32;
    for (b, blk) in row.iter().enumerate() {
        let d = f16(blk.d);
        let mut m = 0.0f32;
        for g in 0..4 {
            let (sc1, m1) = scale_min_k4(2 * g, &blk.scales);
            let (sc2, m2) = scale_min_k4(2 * g + 1, &blk.scales);
            m += m1 * sums[8 * b + 2 * g] + m2 * sums[8 * b + 2 * g + 1];
            let shift = _mm_cvtsi32_si128(2 * g as i32);
            // SAFETY: the 8-byte loads at 32 g + 8 k < 128 stay in the 128 quant bytes and
            // those at 8 k < 32 in the 32 bytes of `qh`; the assert makes `x` hold 256 values
            // per block, so the loads at 256 b + 64 g + {0, 32} + 8 k .. + 8 are in it.
            let (s1, s2) = {
                let xg = x.as_ptr().add(256 * b + 64 * g);
                let (mut s1, mut s2) = (_mm256_setzero_ps(), _mm256_setzero_ps());
                for k in 0..4 {
                    let q = u8x8(blk.qs.as_ptr().add(32 * g + 8 * k));
                    let h = _mm256_srl_epi32(u8x8(blk.qh.as_ptr().add(8 * k)), shift);
                    let h1 = _mm256_and_si256(_mm256_slli_epi32(h, 4), bit);
                    let h2 = _mm256_and_si256(_mm256_slli_epi32(h, 3), bit);
                    let lo = _mm256_or_si256(_mm256_and_si256(q, mask), h1);
                    let hi = _mm256_or_si256(_mm256_srli_epi32(q, 4), h2);
                    s1 = fma_q(lo, xg.add(8 * k), s1);
                    s2 = fma_q(hi, xg.add(32 + 8 * k), s2);
                }
                (s1, s2)
            };
            acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d * sc1), s1, acc1);
            acc2 = _mm256_fmadd_ps(_mm256_set1_ps(d * sc2), s2, acc2);
        }
        mins += f16(blk.dmin) * m;
    }
    hsum(_mm256_add_ps(acc1, acc2)) - mins
}

/// Q6_K row against f32 activations: `sum_b d_b sum_t sc_t sum_j (q_j - 32) x_j` over the 16
/// groups `t` of 16 values. In each half `n` of 128 values, value `l < 32` takes the low
/// nibble of `ql[l]` and bits 0-1 of `qh[l]`, `32 + l` the low nibble of `ql[32 + l]` and bits
/// 2-3, `64 + l` the high nibble of `ql[l]` and bits 4-5, `96 + l` the high nibble of
/// `ql[32 + l]` and bits 6-7; group `l / 16 + 2 i` of the half scales value `32 i + l`.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `x` holds at least `256 * row.len()` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q6_k_f32(row: &[BlockQ6K], x: &[f32]) -> f32 {
    assert!(x.len() >= 256 * row.len());
    let (m4, m30, off) = (
        _mm256_set1_epi32(0x0f),
        _mm256_set1_epi32(0x30),
        _mm256_set1_epi32(32),
    );
    let mut acc = _mm256_setzero_ps();
    for (b, blk) in row.iter().enumerate() {
        // one accumulator per quarter `i`: four dependency chains
        let mut sb = [_mm256_setzero_ps(); 4];
        for n in 0..2 {
            for half in 0..2 {
                let mut s = [_mm256_setzero_ps(); 4];
                for k in 0..2 {
                    let l = 16 * half + 8 * k;
                    // SAFETY: l + 8 <= 32, so the 8-byte loads at 64 n + l (+ 32) stay in the
                    // 128 bytes of `ql` and those at 32 n + l in the 64 bytes of `qh`; the
                    // assert makes `x` hold 256 values per block, so the loads at
                    // 256 b + 128 n + 32 i + l .. + 8 (i < 4) are in it.
                    {
                        let a = u8x8(blk.ql.as_ptr().add(64 * n + l));
                        let c = u8x8(blk.ql.as_ptr().add(64 * n + 32 + l));
                        let h = u8x8(blk.qh.as_ptr().add(32 * n + l));
                        let q = [
                            _mm256_or_si256(
                                _mm256_and_si256(a, m4),
                                _mm256_and_si256(_mm256_slli_epi32(h, 4), m30),
                            ),
                            _mm256_or_si256(
                                _mm256_and_si256(c, m4),
                                _mm256_and_si256(_mm256_slli_epi32(h, 2), m30),
                            ),
                            _mm256_or_si256(_mm256_srli_epi32(a, 4), _mm256_and_si256(h, m30)),
                            _mm256_or_si256(
                                _mm256_srli_epi32(c, 4),
                                _mm256_and_si256(_mm256_srli_epi32(h, 2), m30),
                            ),
                        ];
                        let xl = x.as_ptr().add(256 * b + 128 * n + l);
                        for i in 0..4 {
                            s[i] = fma_q(_mm256_sub_epi32(q[i], off), xl.add(32 * i), s[i]);
                        }
                    }
                }
                for (i, si) in s.into_iter().enumerate() {
                    let sc = blk.scales[8 * n + half + 2 * i] as f32;
                    sb[i] = _mm256_fmadd_ps(_mm256_set1_ps(sc), si, sb[i]);
                }
            }
        }
        let sb = _mm256_add_ps(_mm256_add_ps(sb[0], sb[1]), _mm256_add_ps(sb[2], sb[3]));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(blk.d)), sb, acc);
    }
    hsum(acc)
}
