//! The AVX-512 kernels: [`column_page_masses`] on 16 lanes, with its `exp` and `ln`.
//!
//! Every kernel is `unsafe` and `#[target_feature(enable = "avx512f,avx2,fma,f16c")]`, the
//! features an [`Avx512`] token proves, and takes the token. The safe entry point
//! ([`crate::attention::column_page_masses`]) checks the shapes first.

use std::arch::x86_64::*;

use qada_stats::simd::Avx512;
use qada_stats::ChannelColumn;

use super::column_tile::{prefetch_ahead, tile_len, tile_stride, MAX_HEADS};
use super::exp_constants::{EXP_FLOOR, EXP_TAYLOR, LN2_HI, LN2_LO, LOGF};

/// Columns one pass adds into the tile: eight 16-row chunks of them stay in registers.
const COLUMNS_PER_PASS: usize = 8;

/// `exp(x)` on 16 lanes: [`crate::attention::fast_exp`]'s reduction and polynomial, `2^n` by
/// `vscalefps`. Inputs below -87 (and -inf) give 0; a NaN lane gives `exp(-87)`, as on 8
/// lanes.
///
/// # Safety
/// The CPU has AVX-512F (register operations only).
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn exp16(x: __m512) -> __m512 {
    let lo = _mm512_set1_ps(EXP_FLOOR);
    // `max(x, lo)` gives `lo` for a NaN `x`
    let xc = _mm512_max_ps(x, lo);
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(xc, _mm512_set1_ps(std::f32::consts::LOG2_E)),
    );
    let r = _mm512_fnmadd_ps(
        n,
        _mm512_set1_ps(LN2_LO),
        _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), xc),
    );
    let mut p = _mm512_set1_ps(EXP_TAYLOR[0]);
    for &c in &EXP_TAYLOR[1..] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    // zero where x < -87 (-inf included); NaN compares unordered and keeps its value
    let keep = _mm512_cmp_ps_mask::<_CMP_NLT_UQ>(x, lo);
    _mm512_maskz_mov_ps(keep, _mm512_scalef_ps(p, n))
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
/// scores of every head into `tile` (up to eight columns a pass, each 16-row chunk of
/// their codes converted and scaled once for all heads); then per head the 16 pages'
/// maxima, their exponentials' sums and logarithms as vectors of one page a lane
/// ([`reduce16`]), with no horizontal reduction per page.
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
    let wp = weights.as_ptr();
    // the tile: head h, page j of the block at (h PAGES_PER_BLOCK + j) stride
    let at = |h: usize, j: usize| (h * PAGES_PER_BLOCK + j) * stride;
    for b0 in (0..n_pages).step_by(PAGES_PER_BLOCK) {
        let nb = PAGES_PER_BLOCK.min(n_pages - b0);
        for j in 0..nb {
            let p = b0 + j;
            let start = p * page;
            let len = page.min(t - start);
            let full = len / 16 * 16;
            prefetch_ahead(columns, p, page, n_pages);
            for (pass, cols) in columns.chunks(COLUMNS_PER_PASS).enumerate() {
                let c0 = pass * COLUMNS_PER_PASS;
                let mut scale = [0.0f32; COLUMNS_PER_PASS];
                for (s, col) in scale.iter_mut().zip(cols) {
                    *s = col.scales[p * col.stride];
                }
                let tp = tile.as_mut_ptr();
                // SAFETY: rows start + i + 16 <= start + len <= t of every column; weights
                // h r + c0 + k < heads r; tile at(h, j) + i + 16 <= at(h, j) + stride <=
                // tile_len (i + 16 <= len <= stride, h < heads, j < PAGES_PER_BLOCK).
                let mut i = 0;
                while i < full {
                    let mut v = [_mm512_setzero_ps(); COLUMNS_PER_PASS];
                    for ((x, col), &s) in v.iter_mut().zip(cols).zip(&scale) {
                        let bytes = _mm_loadu_si128(col.codes.as_ptr().add(start + i).cast());
                        let codes = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes));
                        *x = _mm512_mul_ps(codes, _mm512_set1_ps(s));
                    }
                    for h in 0..heads {
                        let dst = tp.add(at(h, j) + i);
                        let mut acc = if pass == 0 {
                            _mm512_setzero_ps()
                        } else {
                            _mm512_loadu_ps(dst)
                        };
                        let w = wp.add(h * r + c0);
                        // a whole pass in a loop of constant length (no test per column)
                        if cols.len() == COLUMNS_PER_PASS {
                            for (k, x) in v.iter().enumerate() {
                                acc = _mm512_fmadd_ps(_mm512_set1_ps(*w.add(k)), *x, acc);
                            }
                        } else {
                            for (k, x) in v.iter().enumerate().take(cols.len()) {
                                acc = _mm512_fmadd_ps(_mm512_set1_ps(*w.add(k)), *x, acc);
                            }
                        }
                        _mm512_storeu_ps(dst, acc);
                    }
                    i += 16;
                }
                for i in full..len {
                    for h in 0..heads {
                        let o = at(h, j) + i;
                        let mut x = if pass == 0 { 0.0 } else { tile[o] };
                        for (k, col) in cols.iter().enumerate() {
                            x += weights[h * r + c0 + k] * (scale[k] * col.codes[start + i] as f32);
                        }
                        tile[o] = x;
                    }
                }
            }
            for h in 0..heads {
                tile[at(h, j) + len..at(h, j) + stride].fill(f32::NEG_INFINITY);
            }
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
                    *sum = _mm512_add_ps(*sum, exp16(x));
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
