//! The GQA block kernels on 16 lanes: [`crate::attention::Elem::block_scores`] (`d % 8 == 0`)
//! and [`crate::attention::Elem::block_accumulate`] (`d % 16 == 0`) for f16 and f32 rows.
//! Every key or value row is read and converted once for up to [`HEADS`] query heads (a whole
//! Qwen2.5 group of 7), where AVX2's 16 registers hold tiles of 3 heads and convert each row
//! once per tile.
//!
//! Both give the AVX2 kernels' bits (`avx2.rs`):
//! - Scores: a zmm holds two key rows' 8-wide chunks side by side, so each lane runs the same
//!   chain of FMAs over the same chunks as its AVX2 lane, and the horizontal sums take
//!   `hsum4`'s tree (adjacent pairs, then pairs of pairs, then the two 128-bit halves) for
//!   rows in whole fours and `hsum`'s for the rest, as AVX2 does. Decoding's bits stay those
//!   of AVX2 hosts: a different summation order moves int8 paths' logits by rounding noise
//!   amplified (`tests/quantized_path.rs`).
//! - Accumulate: blocks of [`ROWS`] rows swept per 32 columns with the `H x 32` accumulators in
//!   registers; each output value is the same chain of FMAs over the same rows in the same
//!   order as on AVX2 (a column's lane does not see its neighbours).
//!
//! Every kernel is `unsafe` and `#[target_feature(enable = "avx512f,avx2,fma,f16c")]`, the
//! features an [`Avx512`] token proves, and takes the token; the safe entry points
//! (`elem.rs`) check the shapes first.

use std::arch::x86_64::*;

use qada_stats::f16;
use qada_stats::simd::prefetch_lines;
use qada_stats::simd::x86::hsum;
use qada_stats::simd::Avx512;

/// Query heads per tile: `2 H` accumulators of a four-row score tile (or of a 32-column
/// accumulate tile), two key (or value) registers and a query (or weight) register fit in
/// AVX-512's 32.
pub const HEADS: usize = 7;

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

/// Eight f16 at `p + i` as f32.
///
/// # Safety
/// AVX-512F; `p + i` points at 8 readable f16.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn load8_f16(p: *const f16, i: usize) -> __m256 {
    // SAFETY: 16 bytes at `p + i` are readable by the contract; the load is unaligned.
    _mm256_cvtph_ps(_mm_loadu_si128(p.add(i) as *const __m128i))
}

/// Eight f32 at `p + i`.
///
/// # Safety
/// AVX-512F; `p + i` points at 8 readable f32.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn load8_f32(p: *const f32, i: usize) -> __m256 {
    // SAFETY: 32 bytes at `p + i` are readable by the contract; the load is unaligned.
    _mm256_loadu_ps(p.add(i))
}

/// Eight f16 at `p + i` in lanes 0-7 and eight at `p + k` in lanes 8-15, as f32.
///
/// # Safety
/// AVX-512F; `p + i` and `p + k` each point at 8 readable f16.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn pair_f16(p: *const f16, i: usize, k: usize) -> __m512 {
    // SAFETY: 16 bytes at `p + i` and at `p + k` are readable by the contract; unaligned loads.
    let lo = _mm_loadu_si128(p.add(i) as *const __m128i);
    let hi = _mm_loadu_si128(p.add(k) as *const __m128i);
    _mm512_cvtph_ps(_mm256_inserti128_si256::<1>(_mm256_castsi128_si256(lo), hi))
}

/// Eight f32 at `p + i` in lanes 0-7 and eight at `p + k` in lanes 8-15.
///
/// # Safety
/// AVX-512F; `p + i` and `p + k` each point at 8 readable f32.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn pair_f32(p: *const f32, i: usize, k: usize) -> __m512 {
    // SAFETY: 32 bytes at `p + i` and at `p + k` are readable by the contract; unaligned loads.
    let lo = _mm256_castps_pd(_mm256_loadu_ps(p.add(i)));
    let hi = _mm256_castps_pd(_mm256_loadu_ps(p.add(k)));
    _mm512_castpd_ps(_mm512_insertf64x4::<1>(_mm512_castpd256_pd512(lo), hi))
}

/// `_mm256_hadd_ps` on each 256-bit half: per 128-bit block `[x0 + x1, x2 + x3, y0 + y1,
/// y2 + y3]`, the same sums (addition commutes bit for bit).
///
/// # Safety
/// AVX-512F.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn hadd(x: __m512, y: __m512) -> __m512 {
    // SAFETY: register operations only; the CPU features are the caller's proof.
    _mm512_add_ps(
        _mm512_shuffle_ps::<0b10_00_10_00>(x, y),
        _mm512_shuffle_ps::<0b11_01_11_01>(x, y),
    )
}

/// The scaled sums of four rows for two heads, `hsum4`'s tree: `a` and `b` hold the heads'
/// 8-lane accumulators of rows `0 | 1` and `2 | 3`. Lanes 0-3 are head a's rows 0-3, lanes
/// 4-7 head b's.
///
/// # Safety
/// AVX-512F.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn sums_of_two_heads(a: [__m512; 2], b: [__m512; 2], scale: __m512) -> __m256 {
    // SAFETY: register operations only; the CPU features are the caller's proof.
    // blocks: [a0 01, a0 23, a2 01, a2 23 | a0 45, a0 67, .. | a1 01, .. | a1 45, ..]
    let t = hadd(hadd(a[0], a[1]), hadd(b[0], b[1]));
    // blocks 0 and 2 (1 and 3 the same): [a0, a2, b0, b2], [a1, a3, b1, b3]
    let t = _mm512_add_ps(t, _mm512_shuffle_f32x4::<0b10_11_00_01>(t, t));
    let order = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 0, 0, 0, 0, 0, 0, 0, 0);
    _mm512_castps512_ps256(_mm512_mul_ps(scale, _mm512_permutexvar_ps(order, t)))
}

/// Rows per block of the accumulate kernels: 64 f16 rows of d = 64 are 8 KiB, in L1 while
/// the columns are swept.
const ROWS: usize = 64;

/// The block kernels for one element type, as `avx2.rs`'s `block_kernels!` on 16 lanes.
/// `$load(p, i)` gives values `i..i + 16` of the rows at `p` as f32, `$load8(p, i)` values
/// `i..i + 8`, and `$pair(p, i, k)` values `i..i + 8` and `k..k + 8` side by side.
macro_rules! block_kernels {
    ($elem:ty, $load:ident, $load8:ident, $pair:ident, $scores:ident, $accumulate:ident) => {
        /// [`crate::attention::Elem::block_scores`] (`d % 8 == 0`, `out.len() >= h * n`),
        /// with the AVX2 kernel's bits.
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
            assert!(d % 8 == 0 && out.len() >= h * n);
            // SAFETY: the assert gives scores_tile its contract; each tile takes heads
            // j0..j0 + H <= h.
            let mut j0 = 0;
            while j0 < h {
                match h - j0 {
                    1 => scores_tile::<1>(queries, keys, d, scale, out, j0),
                    2 => scores_tile::<2>(queries, keys, d, scale, out, j0),
                    3 => scores_tile::<3>(queries, keys, d, scale, out, j0),
                    4 => scores_tile::<4>(queries, keys, d, scale, out, j0),
                    5 => scores_tile::<5>(queries, keys, d, scale, out, j0),
                    6 => scores_tile::<6>(queries, keys, d, scale, out, j0),
                    _ => scores_tile::<HEADS>(queries, keys, d, scale, out, j0),
                }
                j0 += HEADS;
            }

            /// Heads `j0..j0 + H` against every row: four rows at a time (two per register),
            /// then one.
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
                let sv = _mm512_set1_ps(scale);
                let mut i = 0;
                // SAFETY: keys hold n rows of d values (d % 8 == 0) and queries h rows, so the
                // loads at rows i..i + 4 <= n (or i < n), heads j0 + j < h and columns
                // c + 8 <= d are in bounds; out holds h * n, so (j0 + j) * n + i + 4 <= h * n.
                // Prefetches stay within the rows: they never fault, and a run of selected
                // pages must not fetch the unselected page after it.
                while i + 4 <= n {
                    let mut acc = [[_mm512_setzero_ps(); 2]; H];
                    // the rows 32 ahead are on their way from memory meanwhile (as on AVX2)
                    if i + 36 <= n {
                        let ahead = k.add((i + 32) * d).cast::<u8>();
                        prefetch_lines(ahead, 4 * d * std::mem::size_of::<$elem>());
                    }
                    let mut c = 0;
                    while c < d {
                        let kr = [
                            $pair(k, i * d + c, (i + 1) * d + c),
                            $pair(k, (i + 2) * d + c, (i + 3) * d + c),
                        ];
                        for (j, a) in acc.iter_mut().enumerate() {
                            let qv = _mm256_castps_pd(_mm256_loadu_ps(q.add((j0 + j) * d + c)));
                            let qv = _mm512_castpd_ps(_mm512_broadcast_f64x4(qv));
                            a[0] = _mm512_fmadd_ps(qv, kr[0], a[0]);
                            a[1] = _mm512_fmadd_ps(qv, kr[1], a[1]);
                        }
                        c += 8;
                    }
                    let mut j = 0;
                    while j < H {
                        let b = acc[(j + 1).min(H - 1)];
                        let s = sums_of_two_heads(acc[j], b, sv);
                        _mm_storeu_ps(o.add((j0 + j) * n + i), _mm256_castps256_ps128(s));
                        if j + 1 < H {
                            let s = _mm256_extractf128_ps::<1>(s);
                            _mm_storeu_ps(o.add((j0 + j + 1) * n + i), s);
                        }
                        j += 2;
                    }
                    i += 4;
                }
                while i < n {
                    for j in 0..H {
                        let mut a = _mm256_setzero_ps();
                        let mut c = 0;
                        while c < d {
                            let qv = _mm256_loadu_ps(q.add((j0 + j) * d + c));
                            a = _mm256_fmadd_ps(qv, $load8(k, i * d + c), a);
                            c += 8;
                        }
                        *o.add((j0 + j) * n + i) = scale * hsum(a);
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
                        3 => acc_columns::<3>(acc, weights, values, d, rows, j0),
                        4 => acc_columns::<4>(acc, weights, values, d, rows, j0),
                        5 => acc_columns::<5>(acc, weights, values, d, rows, j0),
                        6 => acc_columns::<6>(acc, weights, values, d, rows, j0),
                        _ => acc_columns::<HEADS>(acc, weights, values, d, rows, j0),
                    }
                    j0 += HEADS;
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
                // the first sweep of a block fetches the next block's rows meanwhile (those
                // within the rows: a run of selected pages must not fetch unselected ones)
                let next = if j0 == 0 && c == 0 {
                    Some(v.wrapping_add(ROWS * d) as *const i8)
                } else {
                    None
                };
                let row_bytes = d * std::mem::size_of::<$elem>();
                for i in r0..r1 {
                    if let Some(p) = next.filter(|_| ROWS + i < n) {
                        prefetch_lines(p.wrapping_add(i * row_bytes).cast(), row_bytes);
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

block_kernels!(
    f16,
    load_f16,
    load8_f16,
    pair_f16,
    block_scores,
    block_accumulate
);
block_kernels!(
    f32,
    load_f32,
    load8_f32,
    pair_f32,
    block_scores_f32,
    block_accumulate_f32
);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use qada_stats::simd::Avx2;

    /// [`super::super::test_noise::noise`] rounded to f16, so f16 and f32 rows hold the same
    /// numbers; their products still carry enough bits that a changed summation order shows.
    fn noise(n: usize, seed: u64) -> Vec<f32> {
        let v = super::super::test_noise::noise(n, seed);
        v.iter().map(|&x| f16::from_f32(x).to_f32()).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Both kernels give the AVX2 kernels' bits, for f16 and f32 rows: every head count
        /// (tiles of 7 and their remainders, an odd last head), row counts with and without a
        /// tail of one to three, and `d` in chunks of 8 (scores) or 16 (accumulate).
        #[test]
        fn block_kernels_give_the_avx2_bits(
            h in 1usize..16,
            n in 1usize..150,
            chunks in 1usize..18,
            seed in any::<u64>(),
        ) {
            let (Some(t), Some(t2)) = (Avx512::detect(), Avx2::detect()) else {
                eprintln!("skipped: no AVX-512 here (or QADA_NO_AVX512 set)");
                return Ok(());
            };
            let d = 8 * chunks;
            let (q, rows) = (noise(h * d, seed), noise(n * d, seed ^ 1));
            let rows16: Vec<f16> = rows.iter().map(|&x| f16::from_f32(x)).collect();
            let scale = 0.180_336_9;
            let mut s = [vec![f32::NAN; h * n], vec![f32::NAN; h * n]];
            // SAFETY: the tokens prove the features; q holds h rows of d, rows n, out h * n,
            // and d % 8 == 0.
            unsafe {
                block_scores(t, &q, &rows16, d, scale, &mut s[0]);
                crate::attention::avx2::block_scores(t2, &q, &rows16, d, scale, &mut s[1]);
            }
            prop_assert_eq!(bits(&s[0]), bits(&s[1]), "f16 scores");
            // SAFETY: as above, f32 rows.
            unsafe {
                block_scores_f32(t, &q, &rows, d, scale, &mut s[0]);
                crate::attention::avx2::block_scores_f32(t2, &q, &rows, d, scale, &mut s[1]);
            }
            prop_assert_eq!(bits(&s[0]), bits(&s[1]), "f32 scores");
            if d % 16 == 0 {
                let w = noise(h * n, seed ^ 2);
                let acc0 = noise(h * d, seed ^ 3);
                let mut acc = [acc0.clone(), acc0.clone()];
                // SAFETY: the tokens prove the features; acc holds h rows of d, values n,
                // weights h * n, and d % 16 == 0.
                unsafe {
                    block_accumulate(t, &mut acc[0], &w, &rows16, d);
                    crate::attention::avx2::block_accumulate(t2, &mut acc[1], &w, &rows16, d);
                }
                prop_assert_eq!(bits(&acc[0]), bits(&acc[1]), "f16 accumulate");
                let mut acc = [acc0.clone(), acc0];
                // SAFETY: as above, f32 rows.
                unsafe {
                    block_accumulate_f32(t, &mut acc[0], &w, &rows, d);
                    crate::attention::avx2::block_accumulate_f32(t2, &mut acc[1], &w, &rows, d);
                }
                prop_assert_eq!(bits(&acc[0]), bits(&acc[1]), "f32 accumulate");
            }
        }
    }

    fn bits(x: &[f32]) -> Vec<u32> {
        x.iter().map(|v| v.to_bits()).collect()
    }
}
