//! The GQA accumulate kernel for q8_0 rows on 16 lanes:
//! [`crate::attention::Elem::block_accumulate`] for [`Q8Block`] rows, `avx2_q8`'s tiling with
//! each widening and FMA covering 16 columns, so that one sweep of a block of rows serves a
//! whole 32-quant block column (two registers a head) where AVX2 sweeps four times:
//!
//! `acc_j += sum_i sum_b (w_{j,i} d_{i,b}) q_{i,b}`, the scale folded into the weight once per
//! block and row (the table of `w d`), the 32 quants of a row's block widened once for every
//! head.
//!
//! Each output value is the same chain of FMAs over the same rows in the same order as in the
//! AVX2 kernel, with the same table of `w d` (a column's lane does not see its neighbours), so
//! the results are the AVX2 kernel's bits (tested in `q8_props`). The scores stay with the
//! AVX2 kernel, as for f16 (`avx512_blocks`).
//!
//! Every kernel is `unsafe` and `#[target_feature(enable = "avx512f,avx2,fma,f16c")]`, the
//! features an [`Avx512`] token proves, and takes the token; the safe entry point (`elem.rs`)
//! checks the shapes first.

use std::arch::x86_64::*;

use qada_stats::simd::Avx512;
use qada_stats::{Q8Block, Q8_BLOCK};

/// Query heads served by one sweep of the rows: 8 heads of two registers each are 16 of the
/// 32 registers, beside the two of quants.
const GROUP: usize = 8;

/// Rows per block: 64 q8 rows of d = 64 are 4.3 KiB, in L1 while the block columns are swept;
/// the table of scaled weights is `GROUP x ROWS` f32 (2 KiB).
const ROWS: usize = 64;

/// Quants `16 x .. 16 x + 16` of block `b`, widened to f32 (unscaled).
///
/// # Safety
/// The CPU has AVX-512F; `b` points at a readable block and `x < 2`.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn quants16(b: *const Q8Block, x: usize) -> __m512 {
    // SAFETY: `b` is readable and `16 x + 16 <= 32`, so the 16 bytes lie inside its quants;
    // the load is unaligned.
    let qs = std::ptr::addr_of!((*b).qs) as *const i8;
    let q = _mm_loadu_si128(qs.add(16 * x) as *const __m128i);
    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q))
}

/// [`crate::attention::Elem::block_accumulate`] for q8 rows: `acc_j += sum_i sum_b (w[j * n +
/// i] d_{i,b}) q_{i,b}` for the `h = acc.len() / d` heads.
///
/// # Safety
/// The CPU has AVX-512F, AVX2, FMA and F16C (the token proves it); `d > 0`, `d % 32 == 0`,
/// `acc` holds whole rows of `d`, `values` whole rows of `d / 32` blocks, and
/// `weights.len() >= h * n`.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn block_accumulate_q8(
    _: Avx512,
    acc: &mut [f32],
    weights: &[f32],
    values: &[Q8Block],
    d: usize,
) {
    let (n, h) = (values.len() * Q8_BLOCK / d, acc.len() / d);
    assert!(d > 0 && d.is_multiple_of(Q8_BLOCK) && weights.len() >= h * n);
    // SAFETY: the assert gives acc_group its contract; rows r0..r1 <= n and heads
    // j0..j0 + H <= h.
    let mut r0 = 0;
    while r0 < n {
        let r1 = (r0 + ROWS).min(n);
        let mut j0 = 0;
        while j0 < h {
            let (a, rows) = (&mut *acc, (r0, r1));
            match h - j0 {
                1 => acc_group::<1>(a, weights, values, d, rows, j0),
                2 => acc_group::<2>(a, weights, values, d, rows, j0),
                3 => acc_group::<3>(a, weights, values, d, rows, j0),
                4 => acc_group::<4>(a, weights, values, d, rows, j0),
                5 => acc_group::<5>(a, weights, values, d, rows, j0),
                6 => acc_group::<6>(a, weights, values, d, rows, j0),
                7 => acc_group::<7>(a, weights, values, d, rows, j0),
                _ => acc_group::<GROUP>(a, weights, values, d, rows, j0),
            }
            j0 += GROUP;
        }
        r0 = r1;
    }
}

/// `acc[j0 + j] += sum_{i in r0..r1} w[j0 + j][i] v_i` for `j < H`, one block column of 32 at
/// a time: first the table `wd[j][i] = w[j0 + j][i] d_{i,b}`, then the `H x 2` accumulators in
/// registers while the rows are swept, each row's 32 quants widened once for all `H` heads.
///
/// # Safety
/// The CPU has AVX-512F, AVX2, FMA and F16C; the shapes of [`block_accumulate_q8`],
/// `r0 < r1 <= n`, `r1 - r0 <= ROWS` and `j0 + H <= h`.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn acc_group<const H: usize>(
    acc: &mut [f32],
    weights: &[f32],
    values: &[Q8Block],
    d: usize,
    (r0, r1): (usize, usize),
    j0: usize,
) {
    let per_row = d / Q8_BLOCK;
    let n = values.len() / per_row;
    let (a, w, v) = (acc.as_mut_ptr(), weights.as_ptr(), values.as_ptr());
    let rows = r1 - r0;
    let row_bytes = per_row * std::mem::size_of::<Q8Block>();
    let mut ds = [0.0f32; ROWS];
    let mut wd = [[0.0f32; ROWS]; H];
    // SAFETY: values hold n rows of per_row blocks, so block i * per_row + b (i < r1 <= n,
    // b < per_row) is readable; weights hold h * n, so (j0 + j) * n + i (j < H, i < n) is in
    // bounds; acc holds h rows of d, and the columns 32 b + 16 x + 16 <= d; ds and wd are
    // indexed by i - r0 < rows <= ROWS. Prefetch addresses are computed with wrapping_add and
    // never read.
    for b in 0..per_row {
        // the first pass over a block of rows fetches the next block's rows meanwhile
        let next = (b == 0 && j0 == 0).then(|| v.wrapping_add(ROWS * per_row) as *const i8);
        for (i, s) in (r0..r1).zip(ds.iter_mut()) {
            if let Some(p) = next {
                for line in (0..row_bytes).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(i * row_bytes + line));
                }
            }
            *s = (*v.add(i * per_row + b)).d.to_f32();
        }
        for (j, wj) in wd.iter_mut().enumerate() {
            let wrow = std::slice::from_raw_parts(w.add((j0 + j) * n + r0), rows);
            for ((t, &x), &s) in wj.iter_mut().zip(wrow).zip(&ds) {
                *t = x * s;
            }
        }
        let c = b * Q8_BLOCK;
        let mut t = [[_mm512_setzero_ps(); 2]; H];
        for (j, tj) in t.iter_mut().enumerate() {
            for (x, tx) in tj.iter_mut().enumerate() {
                *tx = _mm512_loadu_ps(a.add((j0 + j) * d + c + 16 * x));
            }
        }
        for r in 0..rows {
            let blk = v.add((r0 + r) * per_row + b);
            let qv = [quants16(blk, 0), quants16(blk, 1)];
            for (tj, wj) in t.iter_mut().zip(&wd) {
                let wv = _mm512_set1_ps(*wj.get_unchecked(r));
                for (tx, &q) in tj.iter_mut().zip(&qv) {
                    *tx = _mm512_fmadd_ps(wv, q, *tx);
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
