//! The GQA accumulate kernel on 16 lanes: [`crate::attention::Elem::block_accumulate`] for f16
//! and f32 rows with `d % 16 == 0`, the AVX2 kernel's tiling (`avx2.rs`) with each load,
//! conversion and FMA covering 16 columns: blocks of [`ROWS`] rows swept per 32 columns with
//! the `H x 32` accumulators in registers.
//!
//! Each output value is the same chain of FMAs over the same rows in the same order as on
//! AVX2 (a column's lane does not see its neighbours), so the results are the AVX2 kernel's
//! bits. The scores are left to the AVX2 kernel: on 16 lanes their sums would be taken in
//! another order, and int8 activations amplify such last-bit differences (the logits of
//! `tests/quantized_path.rs` moved from 1.42 to 1.63 against the f32 path).
//!
//! Every kernel is `unsafe` and `#[target_feature(enable = "avx512f,avx2,fma,f16c")]`, the
//! features an [`Avx512`] token proves, and takes the token; the safe entry points
//! (`elem.rs`) check the shapes first.

use std::arch::x86_64::*;

use qada_stats::f16;
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

/// Rows per block of the accumulate kernels: 64 f16 rows of d = 64 are 8 KiB, in L1 while
/// the columns are swept.
const ROWS: usize = 64;

/// The accumulate kernel for one element type, as `avx2.rs`'s `block_kernels!` on 16 lanes.
/// `$load(p, i)` gives values `i..i + 16` of the rows at `p` as f32.
macro_rules! block_kernels {
    ($elem:ty, $load:ident, $accumulate:ident) => {
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

block_kernels!(f16, load_f16, block_accumulate);
block_kernels!(f32, load_f32, block_accumulate_f32);
