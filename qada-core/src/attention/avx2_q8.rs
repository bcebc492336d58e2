//! The AVX2 kernels (with FMA and F16C) for q8_0 rows ([`Q8Block`]: `x_i ~ d q_i`): the row
//! product and update, and the GQA block kernels that read every row once for all the query
//! heads of a group.
//!
//! The block kernels convert each 32-quant block to f32 once per row for up to [`GROUP`]
//! heads and apply the block's scale once per block, never per value:
//! - scores: `s_{j,i} = scale * sum_b d_{i,b} (q_j[b] . q_{i,b})`, the 32 quants of block `b`
//!   of row `i` widened into four registers and multiplied into every head's query;
//! - accumulate: `acc_j += sum_i sum_b (w_{j,i} d_{i,b}) q_{i,b}`, the scale folded into the
//!   weight once per block and row (a table of `w d` for a block of rows), the quants widened
//!   once per row for every head.
//!
//! Every kernel is `unsafe` and `#[target_feature(enable = "avx2,fma,f16c")]`, takes the
//! [`Avx2`] token, and relies on the shapes [`crate::attention::Elem`] checks once per call.

use std::arch::x86_64::*;

use qada_stats::simd::prefetch_lines;
use qada_stats::simd::x86::hsum;
use qada_stats::simd::Avx2;
use qada_stats::{Q8Block, Q8_BLOCK};

/// Query heads served by one pass over the rows: a GQA group of up to 8 reads (and converts)
/// every row once; larger groups take one pass per 8 heads.
pub const GROUP: usize = 8;

/// Rows per block of the accumulate kernel: 64 q8 rows of d = 64 are 4.3 KiB, in L1 while the
/// columns are swept; the table of scaled weights is `GROUP x ROWS` f32 (2 KiB).
const ROWS: usize = 64;

/// Rows the scores kernel prefetches ahead.
const AHEAD: usize = 32;

/// The f16 scale of block `b` as f32, in every lane.
///
/// # Safety
/// The CPU has AVX2 and F16C; `b` points at a readable block.
#[inline(always)]
unsafe fn scale_of(b: *const Q8Block) -> __m256 {
    // SAFETY: `b` is readable by the contract; the conversion is a register operation.
    _mm256_cvtph_ps(_mm_set1_epi16((*b).d.to_bits() as i16))
}

/// The f16 scale of block `b` as one f32 (`vcvtph2ps`, not the software conversion).
///
/// # Safety
/// The CPU has F16C; `b` points at a readable block.
#[inline(always)]
unsafe fn scale_f32(b: *const Q8Block) -> f32 {
    // SAFETY: `b` is readable by the contract; the conversion is a register operation.
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from((*b).d.to_bits()))))
}

/// Quants `8 x .. 8 x + 8` of block `b`, widened to f32 (unscaled).
///
/// # Safety
/// The CPU has AVX2; `b` points at a readable block and `x < 4`.
#[inline(always)]
unsafe fn quants8(b: *const Q8Block, x: usize) -> __m256 {
    // SAFETY: `b` is readable and `8 x + 8 <= 32`, so the 8 bytes lie inside its quants; the
    // load is unaligned.
    let qs = std::ptr::addr_of!((*b).qs) as *const i8;
    let q = _mm_loadl_epi64(qs.add(8 * x) as *const __m128i);
    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))
}

/// The 32 quants of block `b`, widened to f32 (unscaled), in four registers.
///
/// # Safety
/// The CPU has AVX2; `b` points at a readable block.
#[inline(always)]
unsafe fn quants32(b: *const Q8Block) -> [__m256; 4] {
    // SAFETY: `b` is readable by the contract and every x < 4.
    [quants8(b, 0), quants8(b, 1), quants8(b, 2), quants8(b, 3)]
}

/// Values `i..i + 8` of the q8 blocks at `p` as f32: `d q`, the quants widened and scaled by
/// their block's f16 scale.
///
/// # Safety
/// The CPU has AVX2 and F16C; `i % 8 == 0` and block `i / 32` at `p` is readable (so the 8
/// quants lie inside it).
#[inline(always)]
unsafe fn load_q8(p: *const Q8Block, i: usize) -> __m256 {
    // SAFETY: block `i / 32` is readable by the contract and `(i % 32) / 8 < 4`.
    let b = p.add(i / Q8_BLOCK);
    _mm256_mul_ps(quants8(b, (i % Q8_BLOCK) / 8), scale_of(b))
}

/// Lane `j` of the result is the sum of the lanes of `v[j]`: eight horizontal sums in six
/// `hadd`s and one add.
///
/// # Safety
/// The CPU has AVX2 (register operations only).
#[inline(always)]
unsafe fn hsum8(v: &[__m256; 8]) -> __m256 {
    // hadd(a, b) = [a01 a23 b01 b23 | a45 a67 b45 b67]; twice gives the 4-lane halves of four
    // sums in each 128-bit lane, and the two lanes add up
    let lo4 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    let hi4 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    _mm256_add_ps(
        _mm256_permute2f128_ps(lo4, hi4, 0x20),
        _mm256_permute2f128_ps(lo4, hi4, 0x31),
    )
}

/// `q . row` for q8 blocks over the whole blocks both cover: `q` times `d q_i`, 8 lanes at a
/// time ([`crate::attention::Elem::dot`]).
///
/// # Safety
/// The CPU has AVX2, FMA and F16C (the token proves it). Any lengths: only the common whole
/// blocks are read.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q8(_: Avx2, q: &[f32], row: &[Q8Block]) -> f32 {
    let n = row.len().min(q.len() / Q8_BLOCK) * Q8_BLOCK;
    let (qp, rp) = (q.as_ptr(), row.as_ptr());
    let (mut a, mut b) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut i = 0;
    // SAFETY: i + 16 <= n <= q.len() and value i + 15 lies in block (i + 15) / 32 < row.len(),
    // i % 16 == 0: the loads read inside both slices.
    while i + 16 <= n {
        a = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(i)), load_q8(rp, i), a);
        b = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(i + 8)), load_q8(rp, i + 8), b);
        i += 16;
    }
    hsum(_mm256_add_ps(a, b))
}

/// `acc += w * row` for q8 blocks over the whole blocks both cover: `acc_i += w d q_i`
/// ([`crate::attention::Elem::axpy`]).
///
/// # Safety
/// The CPU has AVX2, FMA and F16C (the token proves it). Any lengths: only the common whole
/// blocks are touched.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn axpy_q8(_: Avx2, acc: &mut [f32], w: f32, row: &[Q8Block]) {
    let n = row.len().min(acc.len() / Q8_BLOCK) * Q8_BLOCK;
    let (ap, rp) = (acc.as_mut_ptr(), row.as_ptr());
    let wv = _mm256_set1_ps(w);
    let mut i = 0;
    // SAFETY: i + 8 <= n <= acc.len(), i % 8 == 0 and value i lies in block i / 32 <
    // row.len(): loads and stores stay inside both slices.
    while i + 8 <= n {
        let a = _mm256_loadu_ps(ap.add(i));
        _mm256_storeu_ps(ap.add(i), _mm256_fmadd_ps(wv, load_q8(rp, i), a));
        i += 8;
    }
}

/// [`crate::attention::Elem::block_scores`] for q8 rows: `out[j * n + i] = scale * sum_b
/// d_{i,b} (q_j[b] . q_{i,b})` for the `h = queries.len() / d` heads.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C (the token proves it); `d > 0`, `d % 32 == 0`, `queries`
/// holds whole rows of `d`, `keys` whole rows of `d / 32` blocks, and `out.len() >= h * n`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn block_scores_q8(
    _: Avx2,
    queries: &[f32],
    keys: &[Q8Block],
    d: usize,
    scale: f32,
    out: &mut [f32],
) {
    let (n, h) = (keys.len() * Q8_BLOCK / d, queries.len() / d);
    assert!(d > 0 && d.is_multiple_of(Q8_BLOCK) && out.len() >= h * n);
    // SAFETY: the assert gives scores_group its contract; each pass takes heads j0..j0 + H <= h.
    let mut j0 = 0;
    while j0 < h {
        let o = &mut *out;
        match h - j0 {
            1 => scores_group::<1>(queries, keys, d, scale, o, j0),
            2 => scores_group::<2>(queries, keys, d, scale, o, j0),
            3 => scores_group::<3>(queries, keys, d, scale, o, j0),
            4 => scores_group::<4>(queries, keys, d, scale, o, j0),
            5 => scores_group::<5>(queries, keys, d, scale, o, j0),
            6 => scores_group::<6>(queries, keys, d, scale, o, j0),
            7 => scores_group::<7>(queries, keys, d, scale, o, j0),
            _ => scores_group::<GROUP>(queries, keys, d, scale, o, j0),
        }
        j0 += GROUP;
    }
}

/// The scores of heads `j0..j0 + H` against every row: per row, per block, the quants widened
/// once into four registers, then for each head four products with its query and one
/// multiply-add of the block's scale into the head's accumulator; the `H` accumulators summed
/// horizontally together at the end of the row.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; the shapes of [`block_scores_q8`] and `j0 + H <= h`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scores_group<const H: usize>(
    queries: &[f32],
    keys: &[Q8Block],
    d: usize,
    scale: f32,
    out: &mut [f32],
    j0: usize,
) {
    let per_row = d / Q8_BLOCK;
    let n = keys.len() / per_row;
    let (q, k, o) = (queries.as_ptr(), keys.as_ptr(), out.as_mut_ptr());
    let sv = _mm256_set1_ps(scale);
    let row_bytes = per_row * std::mem::size_of::<Q8Block>();
    let mut lanes = [0.0f32; 8];
    // SAFETY: keys hold n rows of per_row blocks, so block i * per_row + b (i < n, b <
    // per_row) is readable; queries hold h rows of d and the loads read values
    // (j0 + j) * d + 32 b .. + 32 <= h * d; out holds h * n, so (j0 + j) * n + i < h * n.
    // Prefetch addresses are computed with wrapping_add and never read.
    for i in 0..n {
        // the rows AHEAD on are on their way from memory meanwhile (those within the rows: a
        // run of selected pages must not fetch the unselected page after it)
        if i + AHEAD < n {
            prefetch_lines(k.wrapping_add((i + AHEAD) * per_row).cast(), row_bytes);
        }
        let mut acc = [_mm256_setzero_ps(); GROUP];
        for b in 0..per_row {
            let blk = k.add(i * per_row + b);
            let x = quants32(blk);
            let dv = scale_of(blk);
            let qb = q.add(j0 * d + b * Q8_BLOCK);
            for (j, a) in acc.iter_mut().take(H).enumerate() {
                let qj = qb.add(j * d);
                let mut p = _mm256_mul_ps(_mm256_loadu_ps(qj), x[0]);
                p = _mm256_fmadd_ps(_mm256_loadu_ps(qj.add(8)), x[1], p);
                p = _mm256_fmadd_ps(_mm256_loadu_ps(qj.add(16)), x[2], p);
                p = _mm256_fmadd_ps(_mm256_loadu_ps(qj.add(24)), x[3], p);
                // the block's scale, once per block and head
                *a = _mm256_fmadd_ps(dv, p, *a);
            }
        }
        _mm256_storeu_ps(lanes.as_mut_ptr(), _mm256_mul_ps(sv, hsum8(&acc)));
        for (j, &s) in lanes.iter().take(H).enumerate() {
            *o.add((j0 + j) * n + i) = s;
        }
    }
}

/// [`crate::attention::Elem::block_accumulate`] for q8 rows: `acc_j += sum_i sum_b (w[j * n +
/// i] d_{i,b}) q_{i,b}` for the `h = acc.len() / d` heads.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C (the token proves it); `d > 0`, `d % 32 == 0`, `acc` holds
/// whole rows of `d`, `values` whole rows of `d / 32` blocks, and `weights.len() >= h * n`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn block_accumulate_q8(
    _: Avx2,
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

/// `acc[j0 + j] += sum_{i in r0..r1} w[j0 + j][i] v_i` for `j < H`, one block column at a
/// time: first the table `wd[j][i] = w[j0 + j][i] d_{i,b}` (the scale folded into the weight
/// once per block), then per 8 columns of the block the `H` accumulators in registers while
/// the rows are swept, each row's 8 quants widened once for all `H` heads.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; the shapes of [`block_accumulate_q8`], `r0 < r1 <= n`,
/// `r1 - r0 <= ROWS` and `j0 + H <= h`.
#[target_feature(enable = "avx2,fma,f16c")]
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
    // bounds; acc holds h rows of d, and the columns 32 b + 8 x + 8 <= d; ds and wd are
    // indexed by i - r0 < rows <= ROWS. Prefetch addresses are computed with wrapping_add and
    // never read.
    for b in 0..per_row {
        // the first pass over a block of rows fetches the next block's rows meanwhile
        let next = (b == 0 && j0 == 0).then(|| v.wrapping_add(ROWS * per_row) as *const i8);
        for (i, s) in (r0..r1).zip(ds.iter_mut()) {
            // within the rows only: a run of selected pages fetches no unselected one
            if let Some(p) = next.filter(|_| ROWS + i < n) {
                prefetch_lines(p.wrapping_add(i * row_bytes).cast(), row_bytes);
            }
            *s = scale_f32(v.add(i * per_row + b));
        }
        for (j, wj) in wd.iter_mut().enumerate() {
            let wrow = std::slice::from_raw_parts(w.add((j0 + j) * n + r0), rows);
            for ((t, &x), &s) in wj.iter_mut().zip(wrow).zip(&ds) {
                *t = x * s;
            }
        }
        for x in 0..Q8_BLOCK / 8 {
            let c = b * Q8_BLOCK + 8 * x;
            let mut t = [_mm256_setzero_ps(); H];
            for (j, tj) in t.iter_mut().enumerate() {
                *tj = _mm256_loadu_ps(a.add((j0 + j) * d + c));
            }
            for r in 0..rows {
                let qv = quants8(v.add((r0 + r) * per_row + b), x);
                for (tj, wj) in t.iter_mut().zip(&wd) {
                    *tj = _mm256_fmadd_ps(_mm256_broadcast_ss(wj.get_unchecked(r)), qv, *tj);
                }
            }
            for (j, tj) in t.iter().enumerate() {
                _mm256_storeu_ps(a.add((j0 + j) * d + c), *tj);
            }
        }
    }
}
