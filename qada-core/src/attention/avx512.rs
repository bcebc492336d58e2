//! The AVX-512 kernels: [`column_page_masses`] on 16 lanes, with its `exp` and `ln`.
//!
//! Every kernel is `unsafe` and `#[target_feature(enable = "avx512f,avx2,fma,f16c")]`, the
//! features an [`Avx512`] token proves, and takes the token. The safe entry point
//! ([`crate::attention::column_page_masses`]) checks the shapes first.

use std::arch::x86_64::*;

use qada_stats::simd::Avx512;
use qada_stats::ChannelColumn;

use super::column_tile::{finish_page, prefetch_ahead, tile_len, tile_stride, MAX_HEADS};
use super::exp_constants::{EXP2_TAYLOR, EXP_FLOOR, LN2_HI, LN2_LO, LOGF};

/// Heads whose sums one block keeps in registers: 8 heads times two 16-row chunks are 16
/// accumulators of the 32 vector registers.
const HEADS_PER_BLOCK: usize = 8;

/// `exp(x)` on 16 lanes for the page masses, as the AVX2 kernel's estimate: `x log2 e = n + f`
/// with `n` the nearest integer, `2^f` by [`EXP2_TAYLOR`] (relative error below `6e-6`),
/// `2^n` by `vscalefps`. Inputs are clamped at -87 first, so -inf and NaN lanes give
/// `exp(-87)`, about `1.6e-38`: nothing beside a page's largest term, `exp(0) = 1`, to which
/// every sum of the kernel is added.
///
/// # Safety
/// The CPU has AVX-512F (register operations only).
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn exp16_estimate(x: __m512) -> __m512 {
    // `max(x, lo)` gives `lo` for a NaN `x`
    let t = _mm512_mul_ps(
        _mm512_max_ps(x, _mm512_set1_ps(EXP_FLOOR)),
        _mm512_set1_ps(std::f32::consts::LOG2_E),
    );
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(t);
    let f = _mm512_sub_ps(t, n);
    let mut p = _mm512_set1_ps(EXP2_TAYLOR[0]);
    for &c in &EXP2_TAYLOR[1..] {
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c));
    }
    _mm512_scalef_ps(p, n)
}

/// `ln(x)` on 16 lanes for finite `x >= 1`, as the 8-lane one: `x = 2^e m`, `m` in
/// `[sqrt(1/2), sqrt 2)`, `ln(1 + f)` by Cephes' `logf` polynomial.
///
/// # Safety
/// The CPU has AVX-512F (register operations only).
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn ln16(x: __m512) -> __m512 {
    let bits = _mm512_castps_si512(x);
    // x = 2^e m with m in [0.5, 1)
    let mut e = _mm512_cvtepi32_ps(_mm512_sub_epi32(
        _mm512_srli_epi32::<23>(bits),
        _mm512_set1_epi32(126),
    ));
    let m = _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_and_si512(bits, _mm512_set1_epi32(0x007f_ffff)),
        _mm512_set1_epi32(0x3f00_0000),
    ));
    // m below sqrt(1/2): 2 m - 1 and e - 1; else m - 1
    let one = _mm512_set1_ps(1.0);
    let small =
        _mm512_cmp_ps_mask::<_CMP_LT_OQ>(m, _mm512_set1_ps(std::f32::consts::FRAC_1_SQRT_2));
    e = _mm512_mask_sub_ps(e, small, e, one);
    let f = _mm512_sub_ps(_mm512_mask_add_ps(m, small, m, m), one);
    let z = _mm512_mul_ps(f, f);
    let mut y = _mm512_set1_ps(LOGF[0]);
    for &c in &LOGF[1..] {
        y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(c));
    }
    y = _mm512_mul_ps(_mm512_mul_ps(y, f), z);
    y = _mm512_fmadd_ps(e, _mm512_set1_ps(LN2_LO), y);
    y = _mm512_fnmadd_ps(_mm512_set1_ps(0.5), z, y);
    _mm512_fmadd_ps(e, _mm512_set1_ps(LN2_HI), _mm512_add_ps(f, y))
}

/// Pages one block of the kernel scores before their maxima and sums are reduced together:
/// one page per lane.
const PAGES_PER_BLOCK: usize = 16;

/// Reduce 16 vectors to one whose lane `j` is `op` over the 16 lanes of `v[j]` (a transposing
/// tree: pairs within 128-bit lanes, then across them), 45 operations for 16 horizontal
/// reductions. Every output lane combines values of its own input vector only.
///
/// # Safety
/// The CPU has AVX-512F (register operations only).
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn reduce16(v: &[__m512; 16], op: impl Fn(__m512, __m512) -> __m512) -> __m512 {
    // four vectors to one: lane (k, i) holds vector i's value over 128-bit lane k
    let four = |a: __m512, b: __m512, c: __m512, d: __m512| {
        let ab = op(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
        let cd = op(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
        op(
            _mm512_shuffle_ps::<0x44>(ab, cd),
            _mm512_shuffle_ps::<0xee>(ab, cd),
        )
    };
    let u0 = four(v[0], v[1], v[2], v[3]);
    let u1 = four(v[4], v[5], v[6], v[7]);
    let u2 = four(v[8], v[9], v[10], v[11]);
    let u3 = four(v[12], v[13], v[14], v[15]);
    // 128-bit lanes 0 and 1 with 2 and 3, then the two halves
    let w01 = op(
        _mm512_shuffle_f32x4::<0b10_00_10_00>(u0, u1),
        _mm512_shuffle_f32x4::<0b11_01_11_01>(u0, u1),
    );
    let w23 = op(
        _mm512_shuffle_f32x4::<0b10_00_10_00>(u2, u3),
        _mm512_shuffle_f32x4::<0b11_01_11_01>(u2, u3),
    );
    op(
        _mm512_shuffle_f32x4::<0b10_00_10_00>(w01, w23),
        _mm512_shuffle_f32x4::<0b11_01_11_01>(w01, w23),
    )
}

/// [`crate::attention::column_page_masses`] on 16 lanes, in blocks of 16 pages: each page's
/// scores of every head into `tile` ([`score_heads`]: every column's 16-row chunk of codes
/// converted and scaled once per block of up to 8 heads, the block's sums kept in registers
/// over all the columns; the codes and scales of a later page prefetched,
/// [`prefetch_ahead`]); then per head the 16 pages' maxima, their exponentials' sums
/// ([`exp16_estimate`]) and logarithms as vectors of one page a lane ([`reduce16`]), with no
/// horizontal reduction per page.
///
/// # Safety
/// The CPU has AVX-512F, AVX2, FMA and F16C (the token proves it); `columns` is not empty and
/// every column holds at least `t` codes and `ceil(t / page)` scales; `weights.len()` is a
/// multiple of `columns.len()` (`heads <= MAX_HEADS` rows); `out` holds
/// `heads x ceil(t / page)` values; `page >= 1`; `tile` holds
/// [`tile_len`]`(heads, page)` values.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn column_page_masses(
    _: Avx512,
    columns: &[ChannelColumn<'_>],
    weights: &[f32],
    t: usize,
    page: usize,
    tile: &mut [f32],
    out: &mut [f32],
) {
    let r = columns.len();
    let heads = weights.len() / r;
    let n_pages = t.div_ceil(page);
    let stride = tile_stride(page);
    debug_assert!(stride.is_multiple_of(16) && heads <= MAX_HEADS);
    debug_assert!(tile.len() >= tile_len(heads, page) && out.len() >= heads * n_pages);
    // the tile: head h, page j of the block at (h PAGES_PER_BLOCK + j) stride
    let head_stride = PAGES_PER_BLOCK * stride;
    let at = |h: usize, j: usize| h * head_stride + j * stride;
    for b0 in (0..n_pages).step_by(PAGES_PER_BLOCK) {
        let nb = PAGES_PER_BLOCK.min(n_pages - b0);
        for j in 0..nb {
            let p = b0 + j;
            let start = p * page;
            let len = page.min(t - start);
            prefetch_ahead(columns, p, page, n_pages);
            // the scores of every head into the tile: heads in blocks of up to 8 and rows two
            // chunks of 16 at a time, each block's sums held in registers over all the
            // columns (taken column by column in order, as the portable loop takes them)
            // SAFETY: rows start + i + 16 NC <= start + len <= t of every column, and the
            // tile's values at(h, j) + i + 16 NC <= at(h, j) + stride <= tile_len (i + 16 NC
            // <= len <= stride, h < heads, j < PAGES_PER_BLOCK): the contract of
            // `score_heads` with `to` at at(0, j) + i and heads head_stride apart.
            let mut i = 0;
            while i + 32 <= len {
                let to = tile.as_mut_ptr().add(at(0, j) + i);
                score_heads::<2>(columns, weights, p, start + i, to, head_stride);
                i += 32;
            }
            if i + 16 <= len {
                let to = tile.as_mut_ptr().add(at(0, j) + i);
                score_heads::<1>(columns, weights, p, start + i, to, head_stride);
                i += 16;
            }
            finish_page(columns, weights, p, start, (i, len, stride), tile, |h| {
                at(h, j)
            });
        }
        for h in 0..heads {
            let rp = tile.as_ptr();
            // SAFETY: the loads read at(h, j) + i + 16 <= at(h, j) + stride <= tile_len for
            // the block's pages j < nb (the others are not read).
            let mut v = [_mm512_set1_ps(f32::NEG_INFINITY); PAGES_PER_BLOCK];
            for (j, top) in v.iter_mut().enumerate().take(nb) {
                let mut i = 0;
                while i < stride {
                    // NaN skipped: `max_ps(x, acc)` returns `acc` when `x` is NaN
                    *top = _mm512_max_ps(_mm512_loadu_ps(rp.add(at(h, j) + i)), *top);
                    i += 16;
                }
            }
            let mut tops = [0.0f32; PAGES_PER_BLOCK];
            _mm512_storeu_ps(tops.as_mut_ptr(), reduce16(&v, |a, b| _mm512_max_ps(a, b)));
            for (j, sum) in v.iter_mut().enumerate() {
                *sum = _mm512_setzero_ps();
                if j >= nb || tops[j] == f32::NEG_INFINITY {
                    continue;
                }
                let mv = _mm512_set1_ps(tops[j]);
                let mut i = 0;
                while i < stride {
                    let x = _mm512_sub_ps(_mm512_loadu_ps(rp.add(at(h, j) + i)), mv);
                    *sum = _mm512_add_ps(*sum, exp16_estimate(x));
                    i += 16;
                }
            }
            let mut sums = [0.0f32; PAGES_PER_BLOCK];
            _mm512_storeu_ps(sums.as_mut_ptr(), reduce16(&v, |a, b| _mm512_add_ps(a, b)));
            for j in 0..nb {
                if tops[j] == f32::NEG_INFINITY {
                    // no finite score: NaN if one is NaN, else -inf (a sum of 1 adds ln 1 = 0)
                    let row = &tile[at(h, j)..at(h, j) + page.min(t - (b0 + j) * page)];
                    tops[j] = row.iter().copied().find(|x| x.is_nan()).unwrap_or(tops[j]);
                    sums[j] = 1.0;
                } else {
                    // at least the largest score's exp(0) = 1
                    sums[j] = sums[j].max(1.0);
                }
            }
            let lse = _mm512_add_ps(
                _mm512_loadu_ps(tops.as_ptr()),
                ln16(_mm512_loadu_ps(sums.as_ptr())),
            );
            let mut o = [0.0f32; PAGES_PER_BLOCK];
            _mm512_storeu_ps(o.as_mut_ptr(), lse);
            out[h * n_pages + b0..h * n_pages + b0 + nb].copy_from_slice(&o[..nb]);
        }
    }
}

/// Rows `row..row + 16 NC` of every head's scores `sum_c w_hc (s_cp c_ic)` into
/// `to[h stride..]`: heads in blocks of up to [`HEADS_PER_BLOCK`], each block's `NH NC`
/// accumulators held in registers over all the columns (independent chains, so that the
/// fused multiply-adds overlap), each chunk of codes converted and scaled once a block.
///
/// # Safety
/// The CPU has AVX-512F, AVX2, FMA and F16C; every column holds codes `row..row + 16 NC` and
/// the scale of page `p`; `weights` is `heads x columns.len()`; `to` is valid for writes of
/// `(heads - 1) stride + 16 NC` values.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn score_heads<const NC: usize>(
    columns: &[ChannelColumn<'_>],
    weights: &[f32],
    p: usize,
    row: usize,
    to: *mut f32,
    stride: usize,
) {
    let heads = weights.len() / columns.len();
    let mut h0 = 0;
    while heads - h0 >= HEADS_PER_BLOCK {
        score_block::<HEADS_PER_BLOCK, NC>(columns, weights, h0, p, row, to, stride);
        h0 += HEADS_PER_BLOCK;
    }
    match heads - h0 {
        7 => score_block::<7, NC>(columns, weights, h0, p, row, to, stride),
        6 => score_block::<6, NC>(columns, weights, h0, p, row, to, stride),
        5 => score_block::<5, NC>(columns, weights, h0, p, row, to, stride),
        4 => score_block::<4, NC>(columns, weights, h0, p, row, to, stride),
        3 => score_block::<3, NC>(columns, weights, h0, p, row, to, stride),
        2 => score_block::<2, NC>(columns, weights, h0, p, row, to, stride),
        1 => score_block::<1, NC>(columns, weights, h0, p, row, to, stride),
        _ => {}
    }
}

/// [`score_heads`] for the `NH` heads from `h0` (the same contract).
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn score_block<const NH: usize, const NC: usize>(
    columns: &[ChannelColumn<'_>],
    weights: &[f32],
    h0: usize,
    p: usize,
    row: usize,
    to: *mut f32,
    stride: usize,
) {
    let r = columns.len();
    let w = weights.as_ptr().add(h0 * r);
    let mut acc = [[_mm512_setzero_ps(); NC]; NH];
    for (c, col) in columns.iter().enumerate() {
        // SAFETY: codes row + 16 n + 16 <= row + 16 NC and the scale of page p exist (the
        // caller's contract); weights (h0 + k) r + c < heads r.
        let scale = _mm512_set1_ps(*col.scales.get_unchecked(p * col.stride));
        let mut x = [_mm512_setzero_ps(); NC];
        for (n, chunk) in x.iter_mut().enumerate() {
            let bytes = _mm_loadu_si128(col.codes.as_ptr().add(row + 16 * n).cast());
            *chunk = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes)), scale);
        }
        for (k, acc) in acc.iter_mut().enumerate() {
            let wv = _mm512_set1_ps(*w.add(k * r + c));
            for (a, chunk) in acc.iter_mut().zip(&x) {
                *a = _mm512_fmadd_ps(wv, *chunk, *a);
            }
        }
    }
    for (k, acc) in acc.iter().enumerate() {
        for (n, a) in acc.iter().enumerate() {
            // SAFETY: (h0 + k) stride + 16 n + 16 <= (heads - 1) stride + 16 NC.
            _mm512_storeu_ps(to.add((h0 + k) * stride + 16 * n), *a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `exp16_estimate` of 16 lanes through memory.
    fn estimate(x: [f32; 16]) -> [f32; 16] {
        let mut y = [0.0f32; 16];
        // SAFETY: the caller checked the features; `x` and `y` hold 16 f32 each.
        unsafe { _mm512_storeu_ps(y.as_mut_ptr(), exp16_estimate(_mm512_loadu_ps(x.as_ptr()))) };
        y
    }

    #[test]
    fn the_estimate_exp_is_within_6e_6_relative_and_tiny_below_the_floor() {
        if Avx512::detect().is_none() {
            return;
        }
        let worst = crate::attention::exp_constants::worst_relative_error(estimate);
        assert!(worst < 6e-6, "worst relative error {worst}");
        let mut special = [0.5f32; 16];
        special[..5].copy_from_slice(&[f32::NEG_INFINITY, -87.5, -1e30, f32::NAN, 0.0]);
        let y = estimate(special);
        // below the floor (and NaN): exp(-87), nothing beside a page's exp(0) = 1
        for &v in &y[..4] {
            assert!((0.0..2e-38).contains(&v) && 1.0 + v == 1.0, "{v}");
        }
        assert_eq!(y[4], 1.0);
    }
}
