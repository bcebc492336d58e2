//! The AVX2 kernels (with FMA and F16C): `exp`, `max`, the f16 row products and the tiled GQA
//! block kernels for f32 and f16 rows (q8 rows: `super::avx2_q8`).
//!
//! Every kernel is `unsafe` and `#[target_feature(enable = "avx2,fma,f16c")]`, the features
//! of the workspace's one detection ([`qada_stats::simd::Avx2`]), and takes the token, so it
//! cannot be called without one. The safe entry points ([`super::exp_in_place`],
//! [`super::max_score`], [`super::Elem`]) check the lengths each kernel relies on, once per
//! call. The inner loops are tuned: restructure around them, do not rewrite them.

use std::arch::x86_64::*;

use qada_stats::f16;
use qada_stats::simd::prefetch_lines;
use qada_stats::simd::x86::{hsum, hsum4};
use qada_stats::simd::Avx2;
use qada_stats::ChannelColumn;

use super::column_tile::{finish_page, prefetch_ahead, tile_len, tile_stride, MAX_HEADS};
use super::exp_constants::{EXP2_TAYLOR, EXP_FLOOR, EXP_TAYLOR, LN2_HI, LN2_LO, LOGF};

/// `q . row` over the common prefix of `q` and `row` ([`crate::attention::Elem::dot`]).
///
/// # Safety
/// The CPU has AVX2, FMA and F16C (the token proves it). Any lengths: only the common
/// prefix is read.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot(_: Avx2, q: &[f32], row: &[f16]) -> f32 {
    let n = q.len().min(row.len());
    let mut acc = _mm256_setzero_ps();
    let mut i = 0;
    // SAFETY: every load reads elements i..i + 8 with i + 8 <= n <= both lengths.
    while i + 8 <= n {
        let k = _mm256_cvtph_ps(_mm_loadu_si128(row.as_ptr().add(i) as *const __m128i));
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(q.as_ptr().add(i)), k, acc);
        i += 8;
    }
    let mut total = hsum(acc);
    while i < n {
        total += q[i] * row[i].to_f32();
        i += 1;
    }
    total
}

/// `exp(x)` on 8 lanes: [`crate::attention::fast_exp`]'s reduction and polynomial with fused
/// multiply-adds. Inputs below -87 (and -inf) give 0; a NaN lane gives `exp(-87)`.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C (register operations only).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn exp8(x: __m256) -> __m256 {
    let lo = _mm256_set1_ps(EXP_FLOOR);
    let xc = _mm256_max_ps(x, lo);
    let n = _mm256_round_ps(
        _mm256_mul_ps(xc, _mm256_set1_ps(std::f32::consts::LOG2_E)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
    );
    let r = _mm256_fnmadd_ps(
        n,
        _mm256_set1_ps(LN2_LO),
        _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), xc),
    );
    let mut p = _mm256_set1_ps(EXP_TAYLOR[0]);
    for &c in &EXP_TAYLOR[1..] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    scale_by_pow2(p, n, x, lo)
}

/// `exp(x)` on 8 lanes for the page masses, cheaper than [`exp8`]: `x log2 e = n + f` with
/// `n` the nearest integer, `2^f` by [`EXP2_TAYLOR`] (relative error below `6e-6` with the
/// rounding of `x log2 e`), `2^n` into the exponent. Inputs below -87 (and -inf) give 0; a
/// NaN lane gives `exp(-87)`, as [`exp8`].
///
/// # Safety
/// The CPU has AVX2, FMA and F16C (register operations only).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn exp8_estimate(x: __m256) -> __m256 {
    let lo = _mm256_set1_ps(EXP_FLOOR);
    let t = _mm256_mul_ps(
        _mm256_max_ps(x, lo),
        _mm256_set1_ps(std::f32::consts::LOG2_E),
    );
    let n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    let f = _mm256_sub_ps(t, n);
    let mut p = _mm256_set1_ps(EXP2_TAYLOR[0]);
    for &c in &EXP2_TAYLOR[1..] {
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(c));
    }
    scale_by_pow2(p, n, x, lo)
}

/// The epilogue of [`exp8`] and [`exp8_estimate`]: `p 2^n` by adding `n` into the exponent
/// bits (`n` integral, `p` in `[0.5, 2]`), and 0 in the lanes where `x < lo` (-inf included).
///
/// # Safety
/// The CPU has AVX2, FMA and F16C (register operations only).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scale_by_pow2(p: __m256, n: __m256, x: __m256, lo: __m256) -> __m256 {
    let bits = _mm256_add_epi32(
        _mm256_castps_si256(p),
        _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23),
    );
    _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), _mm256_castsi256_ps(bits))
}

/// `ln(x)` on 8 lanes for finite `x >= 1` (sums of exponentials whose largest term is 1):
/// `x = 2^e m` with `m` in `[sqrt(1/2), sqrt 2)`, `ln x = e ln 2 + ln m`, `ln(1 + f)` by
/// Cephes' `logf` polynomial (relative error near 1e-7).
///
/// # Safety
/// The CPU has AVX2, FMA and F16C (register operations only).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn ln8(x: __m256) -> __m256 {
    let bits = _mm256_castps_si256(x);
    // x = 2^e m with m in [0.5, 1)
    let mut e = _mm256_cvtepi32_ps(_mm256_sub_epi32(
        _mm256_srli_epi32(bits, 23),
        _mm256_set1_epi32(126),
    ));
    let m = _mm256_castsi256_ps(_mm256_or_si256(
        _mm256_and_si256(bits, _mm256_set1_epi32(0x007f_ffff)),
        _mm256_set1_epi32(0x3f00_0000),
    ));
    // m below sqrt(1/2): 2 m - 1 and e - 1; else m - 1
    let small = _mm256_cmp_ps(
        m,
        _mm256_set1_ps(std::f32::consts::FRAC_1_SQRT_2),
        _CMP_LT_OQ,
    );
    let one = _mm256_set1_ps(1.0);
    e = _mm256_sub_ps(e, _mm256_and_ps(small, one));
    let f = _mm256_sub_ps(_mm256_add_ps(m, _mm256_and_ps(small, m)), one);
    let z = _mm256_mul_ps(f, f);
    let mut y = _mm256_set1_ps(LOGF[0]);
    for &c in &LOGF[1..] {
        y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(c));
    }
    y = _mm256_mul_ps(_mm256_mul_ps(y, f), z);
    y = _mm256_fmadd_ps(e, _mm256_set1_ps(LN2_LO), y);
    y = _mm256_fnmadd_ps(_mm256_set1_ps(0.5), z, y);
    _mm256_fmadd_ps(e, _mm256_set1_ps(LN2_HI), _mm256_add_ps(f, y))
}

/// [`crate::attention::exp_in_place`] on 8 lanes.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C (the token proves it). Any length of `s`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn exp_in_place(_: Avx2, s: &mut [f32], m: f32) -> f32 {
    let mv = _mm256_set1_ps(m);
    let (mut sum0, mut sum1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    // SAFETY: loads and stores at p + i .. p + i + 16 (or + 8) happen only while that end is
    // at most n = s.len(); the tail goes through a padded stack array.
    let p = s.as_mut_ptr();
    let n = s.len();
    let mut i = 0;
    while i + 16 <= n {
        let a = exp8(_mm256_sub_ps(_mm256_loadu_ps(p.add(i)), mv));
        let b = exp8(_mm256_sub_ps(_mm256_loadu_ps(p.add(i + 8)), mv));
        _mm256_storeu_ps(p.add(i), a);
        _mm256_storeu_ps(p.add(i + 8), b);
        sum0 = _mm256_add_ps(sum0, a);
        sum1 = _mm256_add_ps(sum1, b);
        i += 16;
    }
    if i + 8 <= n {
        let a = exp8(_mm256_sub_ps(_mm256_loadu_ps(p.add(i)), mv));
        _mm256_storeu_ps(p.add(i), a);
        sum0 = _mm256_add_ps(sum0, a);
        i += 8;
    }
    let mut total = hsum(_mm256_add_ps(sum0, sum1));
    if i < n {
        // the tail through a padded vector, so every element sees the same arithmetic
        let mut t = [f32::NEG_INFINITY; 8];
        t[..n - i].copy_from_slice(&s[i..]);
        let a = exp8(_mm256_sub_ps(_mm256_loadu_ps(t.as_ptr()), mv));
        _mm256_storeu_ps(t.as_mut_ptr(), a);
        s[i..].copy_from_slice(&t[..n - i]);
        total += t[..n - i].iter().sum::<f32>();
    }
    total
}

/// [`crate::attention::sum_exp`] on 8 lanes: `exp(s_i - m)` by [`exp8`], each 8 values
/// widened to f64 and summed in two f64 registers of 4 lanes; `s` is not written.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C (the token proves it). Any length of `s`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn sum_exp(_: Avx2, s: &[f32], m: f32) -> f64 {
    let mv = _mm256_set1_ps(m);
    let (mut lo, mut hi) = (_mm256_setzero_pd(), _mm256_setzero_pd());
    let mut add = |x: __m256| {
        let e = exp8(_mm256_sub_ps(x, mv));
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    };
    let mut chunks = s.chunks_exact(8);
    // SAFETY: each chunk holds exactly 8 f32.
    for c in &mut chunks {
        add(_mm256_loadu_ps(c.as_ptr()));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        // the tail through a padded vector (-inf gives 0), so every value sees one arithmetic
        let mut t = [f32::NEG_INFINITY; 8];
        t[..rest.len()].copy_from_slice(rest);
        // SAFETY: `t` holds 8 f32.
        add(_mm256_loadu_ps(t.as_ptr()));
    }
    let mut lanes = [0.0f64; 4];
    // SAFETY: `lanes` holds 4 f64.
    _mm256_storeu_pd(lanes.as_mut_ptr(), _mm256_add_pd(lo, hi));
    (lanes[0] + lanes[1]) + (lanes[2] + lanes[3])
}

/// [`crate::attention::max_score`] on 8 lanes.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C (the token proves it). Any length of `s`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn max_score(_: Avx2, s: &[f32], init: f32) -> f32 {
    // `_mm256_max_ps(x, acc)` returns `acc` when `x` is NaN, so NaN scores are skipped
    let (mut a, mut b) = (_mm256_set1_ps(init), _mm256_set1_ps(init));
    let mut chunks = s.chunks_exact(16);
    // SAFETY: each chunk holds exactly 16 f32: the loads at 0 and 8 read inside it.
    for c in &mut chunks {
        a = _mm256_max_ps(_mm256_loadu_ps(c.as_ptr()), a);
        b = _mm256_max_ps(_mm256_loadu_ps(c.as_ptr().add(8)), b);
    }
    let mut lanes = [0.0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), _mm256_max_ps(a, b));
    let m = lanes.iter().fold(init, |x, &y| x.max(y));
    chunks.remainder().iter().fold(m, |x, &y| x.max(y))
}

/// Eight f16 at `p + i` widened to f32.
///
/// # Safety
/// `p + i` points at 8 readable f16 (the callers' bounds: see their `// SAFETY:` comments).
#[inline(always)]
unsafe fn load_f16(p: *const f16, i: usize) -> __m256 {
    // SAFETY: 16 bytes at `p + i` are readable by the contract; the load is unaligned.
    _mm256_cvtph_ps(_mm_loadu_si128(p.add(i) as *const __m128i))
}

/// Eight f32 at `p + i`.
///
/// # Safety
/// `p + i` points at 8 readable f32.
#[inline(always)]
unsafe fn load_f32(p: *const f32, i: usize) -> __m256 {
    // SAFETY: 32 bytes at `p + i` are readable by the contract; the load is unaligned.
    _mm256_loadu_ps(p.add(i))
}

/// The tiled block kernels for one element type. Scores: tiles of 4 rows x `H <= 3` heads
/// in 12 register accumulators, each 8-wide key chunk loaded once for the tile, four
/// horizontal sums at a time. Accumulate: blocks of [`ROWS`] rows (in L1 after the first
/// pass) swept per 16 columns with the `H x 16` accumulators in registers, so `acc` is
/// loaded and stored once per block instead of once per row.
///
/// `$load(p, i)` gives values `i..i + 8` of the rows at `p` as f32.
macro_rules! block_kernels {
    ($elem:ty, $load:ident, $feat:literal, $scores:ident, $accumulate:ident) => {
        /// [`crate::attention::Elem::block_scores`] (`d % 8 == 0`, `d % VALUES == 0`,
        /// `out.len() >= h * n`).
        ///
        /// # Safety
        /// The CPU has the target features; shapes as above.
        #[target_feature(enable = $feat)]
        pub unsafe fn $scores(
            _: Avx2,
            queries: &[f32],
            keys: &[$elem],
            d: usize,
            scale: f32,
            out: &mut [f32],
        ) {
            let (n, h) = (keys.len() / d, queries.len() / d);
            assert!(d % 8 == 0 && out.len() >= h * n);
            // SAFETY: the assert gives scores_tile its contract; each tile takes heads
            // j0..j0 + H <= h.
            let mut j0 = 0;
            while j0 < h {
                match h - j0 {
                    1 => scores_tile::<1>(queries, keys, d, scale, out, j0),
                    2 => scores_tile::<2>(queries, keys, d, scale, out, j0),
                    _ => scores_tile::<3>(queries, keys, d, scale, out, j0),
                }
                j0 += 3;
            }

            #[target_feature(enable = $feat)]
            unsafe fn scores_tile<const H: usize>(
                queries: &[f32],
                keys: &[$elem],
                d: usize,
                scale: f32,
                out: &mut [f32],
                j0: usize,
            ) {
                let n = keys.len() / d;
                let (q, k, o) = (queries.as_ptr(), keys.as_ptr(), out.as_mut_ptr());
                let sv = _mm_set1_ps(scale);
                let mut i = 0;
                // SAFETY: keys hold n rows of d values (d % 8 == 0) and queries h rows, so the loads
                // at rows i..i + 4 < n (or i < n), heads j0 + j < h and columns c + 8 <= d
                // are in bounds; out holds h * n, so (j0 + j) * n + i + 4 <= h * n. Prefetches
                // stay within the rows (i + 36 <= n): a run of selected pages must not fetch
                // the unselected page after it.
                while i + 4 <= n {
                    let mut acc = [[_mm256_setzero_ps(); 4]; H];
                    // the rows 32 ahead are on their way from memory meanwhile
                    if i + 36 <= n {
                        let ahead = k.add((i + 32) * d).cast::<u8>();
                        prefetch_lines(ahead, 4 * d * std::mem::size_of::<$elem>());
                    }
                    let mut c = 0;
                    while c < d {
                        let kr = [
                            $load(k, i * d + c),
                            $load(k, (i + 1) * d + c),
                            $load(k, (i + 2) * d + c),
                            $load(k, (i + 3) * d + c),
                        ];
                        for (j, a) in acc.iter_mut().enumerate() {
                            let qv = _mm256_loadu_ps(q.add((j0 + j) * d + c));
                            for r in 0..4 {
                                a[r] = _mm256_fmadd_ps(qv, kr[r], a[r]);
                            }
                        }
                        c += 8;
                    }
                    for (j, a) in acc.iter().enumerate() {
                        _mm_storeu_ps(o.add((j0 + j) * n + i), _mm_mul_ps(sv, hsum4(a)));
                    }
                    i += 4;
                }
                while i < n {
                    for j in 0..H {
                        let mut a = _mm256_setzero_ps();
                        let mut c = 0;
                        while c < d {
                            let qv = _mm256_loadu_ps(q.add((j0 + j) * d + c));
                            a = _mm256_fmadd_ps(qv, $load(k, i * d + c), a);
                            c += 8;
                        }
                        *o.add((j0 + j) * n + i) = scale * hsum(a);
                    }
                    i += 1;
                }
            }
        }

        /// [`crate::attention::Elem::block_accumulate`] (`d % 8 == 0`, `d % VALUES == 0`,
        /// `weights.len() >= h * n`).
        ///
        /// # Safety
        /// The CPU has the target features; shapes as above.
        #[target_feature(enable = $feat)]
        pub unsafe fn $accumulate(
            _: Avx2,
            acc: &mut [f32],
            weights: &[f32],
            values: &[$elem],
            d: usize,
        ) {
            let (n, h) = (values.len() / d, acc.len() / d);
            assert!(d % 8 == 0 && weights.len() >= h * n);
            // SAFETY: the assert gives acc_columns its contract; rows r0..r1 <= n and heads
            // j0..j0 + H <= h.
            let mut r0 = 0;
            while r0 < n {
                let r1 = (r0 + ROWS).min(n);
                let mut j0 = 0;
                while j0 < h {
                    let rows = (r0, r1);
                    match h - j0 {
                        1 => acc_columns::<1>(acc, weights, values, d, rows, j0),
                        2 => acc_columns::<2>(acc, weights, values, d, rows, j0),
                        _ => acc_columns::<3>(acc, weights, values, d, rows, j0),
                    }
                    j0 += 3;
                }
                r0 = r1;
            }

            /// [`acc_tile`] over every column: 16 at a time, then 8 where `d % 16 == 8`.
            #[target_feature(enable = $feat)]
            unsafe fn acc_columns<const H: usize>(
                acc: &mut [f32],
                weights: &[f32],
                values: &[$elem],
                d: usize,
                rows: (usize, usize),
                j0: usize,
            ) {
                // SAFETY: each tile's columns c..c + 16 (or + 8 at the end) stay within d.
                let mut c = 0;
                while c + 16 <= d {
                    acc_tile::<H, 2>(acc, weights, values, d, rows, j0, c);
                    c += 16;
                }
                if c < d {
                    acc_tile::<H, 1>(acc, weights, values, d, rows, j0, c);
                }
            }

            /// `acc[j0 + j][c .. c + 8 W] += sum_{i in rows} w[j0 + j][i] v_i[c .. c + 8 W]`.
            #[target_feature(enable = $feat)]
            unsafe fn acc_tile<const H: usize, const W: usize>(
                acc: &mut [f32],
                weights: &[f32],
                values: &[$elem],
                d: usize,
                (r0, r1): (usize, usize),
                j0: usize,
                c: usize,
            ) {
                let n = values.len() / d;
                // SAFETY: acc holds h rows of d and values n rows of d values;
                // the tile covers heads
                // j0 + j < h, rows r0..r1 <= n and columns c..c + 8 W <= d (acc_columns keeps
                // c + 8 W within d, d % 8 == 0); weights hold h * n, so (j0 + j) * n + i is in
                // bounds. Prefetch addresses are computed with wrapping_add and never read.
                let (a, w, v) = (acc.as_mut_ptr(), weights.as_ptr(), values.as_ptr());
                let mut t = [[_mm256_setzero_ps(); W]; H];
                for (j, tj) in t.iter_mut().enumerate() {
                    for (x, tx) in tj.iter_mut().enumerate() {
                        *tx = _mm256_loadu_ps(a.add((j0 + j) * d + c + 8 * x));
                    }
                }
                // the first sweep of a block fetches the next block's rows meanwhile
                let next = if j0 == 0 && c == 0 {
                    Some(v.wrapping_add(ROWS * d) as *const i8)
                } else {
                    None
                };
                let row_bytes = d * std::mem::size_of::<$elem>();
                for i in r0..r1 {
                    // within the rows only: a run of selected pages fetches no unselected one
                    if let Some(p) = next.filter(|_| ROWS + i < n) {
                        prefetch_lines(p.wrapping_add(i * row_bytes).cast(), row_bytes);
                    }
                    let mut vr = [_mm256_setzero_ps(); W];
                    for (x, vx) in vr.iter_mut().enumerate() {
                        *vx = $load(v, i * d + c + 8 * x);
                    }
                    for (j, tj) in t.iter_mut().enumerate() {
                        let wv = _mm256_broadcast_ss(&*w.add((j0 + j) * n + i));
                        for (tx, &vx) in tj.iter_mut().zip(&vr) {
                            *tx = _mm256_fmadd_ps(wv, vx, *tx);
                        }
                    }
                }
                for (j, tj) in t.iter().enumerate() {
                    for (x, tx) in tj.iter().enumerate() {
                        _mm256_storeu_ps(a.add((j0 + j) * d + c + 8 * x), *tx);
                    }
                }
            }
        }
    };
}

/// Rows per block of the accumulate kernels: 64 f16 rows of d = 64 are 8 KiB, in L1 while
/// the columns are swept.
const ROWS: usize = 64;

block_kernels!(
    f16,
    load_f16,
    "avx2,fma,f16c",
    block_scores,
    block_accumulate
);
block_kernels!(
    f32,
    load_f32,
    "avx2,fma,f16c",
    block_scores_f32,
    block_accumulate_f32
);
/// `acc += w * row` over the common prefix ([`crate::attention::Elem::axpy`]).
///
/// # Safety
/// The CPU has AVX2, FMA and F16C (the token proves it). Any lengths: only the common
/// prefix is touched.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn axpy(_: Avx2, acc: &mut [f32], w: f32, row: &[f16]) {
    // SAFETY: the loads and stores below touch elements i..i + 8 with i + 8 <= n, the common
    // length of `acc` and `row`.
    let n = acc.len().min(row.len());
    let wv = _mm256_set1_ps(w);
    let mut i = 0;
    while i + 8 <= n {
        let v = _mm256_cvtph_ps(_mm_loadu_si128(row.as_ptr().add(i) as *const __m128i));
        let a = _mm256_loadu_ps(acc.as_ptr().add(i));
        _mm256_storeu_ps(acc.as_mut_ptr().add(i), _mm256_fmadd_ps(wv, v, a));
        i += 8;
    }
    while i < n {
        acc[i] += w * row[i].to_f32();
        i += 1;
    }
}

/// Pages one block of [`column_page_masses`] scores before their maxima and sums are
/// reduced together: one page per lane.
const PAGES_PER_BLOCK: usize = 8;

/// Reduce 8 vectors to one whose lane `j` is `op` over the 8 lanes of `v[j]` (a transposing
/// tree: pairs within 128-bit lanes, then across them), 21 operations for 8 horizontal
/// reductions. Every output lane combines values of its own input vector only.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C (register operations only).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn reduce8(v: &[__m256; 8], op: impl Fn(__m256, __m256) -> __m256) -> __m256 {
    // four vectors to one: lane (k, i) holds vector i's value over 128-bit lane k
    let four = |a: __m256, b: __m256, c: __m256, d: __m256| {
        let ab = op(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
        let cd = op(_mm256_unpacklo_ps(c, d), _mm256_unpackhi_ps(c, d));
        op(
            _mm256_shuffle_ps::<0x44>(ab, cd),
            _mm256_shuffle_ps::<0xee>(ab, cd),
        )
    };
    let u0 = four(v[0], v[1], v[2], v[3]);
    let u1 = four(v[4], v[5], v[6], v[7]);
    // the two 128-bit halves of each: vectors 0..4 in the low half, 4..8 in the high one
    op(
        _mm256_permute2f128_ps::<0x20>(u0, u1),
        _mm256_permute2f128_ps::<0x31>(u0, u1),
    )
}

/// [`crate::attention::column_page_masses`] on 8 lanes, in blocks of 8 pages: each page's
/// scores of every head into `tile` ([`score_heads`]: every column's 16-row chunk of codes
/// converted and scaled once per block of 4 heads, the block's sums kept in registers over
/// all the columns; the codes and scales of a later page prefetched, [`prefetch_ahead`]);
/// then per head the 8 pages' maxima, their exponentials' sums and logarithms as vectors of
/// one page a lane ([`reduce8`]), so that the pages' exponentials overlap and no page waits
/// on a horizontal reduction of its own.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C (the token proves it); `columns` is not empty and every
/// column holds at least `t` codes and `ceil(t / page)` scales; `weights.len()` is a
/// multiple of `columns.len()` (`heads <= MAX_HEADS` rows); `out` holds
/// `heads x ceil(t / page)` values; `page >= 1`; `tile` holds
/// [`tile_len`]`(heads, page)` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn column_page_masses(
    _: Avx2,
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
    debug_assert!(tile.len() >= tile_len(heads, page) && out.len() >= heads * n_pages);
    debug_assert!(stride.is_multiple_of(8) && heads <= MAX_HEADS);
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
            // the scores of every head into the tile: heads in blocks of up to 4 and rows two
            // chunks of 8 at a time, so that each block's 8 accumulators are independent
            // chains held in registers over all the columns (the sums are taken column by
            // column in order, as the portable loop takes them)
            // SAFETY: rows start + i + 8 NC <= start + len <= t of every column, and the
            // tile's values at(h, j) + i + 8 NC <= at(h, j) + stride <= tile_len (i + 8 NC
            // <= len <= stride, h < heads, j < PAGES_PER_BLOCK): the contract of
            // `score_heads` with `to` at at(0, j) + i and heads head_stride apart.
            let mut i = 0;
            while i + 16 <= len {
                let to = tile.as_mut_ptr().add(at(0, j) + i);
                score_heads::<2>(columns, weights, p, start + i, to, head_stride);
                i += 16;
            }
            if i + 8 <= len {
                let to = tile.as_mut_ptr().add(at(0, j) + i);
                score_heads::<1>(columns, weights, p, start + i, to, head_stride);
                i += 8;
            }
            finish_page(columns, weights, p, start, (i, len, stride), tile, |h| {
                at(h, j)
            });
        }
        for h in 0..heads {
            let rp = tile.as_ptr();
            // SAFETY: the loads read at(h, j) + i + 8 <= at(h, j) + stride <= tile_len for
            // the block's pages j < nb (the others are not read).
            let mut v = [_mm256_set1_ps(f32::NEG_INFINITY); PAGES_PER_BLOCK];
            for (j, top) in v.iter_mut().enumerate().take(nb) {
                let mut i = 0;
                while i < stride {
                    // NaN skipped: `max_ps(x, acc)` returns `acc` when `x` is NaN
                    *top = _mm256_max_ps(_mm256_loadu_ps(rp.add(at(h, j) + i)), *top);
                    i += 8;
                }
            }
            let mut tops = [0.0f32; PAGES_PER_BLOCK];
            _mm256_storeu_ps(tops.as_mut_ptr(), reduce8(&v, |a, b| _mm256_max_ps(a, b)));
            for (j, sum) in v.iter_mut().enumerate() {
                *sum = _mm256_setzero_ps();
                if j >= nb || tops[j] == f32::NEG_INFINITY {
                    continue;
                }
                let mv = _mm256_broadcast_ss(&tops[j]);
                let mut i = 0;
                while i < stride {
                    let x = _mm256_sub_ps(_mm256_loadu_ps(rp.add(at(h, j) + i)), mv);
                    *sum = _mm256_add_ps(*sum, exp8_estimate(x));
                    i += 8;
                }
            }
            // at least the largest score's exp(0) = 1 (and 1 where no score is finite, which
            // adds ln 1 = 0)
            let sums = _mm256_max_ps(reduce8(&v, |a, b| _mm256_add_ps(a, b)), _mm256_set1_ps(1.0));
            for j in 0..nb {
                if tops[j] == f32::NEG_INFINITY {
                    // no finite score: NaN if one is NaN, else -inf
                    let row = &tile[at(h, j)..at(h, j) + page.min(t - (b0 + j) * page)];
                    tops[j] = row.iter().copied().find(|x| x.is_nan()).unwrap_or(tops[j]);
                }
            }
            let lse = _mm256_add_ps(_mm256_loadu_ps(tops.as_ptr()), ln8(sums));
            let mut o = [0.0f32; PAGES_PER_BLOCK];
            _mm256_storeu_ps(o.as_mut_ptr(), lse);
            out[h * n_pages + b0..h * n_pages + b0 + nb].copy_from_slice(&o[..nb]);
        }
    }
}

/// Rows `row..row + 8 NC` of every head's scores `sum_c w_hc (s_cp c_ic)` into
/// `to[h stride..]`: heads in blocks of up to 4, each block's `4 NC` accumulators held in
/// registers over all the columns (independent chains, so that the fused multiply-adds
/// overlap instead of waiting on each other), each chunk of codes converted once a block.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; every column holds codes `row..row + 8 NC` and the scale
/// of page `p`; `weights` is `heads x columns.len()`; `to` is valid for writes of
/// `(heads - 1) stride + 8 NC` values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn score_heads<const NC: usize>(
    columns: &[ChannelColumn<'_>],
    weights: &[f32],
    p: usize,
    row: usize,
    to: *mut f32,
    stride: usize,
) {
    let r = columns.len();
    let heads = weights.len() / r;
    let mut h0 = 0;
    while heads - h0 >= 4 {
        score_block::<4, NC>(columns, weights, h0, p, row, to, stride);
        h0 += 4;
    }
    match heads - h0 {
        3 => score_block::<3, NC>(columns, weights, h0, p, row, to, stride),
        2 => score_block::<2, NC>(columns, weights, h0, p, row, to, stride),
        1 => score_block::<1, NC>(columns, weights, h0, p, row, to, stride),
        _ => {}
    }
}

/// [`score_heads`] for the `NH` heads from `h0` (the same contract).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
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
    let mut acc = [[_mm256_setzero_ps(); NC]; NH];
    for (c, col) in columns.iter().enumerate() {
        // SAFETY: codes row + 8 n + 8 <= row + 8 NC and the scale of page p exist (the
        // caller's contract); weights (h0 + k) r + c < heads r.
        let scale = _mm256_broadcast_ss(col.scales.get_unchecked(p * col.stride));
        let mut x = [_mm256_setzero_ps(); NC];
        for (n, chunk) in x.iter_mut().enumerate() {
            let bytes = _mm_loadl_epi64(col.codes.as_ptr().add(row + 8 * n).cast());
            *chunk = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)), scale);
        }
        for (k, acc) in acc.iter_mut().enumerate() {
            let wv = _mm256_broadcast_ss(&*w.add(k * r + c));
            for (a, chunk) in acc.iter_mut().zip(&x) {
                *a = _mm256_fmadd_ps(wv, *chunk, *a);
            }
        }
    }
    for (k, acc) in acc.iter().enumerate() {
        for (n, a) in acc.iter().enumerate() {
            // SAFETY: (h0 + k) stride + 8 n + 8 <= (heads - 1) stride + 8 NC.
            _mm256_storeu_ps(to.add((h0 + k) * stride + 8 * n), *a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `exp8_estimate` of 8 lanes through memory.
    fn estimate(x: [f32; 8]) -> [f32; 8] {
        let mut y = [0.0f32; 8];
        // SAFETY: the token proves the features; `x` and `y` hold 8 f32 each.
        unsafe { _mm256_storeu_ps(y.as_mut_ptr(), exp8_estimate(_mm256_loadu_ps(x.as_ptr()))) };
        y
    }

    #[test]
    fn the_estimate_exp_is_within_6e_6_relative_and_flushes_below_the_floor() {
        if Avx2::detect().is_none() {
            return;
        }
        let worst = crate::attention::exp_constants::worst_relative_error(estimate);
        assert!(worst < 6e-6, "worst relative error {worst}");
        let special = estimate([f32::NEG_INFINITY, -87.5, -1e30, 0.0, 1.0, -1.0, 0.5, -0.5]);
        assert_eq!(&special[..4], &[0.0, 0.0, 0.0, 1.0]);
    }
}
