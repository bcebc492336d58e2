//! AVX2 kernels: one row of blocks against the activations.
//!
//! Each is `unsafe` and `#[target_feature(enable = "avx2,fma,f16c")]`: the caller holds a
//! [`qada_stats::simd::Avx2`] token and has checked that the activations cover the row
//! (`dispatch` does both). Blocks come as typed views; loads take their pointer from a field.

use std::arch::x86_64::*;
use std::ptr::addr_of;

use qada_stats::simd::x86::hsum;

use super::{Q8Acts, QK};
use crate::quant::{BlockQ4_0, BlockQ4_1, BlockQ8_0, F16Bytes};

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16(h: F16Bytes) -> f32 {
    // SAFETY: register operations only; the CPU features are the caller's proof.
    let bits = u16::from_le_bytes(h);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_set1_epi16(bits as i16)))
}

/// 16 bytes of nibbles -> 32 unsigned bytes: low nibbles then high nibbles.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibbles(qs: &[u8; 16]) -> __m256i {
    // SAFETY: the 16-byte load reads exactly the array.
    let raw = _mm_loadu_si128(qs.as_ptr().cast::<__m128i>());
    let mask = _mm_set1_epi8(0x0f);
    let lo = _mm_and_si128(raw, mask);
    let hi = _mm_and_si128(_mm_srli_epi16(raw, 4), mask);
    _mm256_set_m128i(hi, lo)
}

/// Sum of u8 x i8 products of 32 pairs, as 8 f32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_u8_i8(w: __m256i, x: __m256i) -> __m256 {
    // SAFETY: register operations only; the CPU features are the caller's proof.
    let p16 = _mm256_maddubs_epi16(w, x);
    _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)))
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

/// Q4_1 row against int8 activations.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `a` holds int8 activations for at least
/// `32 * row.len()` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q4_1(row: &[BlockQ4_1], a: &Q8Acts) -> f32 {
    // SAFETY: by the contract `a.q` holds 32 int8 values per block: the 32-byte load at
    // 32 b is in bounds (the block's own bytes are read through its typed fields).
    let mut acc = _mm256_setzero_ps();
    let mut mins = 0.0f32;
    for (b, blk) in row.iter().enumerate() {
        let (d, m) = (f16(blk.d), f16(blk.m));
        let w = nibbles(&blk.qs);
        let x = _mm256_loadu_si256(a.q.as_ptr().add(b * QK).cast::<__m256i>());
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d[b]), dot_u8_i8(w, x), acc);
        mins += m * a.s[b];
    }
    hsum(acc) + mins
}

/// Q4_0 row against int8 activations.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `a` holds int8 activations for at least
/// `32 * row.len()` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q4_0(row: &[BlockQ4_0], a: &Q8Acts) -> f32 {
    // SAFETY: by the contract `a.q` holds 32 int8 values per block: the 32-byte load at
    // 32 b is in bounds (the block's own bytes are read through its typed fields).
    let mut acc = _mm256_setzero_ps();
    let eight = _mm256_set1_epi8(8);
    for (b, blk) in row.iter().enumerate() {
        let d = f16(blk.d);
        let w = _mm256_sub_epi8(nibbles(&blk.qs), eight);
        let x = _mm256_loadu_si256(a.q.as_ptr().add(b * QK).cast::<__m256i>());
        let p = dot_u8_i8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d[b]), p, acc);
    }
    hsum(acc)
}

/// Q8_0 row against int8 activations.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `a` holds int8 activations for at least
/// `32 * row.len()` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q8_0(row: &[BlockQ8_0], a: &Q8Acts) -> f32 {
    // SAFETY: by the contract `a.q` holds 32 int8 values per block: the 32-byte load at
    // 32 b is in bounds (the block's own bytes are read through its typed fields).
    let mut acc = _mm256_setzero_ps();
    for (b, blk) in row.iter().enumerate() {
        let d = f16(blk.d);
        let w = _mm256_loadu_si256(blk.qs.as_ptr().cast::<__m256i>());
        let x = _mm256_loadu_si256(a.q.as_ptr().add(b * QK).cast::<__m256i>());
        let p = dot_u8_i8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d[b]), p, acc);
    }
    hsum(acc)
}
