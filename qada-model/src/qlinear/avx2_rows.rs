//! AVX2 kernels of eight rows at a time against int8 activations, for the 32-value block
//! types (Q4_0, Q4_1, Q5_0, Q8_0): decoding's matrix-vector products.
//!
//! A row's result is defined per row, whichever rows share the call. With `i_b` the exact
//! integer product of block `b` (`sum_j q_j q_x,j`; Q4_0 and Q5_0 subtract their offset `c`
//! times `sum_j q_x,j`, so `i_b = sum_j (q_j - c) q_x,j`), `d_b` the row's scale, `m_b` its
//! minimum (Q4_1) and `d_x,b`, `s_b = d_x,b sum_j q_x,j` the activations' scale and sum:
//!
//! - `e = fma(d_b d_x,b, i_b, e)` over the even blocks, `o` the same over the odd ones;
//! - `m = fma(m_b, s_b, m)` over all blocks (Q4_1);
//! - the row's product is `(e + o) + m`.
//!
//! [`rows8_nibbles`] and [`rows8_q8_0`] run these steps in the eight lanes of one vector, a
//! row a lane; [`one_row`] runs them for one row in scalar arithmetic (the integers exact,
//! the same roundings in the same order). So a row's product is the same bits whether it
//! went through eight rows or alone (a matrix's last `rows % 8` rows, [`super::dot_row`]).
//!
//! Against the one-row kernels this replaces, eight rows share each block's activations, its
//! scale conversions and its float work: per block, the eight rows' integer sums meet in one
//! vector by three (nibble types) or six (Q8_0) `vphaddd`, then one conversion and one FMA
//! for all eight. Nibble rows go in pairs (rows `p` and `p + 4` in the two 128-bit halves),
//! so one 256-bit unpack serves two rows. Each block also asks for the next group's bytes
//! ([`prefetch_ahead`]): reading eight rows at once, the kernel without it was slower than
//! one row at a time (SmolLM2 decode on Zen 3, one thread: 49-51 against 54-66 tokens/s);
//! with it, 94-102.
//!
//! Every kernel is `unsafe` and `#[target_feature(enable = "avx2,fma,f16c")]`: the caller holds
//! a [`qada_stats::simd::Avx2`] token and has checked that `a` is int8 and covers the rows.

use std::arch::x86_64::*;

use super::avx2::f16;
use super::{Q8Acts, QK};
use crate::quant::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ8_0, F16Bytes};

/// What the kernels read of a nibble block.
pub(crate) struct NibbleParts<'b> {
    /// The block's scale.
    d: F16Bytes,
    /// The block's minimum (Q4_1); `None` for the offset types.
    m: Option<F16Bytes>,
    /// The low four bits of the 32 quants, two a byte (value `j` in byte `j % 16`, low
    /// nibble for `j < 16`).
    qs: &'b [u8; 16],
    /// The fifth bits, bit `j` for value `j` (Q5_0); 0 for the 4-bit types.
    qh: u32,
}

/// A block of 32 values kept as 16 bytes of nibbles (plus a fifth bit for Q5_0).
pub(crate) trait NibbleBlock: Copy {
    /// The offset `c` subtracted from every quant (0 for Q4_1, whose minimum is `m`).
    const OFFSET: i32;
    /// The block's parts.
    fn parts(&self) -> NibbleParts<'_>;
}

impl NibbleBlock for BlockQ4_0 {
    const OFFSET: i32 = 8;
    fn parts(&self) -> NibbleParts<'_> {
        let (d, m, qs, qh) = (self.d, None, &self.qs, 0);
        NibbleParts { d, m, qs, qh }
    }
}

impl NibbleBlock for BlockQ4_1 {
    const OFFSET: i32 = 0;
    fn parts(&self) -> NibbleParts<'_> {
        let (d, m, qs, qh) = (self.d, Some(self.m), &self.qs, 0);
        NibbleParts { d, m, qs, qh }
    }
}

impl NibbleBlock for BlockQ5_0 {
    const OFFSET: i32 = 16;
    fn parts(&self) -> NibbleParts<'_> {
        let (d, m, qs, qh) = (self.d, None, &self.qs, u32::from_le_bytes(self.qh));
        NibbleParts { d, m, qs, qh }
    }
}

/// One row's product by the steps of the module doc, from `int(b)`, block `b`'s exact integer
/// product `i_b`, `d(b)` its scale and `m(b)` its minimum (or `None`).
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `a` is int8 with at least `nb` blocks.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn finish(
    nb: usize,
    a: &Q8Acts,
    int: impl Fn(usize) -> i32,
    d: impl Fn(usize) -> F16Bytes,
    m: impl Fn(usize) -> Option<F16Bytes>,
) -> f32 {
    let (mut acc, mut mins) = ([0.0f32; 2], 0.0f32);
    for b in 0..nb {
        let s = f16(d(b)) * a.d[b];
        acc[b % 2] = s.mul_add(int(b) as f32, acc[b % 2]);
        if let Some(m) = m(b) {
            mins = f16(m).mul_add(a.s[b], mins);
        }
    }
    (acc[0] + acc[1]) + mins
}

/// The integer product of 32 quants and the activations' 32 int8 values at block `b`.
#[inline]
fn int_dot(q: impl Fn(usize) -> i32, a: &Q8Acts, b: usize) -> i32 {
    let x = &a.q[b * QK..(b + 1) * QK];
    x.iter().enumerate().map(|(j, &x)| q(j) * x as i32).sum()
}

/// One nibble row against int8 activations, by the steps of the module doc in scalar
/// arithmetic: the same bits as its lane of [`rows8_nibbles`].
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `a` is int8 with `32 * row.len()` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn one_row<B: NibbleBlock>(row: &[B], a: &Q8Acts) -> f32 {
    assert!(a.q.len() >= QK * row.len() && a.d.len() >= row.len() && a.s.len() >= row.len());
    assert!(a.qsum.len() >= row.len());
    let int = |b: usize| {
        let NibbleParts { qs, qh, .. } = row[b].parts();
        let q = |j: usize| {
            let nib = if j < 16 { qs[j] & 15 } else { qs[j - 16] >> 4 };
            nib as i32 | ((((qh >> j) & 1) as i32) << 4)
        };
        int_dot(q, a, b) - B::OFFSET * a.qsum[b]
    };
    finish(
        row.len(),
        a,
        int,
        |b| row[b].parts().d,
        |b| row[b].parts().m,
    )
}

/// One Q8_0 row against int8 activations, by the steps of the module doc in scalar
/// arithmetic: the same bits as its lane of [`rows8_q8_0`].
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `a` is int8 with `32 * row.len()` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn one_row_q8_0(row: &[BlockQ8_0], a: &Q8Acts) -> f32 {
    assert!(a.q.len() >= QK * row.len() && a.d.len() >= row.len());
    let int = |b: usize| int_dot(|j| row[b].qs[j] as i32, a, b);
    finish(row.len(), a, int, |b| row[b].d, |_| None)
}

/// The f16 values `h(0)`, ..., `h(7)` as eight f32 lanes.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C (the caller's token).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16x8(h: impl Fn(usize) -> F16Bytes) -> __m256 {
    let w = |i: usize| u16::from_le_bytes(h(i)) as i32;
    // SAFETY: register operations only; the CPU features are the caller's proof. The first
    // lane by `vmovd` (a fresh register: no dependency on an earlier value).
    let mut v = _mm_cvtsi32_si128(w(0));
    v = _mm_insert_epi16::<1>(v, w(1));
    v = _mm_insert_epi16::<2>(v, w(2));
    v = _mm_insert_epi16::<3>(v, w(3));
    v = _mm_insert_epi16::<4>(v, w(4));
    v = _mm_insert_epi16::<5>(v, w(5));
    v = _mm_insert_epi16::<6>(v, w(6));
    v = _mm_insert_epi16::<7>(v, w(7));
    _mm256_cvtph_ps(v)
}

/// The 16 bits `bits` as 16 bytes in each 128-bit half (`lo` in the low half, `hi` in the
/// high one): byte `j` is 0x10 when bit `j` is set, else 0.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C (the caller's token).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn fifth_bits(lo: u32, hi: u32) -> __m256i {
    // SAFETY: register operations only; the CPU features are the caller's proof.
    // byte j of a half takes byte j / 8 of its 16 bits ...
    let spread = _mm256_shuffle_epi8(
        _mm256_setr_epi32(lo as i32, 0, 0, 0, hi as i32, 0, 0, 0),
        _mm256_setr_epi64x(0, 0x0101_0101_0101_0101, 0, 0x0101_0101_0101_0101),
    );
    // ... and keeps bit j % 8 of it
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

/// Eight i32 vectors, one per row, to one vector of each row's lane sum, rows in order:
/// `v[i]` is row `i`'s.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C (the caller's token).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn sum_rows(v: [__m256i; 8]) -> __m256i {
    // SAFETY: register operations only; the CPU features are the caller's proof.
    // per half: [r0 r0 r1 r1], then [r0 r1 r2 r3] (the half's partial sums)
    let u0 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    let u1 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    _mm256_add_epi32(
        _mm256_permute2x128_si256::<0x20>(u0, u1),
        _mm256_permute2x128_si256::<0x31>(u0, u1),
    )
}

/// Checks the eight rows share a length the activations cover; returns it.
fn rows_and_acts<B>(rows: &[&[B]; 8], a: &Q8Acts) -> usize {
    let nb = rows[0].len();
    assert!(rows.iter().all(|r| r.len() == nb));
    assert!(a.q.len() >= QK * nb && a.d.len() >= nb && a.s.len() >= nb && a.qsum.len() >= nb);
    nb
}

/// Block `b` of eight nibble rows: the rows' scales times the activations' (`d_b d_x,b`)
/// and the rows' exact integer products `i_b` as f32, rows in order.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `b` is a block of every row and of `a`'s int8
/// values (`rows_and_acts`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibble_block<B: NibbleBlock>(rows: &[&[B]; 8], a: &Q8Acts, b: usize) -> (__m256, __m256) {
    let (low, ones) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi16(1));
    // SAFETY: the caller made `a.q` hold the 32 values of block `b`; the 16-byte loads read
    // exactly `x[0..16]`, `x[16..32]` and a block's `qs`.
    let x = a.q.as_ptr().add(b * QK);
    let xlo = _mm256_broadcastsi128_si256(_mm_loadu_si128(x.cast()));
    let xhi = _mm256_broadcastsi128_si256(_mm_loadu_si128(x.add(16).cast()));
    let pair = |p: usize| {
        let (r0, r1) = (rows[p][b].parts(), rows[p + 4][b].parts());
        let v = _mm256_loadu2_m128i(r1.qs.as_ptr().cast(), r0.qs.as_ptr().cast());
        let mut lo = _mm256_and_si256(v, low);
        let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
        if B::OFFSET == 16 {
            let (h0, h1) = (r0.qh, r1.qh);
            lo = _mm256_or_si256(lo, fifth_bits(h0 & 0xffff, h1 & 0xffff));
            hi = _mm256_or_si256(hi, fifth_bits(h0 >> 16, h1 >> 16));
        }
        // quants <= 31 and |x| <= 127: a pair <= 7874, two pairs <= 15748, inside i16
        let p16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xlo), _mm256_maddubs_epi16(hi, xhi));
        _mm256_madd_epi16(p16, ones)
    };
    // pair p holds row p in its low half and row p + 4 in its high one, so
    // h = [r0 r1 r2 r3 | r4 r5 r6 r7]
    let h = _mm256_hadd_epi32(
        _mm256_hadd_epi32(pair(0), pair(1)),
        _mm256_hadd_epi32(pair(2), pair(3)),
    );
    let h = if B::OFFSET != 0 {
        _mm256_sub_epi32(h, _mm256_set1_epi32(B::OFFSET * a.qsum[b]))
    } else {
        h
    };
    let s = _mm256_mul_ps(f16x8(|i| rows[i][b].parts().d), _mm256_set1_ps(a.d[b]));
    (s, _mm256_cvtepi32_ps(h))
}

/// Eight nibble rows against int8 activations: each row's product by the steps of the module
/// doc, rows in order.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `a` is int8 with `32 * rows[i].len()` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn rows8_nibbles<B: NibbleBlock>(rows: &[&[B]; 8], a: &Q8Acts) -> [f32; 8] {
    let nb = rows_and_acts(rows, a);
    let (mut e, mut o, mut mins) = (
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
    );
    let mut b = 0;
    while b < nb {
        prefetch_ahead(rows, b);
        // SAFETY: `b < nb`, checked by `rows_and_acts` against the rows and `a`
        let (s, h) = nibble_block(rows, a, b);
        if b % 2 == 0 {
            e = _mm256_fmadd_ps(s, h, e);
        } else {
            o = _mm256_fmadd_ps(s, h, o);
        }
        if rows[0][b].parts().m.is_some() {
            let m = f16x8(|i| rows[i][b].parts().m.unwrap_or_default());
            mins = _mm256_fmadd_ps(m, _mm256_set1_ps(a.s[b]), mins);
        }
        b += 1;
    }
    lanes(_mm256_add_ps(_mm256_add_ps(e, o), mins))
}

/// Block `b` of eight Q8_0 rows: as [`nibble_block`].
///
/// # Safety
/// As [`nibble_block`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_block(rows: &[&[BlockQ8_0]; 8], a: &Q8Acts, b: usize) -> (__m256, __m256) {
    let ones = _mm256_set1_epi16(1);
    // SAFETY: the caller made `a.q` hold the 32 values of block `b`; the 32-byte loads read
    // exactly those and a block's `qs`.
    let x = _mm256_loadu_si256(a.q.as_ptr().add(b * QK).cast());
    let row = |i: usize| {
        let w = _mm256_loadu_si256(rows[i][b].qs.as_ptr().cast());
        // |w| <= 128 and |x| <= 127: a pair <= 32512, inside i16
        let p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
        _mm256_madd_epi16(p16, ones)
    };
    let h = sum_rows([
        row(0),
        row(1),
        row(2),
        row(3),
        row(4),
        row(5),
        row(6),
        row(7),
    ]);
    let s = _mm256_mul_ps(f16x8(|i| rows[i][b].d), _mm256_set1_ps(a.d[b]));
    (s, _mm256_cvtepi32_ps(h))
}

/// Eight Q8_0 rows against int8 activations: each row's product by the steps of the module
/// doc, rows in order.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `a` is int8 with `32 * rows[i].len()` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn rows8_q8_0(rows: &[&[BlockQ8_0]; 8], a: &Q8Acts) -> [f32; 8] {
    let nb = rows_and_acts(rows, a);
    // no minimum: 0, added all the same (as `finish` does)
    let (mut e, mut o, mins) = (
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
    );
    let mut b = 0;
    while b < nb {
        prefetch_ahead(rows, b);
        // SAFETY: `b < nb`, checked by `rows_and_acts` against the rows and `a`
        let (s, h) = q8_0_block(rows, a, b);
        if b % 2 == 0 {
            e = _mm256_fmadd_ps(s, h, e);
        } else {
            o = _mm256_fmadd_ps(s, h, o);
        }
        b += 1;
    }
    lanes(_mm256_add_ps(_mm256_add_ps(e, o), mins))
}

/// Asks for the bytes of block `b` of the eight rows after `rows` (`DISTANCE` groups ahead;
/// rows lie one after another in a matrix, so the next group starts where the last row ends):
/// eight rows at once read eight places of memory, more than the hardware prefetcher follows.
/// A prefetch never faults; past the matrix's end it asks for bytes nobody reads.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C (the caller's token).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn prefetch_ahead<B>(rows: &[&[B]; 8], b: usize) {
    const DISTANCE: usize = 1;
    let step = 8 * std::mem::size_of::<B>();
    let group = step * rows[0].len();
    let next = rows[7].as_ptr_range().end.cast::<u8>();
    let at = next.wrapping_add((DISTANCE - 1) * group + b * step);
    let mut off = 0;
    while off < step {
        // SAFETY: a prefetch is a hint: it reads nothing the program sees and never faults,
        // whatever the address (`wrapping_add` keeps the pointer arithmetic defined).
        _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(off).cast());
        off += 64;
    }
}

/// The eight lanes of `v`.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C (the caller's token).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn lanes(v: __m256) -> [f32; 8] {
    let mut out = [0.0f32; 8];
    // SAFETY: the 32-byte store writes exactly `out`.
    _mm256_storeu_ps(out.as_mut_ptr(), v);
    out
}
