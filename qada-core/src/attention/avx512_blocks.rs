//! The GQA block kernels on 16 lanes: [`crate::attention::Elem::block_scores`] and
//! [`crate::attention::Elem::block_accumulate`] for f16 and f32 rows with `d % 16 == 0`, the
//! AVX2 kernels' tiling (`avx2.rs`) with each load, conversion and FMA covering 16 values.
//!
//! Scores: tiles of 4 rows x `H <= 3` heads in 12 accumulators, each 16-wide chunk of a key
//! row loaded (and converted from f16) once for the tile; a tile's four sums per head are
//! halved to 8 lanes and summed four at a time. Accumulate: blocks of [`ROWS`] rows swept per
//! 32 columns with the `H x 32` accumulators in registers. Half the instructions of the AVX2
//! kernels for the same work: where a core runs 512-bit FMAs at full width that is twice the
//! arithmetic, where it splits them (Zen 4) it is fewer instructions to issue.
//!
//! Every kernel is `unsafe` and `#[target_feature(enable = "avx512f,avx2,fma,f16c")]`, the
//! features an [`Avx512`] token proves, and takes the token; the safe entry points
//! (`elem.rs`) check the shapes first.

use std::arch::x86_64::*;

use qada_stats::f16;
use qada_stats::simd::x86::hsum4;
use qada_stats::simd::Avx512;

/// Sixteen f16 at `p + i` as f32.
///
/// # Safety
/// AVX-512F; `p + i` points at 16 readable f16.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn load_f16(p: *const f16, i: usize) -> __m512 {
    // SAFETY: 32 bytes at `p + i` are readable by the contract; the load is unaligned.
    _mm512_cvtph_ps(_mm256_loadu_si256(p.add(i) as *const __m256i))
}

/// Sixteen f32 at `p + i`.
///
/// # Safety
/// AVX-512F; `p + i` points at 16 readable f32.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn load_f32(p: *const f32, i: usize) -> __m512 {
    // SAFETY: 64 bytes at `p + i` are readable by the contract; the load is unaligned.
    _mm512_loadu_ps(p.add(i))
}

/// The 16 lanes of `v` added pairwise into 8 (lane `i` plus lane `i + 8`).
///
/// # Safety
/// AVX-512F (register operations only).
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn halve(v: __m512) -> __m256 {
    _mm256_add_ps(
        _mm512_castps512_ps256(v),
        _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v))),
    )
}

/// Rows per block of the accumulate kernels: 64 f16 rows of d = 64 are 8 KiB, in L1 while
/// the columns are swept.
const ROWS: usize = 64;

/// The tiled block kernels for one element type, as `avx2.rs`'s `block_kernels!` on 16 lanes.
/// `$load(p, i)` gives values `i..i + 16` of the rows at `p` as f32.
macro_rules! block_kernels {
    ($elem:ty, $load:ident, $scores:ident, $accumulate:ident) => {
        /// [`crate::attention::Elem::block_scores`] (`d % 16 == 0`, `out.len() >= h * n`).
        ///
        /// # Safety
        /// The CPU has AVX-512F, AVX2, FMA and F16C; shapes as above.
        #[target_feature(enable = "avx512f,avx2,fma,f16c")]
        pub unsafe fn $scores(
            _: Avx512,
            queries: &[f32],
            keys: &[$elem],
            d: usize,
            scale: f32,
            out: &mut [f32],
        ) {
            let (n, h) = (keys.len() / d, queries.len() / d);
            assert!(d % 16 == 0 && out.len() >= h * n);
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

            #[target_feature(enable = "avx512f,avx2,fma,f16c")]
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
                // SAFETY: keys hold n rows of d values (d % 16 == 0) and queries h rows, so
                // the loads at rows i..i + 4 < n (or i < n), heads j0 + j < h and columns
                // c + 16 <= d are in bounds; out holds h * n, so (j0 + j) * n + i + 4 <= h * n.
                // Prefetches may point past the end: they never fault and are computed with
                // wrapping_add.
                while i + 4 <= n {
                    let mut acc = [[_mm512_setzero_ps(); 4]; H];
                    // the rows 32 ahead are on their way from memory meanwhile
                    let ahead = k.wrapping_add((i + 32) * d) as *const i8;
                    for line in (0..4 * d * std::mem::size_of::<$elem>()).step_by(64) {
                        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line));
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
                            let qv = _mm512_loadu_ps(q.add((j0 + j) * d + c));
                            for r in 0..4 {
                                a[r] = _mm512_fmadd_ps(qv, kr[r], a[r]);
                            }
                        }
                        c += 16;
                    }
                    for (j, a) in acc.iter().enumerate() {
                        let eight = [halve(a[0]), halve(a[1]), halve(a[2]), halve(a[3])];
                        _mm_storeu_ps(o.add((j0 + j) * n + i), _mm_mul_ps(sv, hsum4(&eight)));
                    }
                    i += 4;
                }
                while i < n {
                    for j in 0..H {
                        let mut a = _mm512_setzero_ps();
                        let mut c = 0;
                        while c < d {
                            let qv = _mm512_loadu_ps(q.add((j0 + j) * d + c));
                            a = _mm512_fmadd_ps(qv, $load(k, i * d + c), a);
                            c += 16;
                        }
                        *o.add((j0 + j) * n + i) = scale * _mm512_reduce_add_ps(a);
                    }
                    i += 1;
                }
            }
        }

        /// [`crate::attention::Elem::block_accumulate`] (`d % 16 == 0`,
        /// `weights.len() >= h * n`).
        ///
        /// # Safety
        /// The CPU has AVX-512F, AVX2, FMA and F16C; shapes as above.
        #[target_feature(enable = "avx512f,avx2,fma,f16c")]
        pub unsafe fn $accumulate(
            _: Avx512,
            acc: &mut [f32],
            weights: &[f32],
            values: &[$elem],
            d: usize,
        ) {
            let (n, h) = (values.len() / d, acc.len() / d);
            assert!(d % 16 == 0 && weights.len() >= h * n);
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

            /// [`acc_tile`] over every column: 32 at a time, then 16 where `d % 32 == 16`.
            #[target_feature(enable = "avx512f,avx2,fma,f16c")]
            unsafe fn acc_columns<const H: usize>(
                acc: &mut [f32],
                weights: &[f32],
                values: &[$elem],
                d: usize,
                rows: (usize, usize),
                j0: usize,
            ) {
                // SAFETY: each tile's columns c..c + 32 (or + 16 at the end) stay within d.
                let mut c = 0;
                while c + 32 <= d {
                    acc_tile::<H, 2>(acc, weights, values, d, rows, j0, c);
                    c += 32;
                }
                if c < d {
                    acc_tile::<H, 1>(acc, weights, values, d, rows, j0, c);
                }
            }

            /// `acc[j0 + j][c .. c + 16 W] += sum_{i in rows} w[j0 + j][i] v_i[c .. c + 16 W]`.
            #[target_feature(enable = "avx512f,avx2,fma,f16c")]
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
                // SAFETY: acc holds h rows of d and values n rows of d values; the tile
                // covers heads j0 + j < h, rows r0..r1 <= n and columns c..c + 16 W <= d
                // (acc_columns keeps c + 16 W within d, d % 16 == 0); weights hold h * n, so
                // (j0 + j) * n + i is in bounds. Prefetch addresses are computed with
                // wrapping_add and never read.
                let (a, w, v) = (acc.as_mut_ptr(), weights.as_ptr(), values.as_ptr());
                let mut t = [[_mm512_setzero_ps(); W]; H];
                for (j, tj) in t.iter_mut().enumerate() {
                    for (x, tx) in tj.iter_mut().enumerate() {
                        *tx = _mm512_loadu_ps(a.add((j0 + j) * d + c + 16 * x));
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
                    if let Some(p) = next {
                        for line in (0..row_bytes).step_by(64) {
                            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(i * row_bytes + line));
                        }
                    }
                    let mut vr = [_mm512_setzero_ps(); W];
                    for (x, vx) in vr.iter_mut().enumerate() {
                        *vx = $load(v, i * d + c + 16 * x);
                    }
                    for (j, tj) in t.iter_mut().enumerate() {
                        let wv = _mm512_set1_ps(*w.add((j0 + j) * n + i));
                        for (tx, &vx) in tj.iter_mut().zip(&vr) {
                            *tx = _mm512_fmadd_ps(wv, vx, *tx);
                        }
                    }
                }
                for (j, tj) in t.iter().enumerate() {
                    for (x, tx) in tj.iter().enumerate() {
                        _mm512_storeu_ps(a.add((j0 + j) * d + c + 16 * x), *tx);
                    }
                }
            }
        }
    };
}

block_kernels!(f16, load_f16, block_scores, block_accumulate);
block_kernels!(f32, load_f32, block_scores_f32, block_accumulate_f32);
