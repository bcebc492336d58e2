//! The AVX-512 kernels: [`column_page_masses`] on 16 lanes, with its `exp` and `ln`.
//!
//! Every kernel is `unsafe` and `#[target_feature(enable = "avx512f,avx2,fma,f16c")]`, the
//! features an [`Avx512`] token proves, and takes the token. The safe entry point
//! ([`crate::attention::column_page_masses`]) checks the shapes first.

use std::arch::x86_64::*;

use qada_stats::simd::Avx512;
use qada_stats::ChannelColumn;

use super::column_tile::{tile_stride, MAX_HEADS};
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

/// [`crate::attention::column_page_masses`] on 16 lanes: per page, the scores of every head
/// into `tile` (up to eight columns a pass, each 16-row chunk of their codes converted and
/// scaled once for all heads), then each head's maximum and exponentials in the tile, and
/// the logarithms 16 pages at a time.
///
/// # Safety
/// The CPU has AVX-512F, AVX2, FMA and F16C (the token proves it); `columns` is not empty and
/// every column holds at least `t` codes and `ceil(t / page)` scales; `weights.len()` is a
/// multiple of `columns.len()` (`heads <= MAX_HEADS` rows); `out` holds
/// `heads x ceil(t / page)` values; `page >= 1`; `tile` holds `heads x tile_stride(page)`
/// values.
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
    debug_assert!(tile.len() >= heads * stride && out.len() >= heads * n_pages);
    let (tp, wp) = (tile.as_mut_ptr(), weights.as_ptr());
    // per head, the largest score and the sum of exponentials of the last (up to) 16 pages
    let mut pending = [([0.0f32; 16], [1.0f32; 16]); MAX_HEADS];
    for p in 0..n_pages {
        let start = p * page;
        let len = page.min(t - start);
        let full = len / 16 * 16;
        for (pass, cols) in columns.chunks(COLUMNS_PER_PASS).enumerate() {
            let c0 = pass * COLUMNS_PER_PASS;
            let mut scale = [0.0f32; COLUMNS_PER_PASS];
            for (s, col) in scale.iter_mut().zip(cols) {
                *s = col.scales[p * col.stride];
            }
            // SAFETY: rows start + i + 16 <= start + len <= t of every column; weights
            // h r + c0 + k < heads r; tile h stride + i + 16 <= heads stride (i + 16 <= len
            // <= stride).
            let mut i = 0;
            while i < full {
                let mut v = [_mm512_setzero_ps(); COLUMNS_PER_PASS];
                for ((x, col), &s) in v.iter_mut().zip(cols).zip(&scale) {
                    let bytes = _mm_loadu_si128(col.codes.as_ptr().add(start + i).cast());
                    let codes = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes));
                    *x = _mm512_mul_ps(codes, _mm512_set1_ps(s));
                }
                for h in 0..heads {
                    let dst = tp.add(h * stride + i);
                    let mut acc = if pass == 0 {
                        _mm512_setzero_ps()
                    } else {
                        _mm512_loadu_ps(dst)
                    };
                    for (k, x) in v.iter().enumerate().take(cols.len()) {
                        let w = _mm512_set1_ps(*wp.add(h * r + c0 + k));
                        acc = _mm512_fmadd_ps(w, *x, acc);
                    }
                    _mm512_storeu_ps(dst, acc);
                }
                i += 16;
            }
            for i in full..len {
                for h in 0..heads {
                    let mut x = if pass == 0 { 0.0 } else { tile[h * stride + i] };
                    for (k, col) in cols.iter().enumerate() {
                        x += weights[h * r + c0 + k] * (scale[k] * col.codes[start + i] as f32);
                    }
                    tile[h * stride + i] = x;
                }
            }
        }
        let lane = p % 16;
        for h in 0..heads {
            let row = &mut tile[h * stride..(h + 1) * stride];
            row[len..].fill(f32::NEG_INFINITY);
            // SAFETY: the loads read row[i..i + 16] with i + 16 <= stride = row.len().
            let rp = row.as_ptr();
            let mut top = _mm512_set1_ps(f32::NEG_INFINITY);
            let mut i = 0;
            while i < stride {
                // NaN skipped: `max_ps(x, acc)` returns `acc` when `x` is NaN
                top = _mm512_max_ps(_mm512_loadu_ps(rp.add(i)), top);
                i += 16;
            }
            let m = _mm512_reduce_max_ps(top);
            let (tops, sums) = &mut pending[h];
            if m == f32::NEG_INFINITY {
                // no finite score: NaN if one is NaN, else -inf (a sum of 1 adds ln 1 = 0)
                tops[lane] = row[..len].iter().copied().find(|x| x.is_nan()).unwrap_or(m);
                sums[lane] = 1.0;
            } else {
                let mv = _mm512_set1_ps(m);
                let mut sum = _mm512_setzero_ps();
                let mut i = 0;
                while i < stride {
                    let x = _mm512_sub_ps(_mm512_loadu_ps(rp.add(i)), mv);
                    sum = _mm512_add_ps(sum, exp16(x));
                    i += 16;
                }
                tops[lane] = m;
                // at least the largest score's exp(0) = 1
                sums[lane] = _mm512_reduce_add_ps(sum).max(1.0);
            }
        }
        if lane == 15 || p + 1 == n_pages {
            let p0 = p - lane;
            for (h, (tops, sums)) in pending.iter().enumerate().take(heads) {
                let mut v = [0.0f32; 16];
                let lse = _mm512_add_ps(
                    _mm512_loadu_ps(tops.as_ptr()),
                    ln16(_mm512_loadu_ps(sums.as_ptr())),
                );
                _mm512_storeu_ps(v.as_mut_ptr(), lse);
                out[h * n_pages + p0..=h * n_pages + p].copy_from_slice(&v[..=lane]);
            }
        }
    }
}
