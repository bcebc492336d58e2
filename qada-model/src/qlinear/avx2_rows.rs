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
//! [`group8_nibbles`] and [`group8_q8_0`] run these steps in the eight lanes of one vector,
//! a row a lane, on a group of eight rows interleaved field by field (`interleave.rs`);
//! [`one_row`] runs them for one row-major row in scalar arithmetic (the integers exact, the
//! same roundings in the same order). So a row's product is the same bits whether it went
//! through a group or alone (a matrix's last `rows % 8` rows, [`super::dot_row`]).
//!
//! Eight rows share each block's activations, its scale conversions and its float work: per
//! block, the eight scales are one load and one conversion, the eight rows' integer sums meet
//! in one vector by three (nibble types) or six (Q8_0) `vphaddd`, then one FMA serves all
//! eight. Nibble rows go in pairs (two rows' 16 quant bytes are one 32-byte load), so one
//! 256-bit unpack serves two rows. A group is one run of memory, which the hardware prefetcher
//! follows; read from eight row-major rows, the same kernel needed a software prefetch of the
//! next group (eight streams are more than the prefetcher follows) and eight inserts per
//! field to gather the scales.
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
    pub(crate) d: F16Bytes,
    /// The block's minimum (Q4_1); `None` for the offset types.
    pub(crate) m: Option<F16Bytes>,
    /// The low four bits of the 32 quants, two a byte (value `j` in byte `j % 16`, low
    /// nibble for `j < 16`).
    pub(crate) qs: &'b [u8; 16],
    /// The fifth bits, bit `j` for value `j` (Q5_0); 0 for the 4-bit types.
    pub(crate) qh: u32,
}

/// A block of 32 values kept as 16 bytes of nibbles (plus a fifth bit for Q5_0).
pub(crate) trait NibbleBlock: Copy {
    /// The offset `c` subtracted from every quant (0 for Q4_1, whose minimum is `m`).
    const OFFSET: i32;
    /// Where the eight rows' fields start in an interleaved block of a group
    /// (`interleave.rs`; the eight scales at 0): the minimums (Q4_1), the fifth bits (Q5_0),
    /// the quants.
    const M_AT: Option<usize>;
    /// See [`NibbleBlock::M_AT`].
    const QH_AT: Option<usize>;
    /// See [`NibbleBlock::M_AT`].
    const QS_AT: usize;
    /// The block's parts.
    fn parts(&self) -> NibbleParts<'_>;
}

impl NibbleBlock for BlockQ4_0 {
    const OFFSET: i32 = 8;
    const M_AT: Option<usize> = None;
    const QH_AT: Option<usize> = None;
    const QS_AT: usize = 16;
    fn parts(&self) -> NibbleParts<'_> {
        let (d, m, qs, qh) = (self.d, None, &self.qs, 0);
        NibbleParts { d, m, qs, qh }
    }
}

impl NibbleBlock for BlockQ4_1 {
    const OFFSET: i32 = 0;
    const M_AT: Option<usize> = Some(16);
    const QH_AT: Option<usize> = None;
    const QS_AT: usize = 32;
    fn parts(&self) -> NibbleParts<'_> {
        let (d, m, qs, qh) = (self.d, Some(self.m), &self.qs, 0);
        NibbleParts { d, m, qs, qh }
    }
}

impl NibbleBlock for BlockQ5_0 {
    const OFFSET: i32 = 16;
    const M_AT: Option<usize> = None;
    const QH_AT: Option<usize> = Some(16);
    const QS_AT: usize = 48;
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

/// Where the eight rows' quants start in an interleaved Q8_0 block (after the eight scales).
pub(crate) const Q8_0_QS_AT: usize = 16;

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

/// `[r0 r2 r4 r6 | r1 r3 r5 r7]` (even rows in the low half) to rows in order.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C (the caller's token).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn rows_in_order(h: __m256i) -> __m256i {
    // SAFETY: register operations only; the CPU features are the caller's proof.
    _mm256_permutevar8x32_epi32(h, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
}

/// Checks that `group` is whole interleaved blocks of eight rows of `B` (`8 size_of::<B>()`
/// bytes each) and that the activations cover them; returns the block count.
pub(crate) fn blocks_and_acts<B>(group: &[u8], a: &Q8Acts) -> usize {
    let per = 8 * std::mem::size_of::<B>();
    assert!(group.len().is_multiple_of(per));
    let nb = group.len() / per;
    assert!(a.q.len() >= QK * nb && a.d.len() >= nb && a.s.len() >= nb && a.qsum.len() >= nb);
    nb
}

/// The eight f16 values at `p` as f32, in order.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `p` is valid for 16 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn f16x8_at(p: *const u8) -> __m256 {
    // SAFETY: the caller's guarantee; an unaligned 16-byte read.
    _mm256_cvtph_ps(_mm_loadu_si128(p.cast()))
}

/// The block loop of every eight-row kernel, by the steps of the module doc: `$block(group,
/// a, b)` gives interleaved block `b`'s scales `d_b d_x,b` and exact integer products `i_b`
/// (as f32) of the group's eight rows, `|$b| $mins` the rows' minimums `m_b` (or `None`);
/// the value is the eight products, rows in order. `$ty` is the block type. A macro, not a
/// function taking closures: a closure passed into a `#[target_feature]` function was not
/// inlined (36 against 60 tokens/s), and each instruction set's kernel needs the loop
/// compiled with its own features.
///
/// Expands to unsafe code: the caller is an unsafe function with AVX2, FMA and F16C enabled
/// and `$block`'s safety conditions.
macro_rules! eight_rows {
    ($ty:ty, $group:expr, $a:expr, $block:expr, |$b:ident| $mins:expr) => {{
        let (group, a) = ($group, $a);
        let nb = blocks_and_acts::<$ty>(group, a);
        let (mut e, mut o, mut mins) = (
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
        );
        let mut $b = 0;
        while $b < nb {
            // the bytes 4 KiB ahead of this block are on their way meanwhile (`prefetch.rs`)
            super::prefetch::lines_ahead(
                block_at::<$ty>(group, $b),
                8 * std::mem::size_of::<$ty>(),
            );
            // `b < nb`, checked by `blocks_and_acts` against the group and `a`
            let (s, h) = $block(group, a, $b);
            if $b % 2 == 0 {
                e = _mm256_fmadd_ps(s, h, e);
            } else {
                o = _mm256_fmadd_ps(s, h, o);
            }
            let m: Option<__m256> = $mins;
            if let Some(m) = m {
                mins = _mm256_fmadd_ps(m, _mm256_set1_ps(a.s[$b]), mins);
            }
            $b += 1;
        }
        lanes(_mm256_add_ps(_mm256_add_ps(e, o), mins))
    }};
}
pub(crate) use eight_rows;

/// Where interleaved block `b` of a group of `B` starts.
#[inline]
pub(crate) fn block_at<B>(group: &[u8], b: usize) -> *const u8 {
    group
        .as_ptr()
        .wrapping_add(b * 8 * std::mem::size_of::<B>())
}

/// The minimums `m_b` of interleaved block `b` of a group (Q4_1), `None` for the offset
/// types.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `b` is a block of the group (`blocks_and_acts`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn mins8<B: NibbleBlock>(group: &[u8], b: usize) -> Option<__m256> {
    // SAFETY: the block's eight minimums are 16 bytes at `M_AT` inside it.
    B::M_AT.map(|at| f16x8_at(block_at::<B>(group, b).add(at)))
}

/// The fifth bits of the eight rows of interleaved Q5_0 block `p` (`QH_AT`), row `i`'s in
/// `qh[i]`; zeros for the 4-bit types.
///
/// # Safety
/// `p` is an interleaved block of `B`.
#[inline]
pub(crate) unsafe fn fifth_bits8<B: NibbleBlock>(p: *const u8) -> [u32; 8] {
    match B::QH_AT {
        // SAFETY: the eight rows' `qh` are 32 bytes at `QH_AT` inside the block.
        Some(at) => std::array::from_fn(|i| p.add(at + 4 * i).cast::<u32>().read_unaligned()),
        None => [0; 8],
    }
}

/// Interleaved block `b` of a group of eight nibble rows: the rows' scales times the
/// activations' (`d_b d_x,b`) and the rows' exact integer products `i_b` as f32, rows in
/// order.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `b` is a block of the group and of `a`'s int8 values
/// (`blocks_and_acts`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibble_block<B: NibbleBlock>(group: &[u8], a: &Q8Acts, b: usize) -> (__m256, __m256) {
    let (low, ones) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi16(1));
    let p = block_at::<B>(group, b);
    // SAFETY: the caller made `a.q` hold the 32 values of block `b` and `b` a block of the
    // group; the loads read `x[0..32]`, and inside the block the eight scales (16 bytes at 0)
    // and the quants (8 x 16 bytes at `QS_AT`).
    let x = a.q.as_ptr().add(b * QK);
    let xlo = _mm256_broadcastsi128_si256(_mm_loadu_si128(x.cast()));
    let xhi = _mm256_broadcastsi128_si256(_mm_loadu_si128(x.add(16).cast()));
    let qh = fifth_bits8::<B>(p);
    // rows 2 q and 2 q + 1, one a 128-bit half
    let pair = |q: usize| {
        let v = _mm256_loadu_si256(p.add(B::QS_AT + 32 * q).cast());
        let mut lo = _mm256_and_si256(v, low);
        let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
        if B::QH_AT.is_some() {
            let (h0, h1) = (qh[2 * q], qh[2 * q + 1]);
            lo = _mm256_or_si256(lo, fifth_bits(h0 & 0xffff, h1 & 0xffff));
            hi = _mm256_or_si256(hi, fifth_bits(h0 >> 16, h1 >> 16));
        }
        // quants <= 31 and |x| <= 127: a pair <= 7874, two pairs <= 15748, inside i16
        let p16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xlo), _mm256_maddubs_epi16(hi, xhi));
        _mm256_madd_epi16(p16, ones)
    };
    // pair q holds row 2 q in its low half and 2 q + 1 in its high one, so
    // h = [r0 r2 r4 r6 | r1 r3 r5 r7]
    let h = _mm256_hadd_epi32(
        _mm256_hadd_epi32(pair(0), pair(1)),
        _mm256_hadd_epi32(pair(2), pair(3)),
    );
    let h = rows_in_order(h);
    let h = if B::OFFSET != 0 {
        _mm256_sub_epi32(h, _mm256_set1_epi32(B::OFFSET * a.qsum[b]))
    } else {
        h
    };
    let s = _mm256_mul_ps(f16x8_at(p), _mm256_set1_ps(a.d[b]));
    (s, _mm256_cvtepi32_ps(h))
}

/// A group of eight nibble rows, interleaved (`interleave.rs`), against int8 activations:
/// each row's product by the steps of the module doc, rows in order.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `a` is int8 with 32 values per block of the group.
#[target_feature(enable = "avx2,fma,f16c")]
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
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_block(group: &[u8], a: &Q8Acts, b: usize) -> (__m256, __m256) {
    let ones = _mm256_set1_epi16(1);
    let p = block_at::<BlockQ8_0>(group, b);
    // SAFETY: the caller made `a.q` hold the 32 values of block `b` and `b` a block of the
    // group; the 32-byte loads read exactly those and row `i`'s quants (at 16 + 32 i).
    let x = _mm256_loadu_si256(a.q.as_ptr().add(b * QK).cast());
    let row = |i: usize| {
        let w = _mm256_loadu_si256(p.add(Q8_0_QS_AT + 32 * i).cast());
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
    let s = _mm256_mul_ps(f16x8_at(p), _mm256_set1_ps(a.d[b]));
    (s, _mm256_cvtepi32_ps(h))
}

/// A group of eight Q8_0 rows, interleaved, against int8 activations: each row's product by
/// the steps of the module doc, rows in order.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `a` is int8 with 32 values per block of the group.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn group8_q8_0(group: &[u8], a: &Q8Acts) -> [f32; 8] {
    // no minimum: 0, added all the same (as `finish` does)
    // SAFETY: the caller's token proves the features; `eight_rows!` checks the group's length
    // and `a`'s buffers (`blocks_and_acts`) before `q8_0_block` reads block `b`.
    eight_rows!(BlockQ8_0, group, a, q8_0_block, |_b| None)
}

/// The eight lanes of `v`.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C (the caller's token).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn lanes(v: __m256) -> [f32; 8] {
    let mut out = [0.0f32; 8];
    // SAFETY: the 32-byte store writes exactly `out`.
    _mm256_storeu_ps(out.as_mut_ptr(), v);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qlinear::interleave::fields;
    use crate::quant::GgmlType;

    /// The kernels' field offsets are where `interleave.rs` puts the fields.
    #[test]
    fn field_offsets_match_the_layout() {
        fn starts(ty: GgmlType) -> Vec<usize> {
            let f = fields(ty).unwrap();
            (0..f.len())
                .map(|i| 8 * f[..i].iter().sum::<usize>())
                .collect()
        }
        assert_eq!(starts(GgmlType::Q4_0), [0, BlockQ4_0::QS_AT]);
        assert_eq!(
            starts(GgmlType::Q4_1),
            [0, BlockQ4_1::M_AT.unwrap(), BlockQ4_1::QS_AT]
        );
        assert_eq!(
            starts(GgmlType::Q5_0),
            [0, BlockQ5_0::QH_AT.unwrap(), BlockQ5_0::QS_AT]
        );
        assert_eq!(starts(GgmlType::Q8_0), [0, Q8_0_QS_AT]);
    }
}
