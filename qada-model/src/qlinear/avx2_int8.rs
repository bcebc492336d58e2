//! AVX2 kernels of the K-quants (Q4_K, Q5_K, Q6_K) against int8 activations
//! ([`super::ActPrecision::Int8`]), one row at a time (the 32-value types are in
//! `avx2_rows.rs`, eight rows at a time): unsigned (or sign-moved) weight quants times the
//! activations' int8 quants by `vpmaddubsw` / `vpmaddwd` into eight i32 lanes, converted once
//! and scaled by the weight's and the activations' block scales. The integer sums are exact;
//! only the activations' 8-bit rounding differs from the f32 kernels of `avx2.rs`.
//!
//! Weight blocks of 256 values meet eight activation blocks of 32: each
//! sub-block of 32 weights lines up with one activation block, so every product is
//! `d_w sc_s d_x sum(q_w q_x)` over one sub-block (16-value groups of Q6_K take their scale
//! inside the integer sum, `vpmaddwd` by the scales). Minimums (Q4_K, Q5_K) multiply the
//! sums of the activations, exact f32 for the K-quants.
//!
//! With the activations' Q8_K form (one scale per 256 values, [`Q8K`]), the K-quant kernels
//! `*_q8k` keep a whole block in the integer domain instead: the sub-block scales multiply
//! the `vpmaddubsw` pair sums by `vpmaddwd` (16-bit scales unpacked once per block), the mins
//! meet the activations' 16-value sums by one `vpmaddwd`, and one FMA per 256 values applies
//! `d_w d_x` (llama.cpp's `ggml_vec_dot_q*_K_q8_K` scheme). Every i16 and i32 step states its
//! bound; none saturates. Only fixed shifts and in-lane shuffles: no per-element variable
//! shift, no gather (both slow on Zen 1).
//!
//! Every kernel is `unsafe` and `#[target_feature(enable = "avx2,fma,f16c")]`: the caller holds
//! a [`qada_stats::simd::Avx2`] token and has checked that `a` covers the row (`dispatch`).

use std::arch::x86_64::*;

use qada_stats::simd::x86::hsum;

use super::acts::{BSUM, Q8K, QK_K};
use super::avx2::f16;
use super::{Q8Acts, QK};
use crate::quant::k4_scales_mins;
use crate::quant::{scale_min_k4, BlockQ4K, BlockQ5K, BlockQ6K, F16Bytes};

/// `sum(w_j x_j)` of 32 unsigned weights (below 64) and 32 int8 activations, as 8 i32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_u8_i8_i32(w: __m256i, x: __m256i) -> __m256i {
    // SAFETY: register operations only; the CPU features are the caller's proof.
    // w < 64 and |x| <= 127: a pair sums to at most 16002, inside i16 (no saturation)
    _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1))
}

/// The parts of a Q4_K or Q5_K block the shared kernels [`dot_k4`] and [`dot_k4_q8k`] read.
struct K4Parts<'b> {
    d: F16Bytes,
    dmin: F16Bytes,
    scales: &'b [u8; 12],
    qs: &'b [u8; 128],
}

impl K4Parts<'_> {
    fn q4_k(blk: &BlockQ4K) -> K4Parts<'_> {
        K4Parts {
            d: blk.d,
            dmin: blk.dmin,
            scales: &blk.scales,
            qs: &blk.qs,
        }
    }
    fn q5_k(blk: &BlockQ5K) -> K4Parts<'_> {
        K4Parts {
            d: blk.d,
            dmin: blk.dmin,
            scales: &blk.scales,
            qs: &blk.qs,
        }
    }
}

/// Q4_K or Q5_K row against int8 activations: over the sub-blocks `s` (32 values each,
/// activation block `8 b + s`), `d sc_s d_x sum_j q_j q_x,j - dmin m_s sum_j x_j`.
/// `qh(blk)` gives Q5_K's 32 bytes of fifth bits (`None` for Q4_K): bit `2 g` of byte `l` is
/// the fifth bit of value `l` of sub-block `2 g`, bit `2 g + 1` of sub-block `2 g + 1`.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `a` holds int8 activations for at least
/// `256 * row.len()` values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_k4<B>(
    row: &[B],
    a: &Q8Acts,
    parts: impl Fn(&B) -> K4Parts<'_>,
    qh: impl Fn(&B) -> Option<__m256i>,
) -> f32 {
    let nb = row.len();
    assert!(a.q.len() >= 256 * nb && a.d.len() >= 8 * nb && a.sums.len() >= 8 * nb);
    let (mask, one) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(1));
    let (mut acc1, mut acc2) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut mins = 0.0f32;
    for (b, blk) in row.iter().enumerate() {
        let p = parts(blk);
        let qh = qh(blk);
        let d = f16(p.d);
        let mut m = 0.0f32;
        for g in 0..4 {
            let (s1, s2) = (8 * b + 2 * g, 8 * b + 2 * g + 1);
            let (sc1, m1) = scale_min_k4(2 * g, p.scales);
            let (sc2, m2) = scale_min_k4(2 * g + 1, p.scales);
            m += m1 * a.sums[s1] + m2 * a.sums[s2];
            // SAFETY: 32 g + 32 <= 128 bytes of `qs`; the assert makes `a.q` hold 256 values
            // per block, so the loads at 32 s1 and 32 s2 (< 256 nb) are in it.
            let (q, x1, x2) = (
                _mm256_loadu_si256(p.qs.as_ptr().add(32 * g).cast::<__m256i>()),
                _mm256_loadu_si256(a.q.as_ptr().add(QK * s1).cast::<__m256i>()),
                _mm256_loadu_si256(a.q.as_ptr().add(QK * s2).cast::<__m256i>()),
            );
            let mut lo = _mm256_and_si256(q, mask);
            let mut hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), mask);
            if let Some(qh) = qh {
                // bit 2 g (2 g + 1) of each byte to bit 0, the bits shifted in from the next
                // byte of the 16-bit lane masked away, then to bit 4
                let h = _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * g as i32));
                let h1 = _mm256_slli_epi16(_mm256_and_si256(h, one), 4);
                let h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 1), one), 4);
                lo = _mm256_or_si256(lo, h1);
                hi = _mm256_or_si256(hi, h2);
            }
            let p1 = _mm256_cvtepi32_ps(dot_u8_i8_i32(lo, x1));
            let p2 = _mm256_cvtepi32_ps(dot_u8_i8_i32(hi, x2));
            acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d * sc1 * a.d[s1]), p1, acc1);
            acc2 = _mm256_fmadd_ps(_mm256_set1_ps(d * sc2 * a.d[s2]), p2, acc2);
        }
        mins += f16(p.dmin) * m;
    }
    hsum(_mm256_add_ps(acc1, acc2)) - mins
}

/// Q4_K row against int8 activations ([`dot_k4`] without fifth bits).
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `a` holds int8 activations for at least
/// `256 * row.len()` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q4_k(row: &[BlockQ4K], a: &Q8Acts) -> f32 {
    dot_k4(row, a, K4Parts::q4_k, |_| None)
}

/// Q5_K row against int8 activations: [`dot_k4`] with the fifth bit of value `l` of sub-block
/// `2 g` bit `2 g` of `qh[l]`, of sub-block `2 g + 1` bit `2 g + 1`.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `a` holds int8 activations for at least
/// `256 * row.len()` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q5_k(row: &[BlockQ5K], a: &Q8Acts) -> f32 {
    dot_k4(
        row,
        a,
        K4Parts::q5_k,
        // SAFETY: the 32-byte load reads exactly `qh`.
        |blk| Some(_mm256_loadu_si256(blk.qh.as_ptr().cast::<__m256i>())),
    )
}

/// The unsigned 6-bit quants of half `n` (values `128 n ..`) of a Q6_K block as four vectors
/// of 32 bytes, quarter `i` holding values `128 n + 32 i + l`: low four bits from
/// `ql[64 n + l]` (`i` = 0, 2: low, high nibble) or `ql[64 n + 32 + l]` (`i` = 1, 3), high
/// two from bits `2 i, 2 i + 1` of `qh[32 n + l]`.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `n < 2`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k_quants(blk: &BlockQ6K, n: usize) -> [__m256i; 4] {
    let (m4, m30) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(0x30));
    // SAFETY: n < 2: 64 n + 64 <= 128 bytes of `ql`, 32 n + 32 <= 64 of `qh`.
    let (lo, hi, h) = (
        _mm256_loadu_si256(blk.ql.as_ptr().add(64 * n).cast::<__m256i>()),
        _mm256_loadu_si256(blk.ql.as_ptr().add(64 * n + 32).cast::<__m256i>()),
        _mm256_loadu_si256(blk.qh.as_ptr().add(32 * n).cast::<__m256i>()),
    );
    // 16-bit shifts move bits across bytes; every mask keeps only a byte's own bits
    [
        _mm256_or_si256(
            _mm256_and_si256(lo, m4),
            _mm256_and_si256(_mm256_slli_epi16(h, 4), m30),
        ),
        _mm256_or_si256(
            _mm256_and_si256(hi, m4),
            _mm256_and_si256(_mm256_slli_epi16(h, 2), m30),
        ),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16(lo, 4), m4),
            _mm256_and_si256(h, m30),
        ),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16(hi, 4), m4),
            _mm256_and_si256(_mm256_srli_epi16(h, 2), m30),
        ),
    ]
}

/// Q6_K row against int8 activations: `sum_b d_b sum_i d_x,i sum_t sc_t sum_j (q_j - 32)
/// q_x,j` over the eight activation blocks `i` of the block and their two 16-value groups `t`.
/// Half `n` (128 values) of a block: quarter `i` (values `128 n + 32 i + l`) takes its low
/// four bits from `ql[64 n + l]` (`i` = 0, 2: low, high nibble) or `ql[64 n + 32 + l]`
/// (`i` = 1, 3) and bits `2 i, 2 i + 1` of `qh[32 n + l]`; groups `8 n + 2 i` (l < 16) and
/// `8 n + 2 i + 1` scale it.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `a` holds int8 activations for at least
/// `256 * row.len()` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q6_k(row: &[BlockQ6K], a: &Q8Acts) -> f32 {
    let nb = row.len();
    assert!(a.q.len() >= 256 * nb && a.d.len() >= 8 * nb);
    let m32 = _mm256_set1_epi8(32);
    let (mut acc1, mut acc2) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for (b, blk) in row.iter().enumerate() {
        let d = f16(blk.d);
        for n in 0..2 {
            // SAFETY (`q6_k_quants`): n < 2.
            let q = q6_k_quants(blk, n);
            for (i, qi) in q.into_iter().enumerate() {
                let s = 8 * b + 4 * n + i;
                // SAFETY: the assert makes `a.q` hold 256 values per block: the load at
                // 32 s (< 256 nb) is in it.
                let x = _mm256_loadu_si256(a.q.as_ptr().add(QK * s).cast::<__m256i>());
                // (q - 32) x per pair of values, in i16 (|.| <= 2 * 32 * 127)
                let p = _mm256_sub_epi16(_mm256_maddubs_epi16(qi, x), _mm256_maddubs_epi16(m32, x));
                let (t1, t2) = (blk.scales[8 * n + 2 * i], blk.scales[8 * n + 2 * i + 1]);
                let sc = _mm256_set_m128i(_mm_set1_epi16(t2 as i16), _mm_set1_epi16(t1 as i16));
                let p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, sc));
                let f = _mm256_set1_ps(d * a.d[s]);
                if i % 2 == 0 {
                    acc1 = _mm256_fmadd_ps(f, p, acc1);
                } else {
                    acc2 = _mm256_fmadd_ps(f, p, acc2);
                }
            }
        }
    }
    hsum(_mm256_add_ps(acc1, acc2))
}

/// 16-bit lane `s` (0..8) of each 128-bit half of `v` broadcast over that half (`vpshufb`
/// with a constant index once inlined into the unrolled loops).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn broadcast_i16(v: __m256i, s: usize) -> __m256i {
    // SAFETY: register operations only; the CPU features are the caller's proof.
    let idx = i16::from_le_bytes([2 * s as u8, 2 * s as u8 + 1]);
    _mm256_shuffle_epi8(v, _mm256_set1_epi16(idx))
}

/// Q4_K or Q5_K row against the Q8_K activations `k`: per block `b`,
/// `d d_x sum_s sc_s sum_j q_j q_x,j - dmin d_x sum_s m_s sum_j q_x,j` over the eight
/// sub-blocks `s` of 32 values, both sums in i32, one FMA each per block. `qh(blk)` gives
/// Q5_K's 32 bytes of fifth bits as in [`dot_k4`] (`None` for Q4_K).
///
/// Bounds: `q <= 15` (31 with the fifth bit), `|q_x| <= 127`: a `vpmaddubsw` pair sums to
/// at most `2 * 31 * 127 = 7874` in i16; `vpmaddwd` by the scales (`<= 63`) to
/// `2 * 7874 * 63 = 992124` per i32 lane, eight of them (two sub-blocks, four steps) to
/// `7.9e6 < 2^24` (exact in f32). Mins: a sub-block's activation sum `<= 32 * 127 = 4064`
/// (i16, `vphaddw` of two `bsums`), `vpmaddwd` by the mins (`<= 63`) `<= 512064`.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `k` holds at least `row.len()` blocks.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_k4_q8k<B>(
    row: &[B],
    k: &Q8K,
    parts: impl Fn(&B) -> K4Parts<'_>,
    qh: impl Fn(&B) -> Option<__m256i>,
) -> f32 {
    let nb = row.len();
    assert!(k.q.len() >= QK_K * nb && k.d.len() >= nb && k.bsums.len() >= QK_K / BSUM * nb);
    let (mask, one, two) = (
        _mm256_set1_epi8(0x0f),
        _mm256_set1_epi8(1),
        _mm256_set1_epi8(2),
    );
    let (mut acc, mut acc_m) = (_mm256_setzero_ps(), _mm_setzero_ps());
    for (b, blk) in row.iter().enumerate() {
        let p = parts(blk);
        let mut qh = qh(blk);
        let sm = k4_scales_mins(p.scales);
        // SAFETY: the 16-byte load reads exactly `sm`; the assert makes `k.bsums` hold 16
        // sums per block and `k.q` 256 values per block, so the loads at 16 b and at
        // 256 b + 64 g (+ 32) are in them; 32 g + 32 <= 128 bytes of `qs`.
        let sm = _mm_loadu_si128(sm.as_ptr().cast::<__m128i>());
        // the eight scales as i16 in both halves, the eight mins as i16 (128-bit steps)
        let scales = _mm_cvtepu8_epi16(sm);
        let scales = _mm256_set_m128i(scales, scales);
        let mins = _mm_cvtepu8_epi16(_mm_unpackhi_epi64(sm, sm));
        let bs = _mm256_loadu_si256(k.bsums.as_ptr().add(QK_K / BSUM * b).cast::<__m256i>());
        let sub = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
        let mins = _mm_madd_epi16(mins, sub);
        let dx = k.d[b];
        acc_m = _mm_fmadd_ps(_mm_set1_ps(f16(p.dmin) * dx), _mm_cvtepi32_ps(mins), acc_m);
        let mut sums = _mm256_setzero_si256();
        for g in 0..4 {
            let at = QK_K * b + 64 * g;
            let (q, x1, x2) = (
                _mm256_loadu_si256(p.qs.as_ptr().add(32 * g).cast::<__m256i>()),
                _mm256_loadu_si256(k.q.as_ptr().add(at).cast::<__m256i>()),
                _mm256_loadu_si256(k.q.as_ptr().add(at + 32).cast::<__m256i>()),
            );
            let mut lo = _mm256_and_si256(q, mask);
            let mut hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), mask);
            if let Some(h) = qh.as_mut() {
                // bits 2 g and 2 g + 1 sit at bits 0 and 1 of each byte (a fixed shift by 2
                // per step; bits moved in from the next byte of a 16-bit lane are masked
                // away), moved to bit 4
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(*h, one), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(*h, two), 3));
                *h = _mm256_srli_epi16(*h, 2);
            }
            let p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x1), broadcast_i16(scales, 2 * g));
            let p2 = _mm256_madd_epi16(
                _mm256_maddubs_epi16(hi, x2),
                broadcast_i16(scales, 2 * g + 1),
            );
            sums = _mm256_add_epi32(sums, _mm256_add_epi32(p1, p2));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(p.d) * dx), _mm256_cvtepi32_ps(sums), acc);
    }
    hsum(acc) - hsum(_mm256_zextps128_ps256(acc_m))
}

/// Q4_K row against the Q8_K activations `k` ([`dot_k4_q8k`] without fifth bits).
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `k` holds at least `row.len()` blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q4_k_q8k(row: &[BlockQ4K], k: &Q8K) -> f32 {
    dot_k4_q8k(row, k, K4Parts::q4_k, |_| None)
}

/// Q5_K row against the Q8_K activations `k` ([`dot_k4_q8k`] with Q5_K's fifth bits).
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `k` holds at least `row.len()` blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q5_k_q8k(row: &[BlockQ5K], k: &Q8K) -> f32 {
    dot_k4_q8k(
        row,
        k,
        K4Parts::q5_k,
        // SAFETY: the 32-byte load reads exactly `qh`.
        |blk| Some(_mm256_loadu_si256(blk.qh.as_ptr().cast::<__m256i>())),
    )
}

/// Q6_K row against the Q8_K activations `k`: per block,
/// `d d_x (sum_j sc_t(j) q_j q_x,j - 32 sum_t sc_t sum_(j in t) q_x,j)`, `q_j` the unsigned
/// 6-bit quant, `t` the 16 groups of 16 values; value order as in [`dot_q6_k`].
///
/// The offset of 32 goes through the activations' 16-value sums (`bsums`), not through a
/// second `vpmaddubsw` of 32 by `q_x` per 32 values: one `vpmaddwd` per block instead of
/// eight `vpmaddubsw` and subtractions. Bounds: `q <= 63`, `|q_x| <= 127`: a `vpmaddubsw`
/// pair sums to at most `2 * 63 * 127 = 16002` (i16, no saturation); `vpmaddwd` by the
/// scales (`|sc| <= 128`) to `4.1e6` per i32 lane, eight of them to `3.3e7`. The offset:
/// `|bsum| <= 2032`, `vpmaddwd` by the scales `<= 520192`, times 32 `<= 1.7e7`; the lane
/// difference stays below `5e7 < 2^31` (f32 rounds it above `2^24`: relative `2^-24`).
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `k` holds at least `row.len()` blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q6_k_q8k(row: &[BlockQ6K], k: &Q8K) -> f32 {
    let nb = row.len();
    assert!(k.q.len() >= QK_K * nb && k.d.len() >= nb && k.bsums.len() >= QK_K / BSUM * nb);
    let mut acc = _mm256_setzero_ps();
    for (b, blk) in row.iter().enumerate() {
        // SAFETY: the 16-byte load reads exactly `scales`; the assert makes `k.bsums` hold
        // 16 sums per block: the load at 16 b is in it.
        let sc8 = _mm_loadu_si128(blk.scales.as_ptr().cast::<__m128i>());
        let bs = _mm256_loadu_si256(k.bsums.as_ptr().add(QK_K / BSUM * b).cast::<__m256i>());
        let offset = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), bs);
        let mut sums = _mm256_setzero_si256();
        for n in 0..2 {
            // SAFETY (`q6_k_quants`): n < 2.
            let q = q6_k_quants(blk, n);
            for (i, qi) in q.into_iter().enumerate() {
                // SAFETY: the assert makes `k.q` hold 256 values per block: the load at
                // 256 b + 128 n + 32 i is in it.
                let x = _mm256_loadu_si256(
                    k.q.as_ptr()
                        .add(QK_K * b + 128 * n + 32 * i)
                        .cast::<__m256i>(),
                );
                // group t = 8 n + 2 i scales values 0-15 (low half), t + 1 values 16-31
                let t = (8 * n + 2 * i) as i64;
                let pick =
                    _mm_set_epi64x((t + 1) * 0x0101_0101_0101_0101, t * 0x0101_0101_0101_0101);
                let sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, pick));
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(qi, x), sc);
                sums = _mm256_add_epi32(sums, p);
            }
        }
        let sums = _mm256_sub_epi32(sums, _mm256_slli_epi32(offset, 5));
        acc = _mm256_fmadd_ps(
            _mm256_set1_ps(f16(blk.d) * k.d[b]),
            _mm256_cvtepi32_ps(sums),
            acc,
        );
    }
    hsum(acc)
}
