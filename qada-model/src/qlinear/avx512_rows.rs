//! AVX-512 VNNI kernels of eight rows at a time against int8 activations, for the 32-value
//! block types (Q4_0, Q4_1, Q5_0, Q8_0): `avx2_rows.rs`'s kernels with the integer sums on
//! 512-bit registers, on the same interleaved groups (`interleave.rs`).
//!
//! Each row's result is the one `avx2_rows.rs` defines (its module doc): the integer product
//! `i_b` of a block is exact whichever instructions sum it, and the float steps after it are
//! the same instructions in the same order (the shared loop `eight_rows!`). So a row's
//! product is the same bits here, through the AVX2 kernels and alone
//! ([`super::avx2_rows::one_row`]).
//!
//! What changes is how `i_b` is summed. `vpdpbusd` multiplies 64 unsigned bytes by 64 signed
//! ones and adds each four products into one of sixteen i32 lanes, in one instruction where
//! AVX2 takes `vpmaddubsw`, `vpmaddwd` and an add on half the width:
//!
//! - nibble types: one 64-byte load holds four rows' 16 quant bytes (a row per 128-bit lane),
//!   masked into low and high nibbles, which meet the activations' first and second 16 values
//!   broadcast to every lane: two `vpdpbusd` for four rows. Q5_0's fifth bits go in by a byte
//!   mask made straight from the rows' `qh` (one masked add), where AVX2 spreads them by a
//!   shuffle and a compare.
//! - Q8_0: the quants are signed, so `|q|` meets the activations with `q`'s sign (a byte mask
//!   and a masked subtract); two rows per register.
//!
//! Then the lanes of the eight rows are summed to one vector of eight by unpacks and adds.
//!
//! Every kernel is `unsafe` and enables AVX2, FMA, F16C and AVX-512 F, BW, VL and VNNI: the
//! caller holds a [`qada_stats::simd::Avx512Vnni`] token and has checked that `a` is int8 and
//! covers the rows.

use std::arch::x86_64::*;

use super::avx2_rows::{
    block_at, blocks_and_acts, eight_rows, f16x8_at, fifth_bits8, lanes, mins8, rows_in_order,
    NibbleBlock, Q8_0_QS_AT,
};
use super::{Q8Acts, QK};
use crate::quant::BlockQ8_0;

/// Sixteen i32 lanes of `a` and `c`, four per 128-bit lane `k`, to one vector `[s_a,0 .. s_a,3
/// s_c,0 .. s_c,3]` where `s_a,k` is the sum of `a`'s lane `k`: the integer sums of eight rows,
/// rows 0-3 in `a` and 4-7 in `c`.
///
/// # Safety
/// The CPU supports AVX-512 F (the caller's token).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn sum_lanes(a: __m512i, c: __m512i) -> __m256i {
    // SAFETY: register operations only; the CPU features are the caller's proof.
    // per 128-bit lane k: [a0 + a2, c0 + c2, a1 + a3, c1 + c3] ...
    let s = _mm512_add_epi32(_mm512_unpacklo_epi32(a, c), _mm512_unpackhi_epi32(a, c));
    // ... then [s_a,k, s_c,k, s_a,k, s_c,k]
    let t = _mm512_add_epi32(s, _mm512_shuffle_epi32::<0b01_00_11_10>(s));
    let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
    _mm512_castsi512_si256(_mm512_permutexvar_epi32(order, t))
}

/// Interleaved block `b` of a group of eight nibble rows: the rows' scales times the
/// activations' (`d_b d_x,b`) and the rows' exact integer products `i_b` as f32, rows in
/// order.
///
/// # Safety
/// The CPU supports the features enabled; `b` is a block of the group and of `a`'s int8
/// values (`blocks_and_acts`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn nibble_block<B: NibbleBlock>(group: &[u8], a: &Q8Acts, b: usize) -> (__m256, __m256) {
    let low = _mm512_set1_epi8(0x0f);
    let p = block_at::<B>(group, b);
    // SAFETY: the caller made `a.q` hold the 32 values of block `b` and `b` a block of the
    // group; the loads read `x[0..32]`, and inside the block the eight scales (16 bytes at 0)
    // and the quants (8 x 16 bytes at `QS_AT`).
    let x = a.q.as_ptr().add(b * QK);
    let xlo = _mm512_broadcast_i32x4(_mm_loadu_si128(x.cast()));
    let xhi = _mm512_broadcast_i32x4(_mm_loadu_si128(x.add(16).cast()));
    let qh = fifth_bits8::<B>(p);
    // rows 4 g .. 4 g + 3, a row per 128-bit lane: the sum of each row's products in its lane
    let quad = |g: usize| {
        let v = _mm512_loadu_si512(p.add(B::QS_AT + 64 * g).cast());
        let mut lo = _mm512_and_si512(v, low);
        let mut hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), low);
        if B::QH_AT.is_some() {
            // byte j of lane k takes bit j (low nibbles) or 16 + j (high) of row 4 g + k's
            let bits = |shift: u32| {
                (0..4).fold(0u64, |m, k| {
                    m | ((((qh[4 * g + k] >> shift) & 0xffff) as u64) << (16 * k))
                })
            };
            let fifth = _mm512_set1_epi8(0x10);
            lo = _mm512_mask_add_epi8(lo, bits(0), lo, fifth);
            hi = _mm512_mask_add_epi8(hi, bits(16), hi, fifth);
        }
        // quants <= 31 and |x| <= 127: no overflow in i32
        _mm512_dpbusd_epi32(
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xlo),
            hi,
            xhi,
        )
    };
    let h = sum_lanes(quad(0), quad(1));
    let h = if B::OFFSET != 0 {
        _mm256_sub_epi32(h, _mm256_set1_epi32(B::OFFSET * a.qsum[b]))
    } else {
        h
    };
    let s = _mm256_mul_ps(f16x8_at(p), _mm256_set1_ps(a.d[b]));
    (s, _mm256_cvtepi32_ps(h))
}

/// A group of eight nibble rows, interleaved, against int8 activations:
/// [`super::avx2_rows::group8_nibbles`]'s bits.
///
/// # Safety
/// The CPU supports the features enabled; `a` is int8 with 32 values per block of the group.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn group8_nibbles<B: NibbleBlock>(group: &[u8], a: &Q8Acts) -> [f32; 8] {
    // SAFETY: the caller's token proves the features; `eight_rows!` checks the group's length
    // and `a`'s buffers (`blocks_and_acts`) before `nibble_block` and `mins8` read block `b`.
    eight_rows!(B, group, a, nibble_block::<B>, |b| mins8::<B>(group, b))
}

/// Interleaved block `b` of a group of eight Q8_0 rows: as [`nibble_block`].
///
/// # Safety
/// As [`nibble_block`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q8_0_block(group: &[u8], a: &Q8Acts, b: usize) -> (__m256, __m256) {
    let p = block_at::<BlockQ8_0>(group, b);
    // SAFETY: the caller made `a.q` hold the 32 values of block `b` and `b` a block of the
    // group; the loads read exactly those, the eight scales and the rows' quants (8 x 32
    // bytes at 16).
    let x = _mm512_broadcast_i64x4(_mm256_loadu_si256(a.q.as_ptr().add(b * QK).cast()));
    // rows 2 q and 2 q + 1 in the two 256-bit halves: each row's sum in its half's lanes
    let pair = |q: usize| {
        let w = _mm512_loadu_si512(p.add(Q8_0_QS_AT + 64 * q).cast());
        // |w| (-128 gives 128, read unsigned) times x with w's sign; |x| <= 127
        let neg = _mm512_movepi8_mask(w);
        let xs = _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x);
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(w), xs)
    };
    let (p0, p1, p2, p3) = (pair(0), pair(1), pair(2), pair(3));
    // per 128-bit lane: two steps of unpacks and adds give [p0 p1 p2 p3], each the sum of
    // the lane's four i32
    let s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(p0, p1), _mm512_unpackhi_epi32(p0, p1));
    let s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(p2, p3), _mm512_unpackhi_epi32(p2, p3));
    let t = _mm512_add_epi32(
        _mm512_unpacklo_epi64(s01, s23),
        _mm512_unpackhi_epi64(s01, s23),
    );
    // lanes 0 and 1 hold the even rows (two halves of their sums), lanes 2 and 3 the odd
    let even = _mm512_shuffle_i32x4::<0b10_00_10_00>(t, t);
    let odd = _mm512_shuffle_i32x4::<0b11_01_11_01>(t, t);
    let h = rows_in_order(_mm512_castsi512_si256(_mm512_add_epi32(even, odd)));
    let s = _mm256_mul_ps(f16x8_at(p), _mm256_set1_ps(a.d[b]));
    (s, _mm256_cvtepi32_ps(h))
}

/// A group of eight Q8_0 rows, interleaved, against int8 activations:
/// [`super::avx2_rows::group8_q8_0`]'s bits.
///
/// # Safety
/// The CPU supports the features enabled; `a` is int8 with 32 values per block of the group.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn group8_q8_0(group: &[u8], a: &Q8Acts) -> [f32; 8] {
    // no minimum: 0, added all the same (as `finish` does)
    // SAFETY: the caller's token proves the features; `eight_rows!` checks the group's length
    // and `a`'s buffers (`blocks_and_acts`) before `q8_0_block` reads block `b`.
    eight_rows!(BlockQ8_0, group, a, q8_0_block, |_b| None)
}
