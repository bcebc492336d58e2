//! Softmax attention for one head over borrowed key/value slices.
//!
//! `o = softmax(s) V` with `s_i = scale * q . k_i`, computed as
//! `o = sum_i exp(s_i - m) v_i / sum_i exp(s_i - m)` with `m = max_i s_i`, so scores of any
//! magnitude give finite results. Scores may come in several segments (sink, bulk, window):
//! the softmax runs over their union without concatenating anything.

use qada_stats::{f16, KeyDistribution, Rows};

use crate::{CoreError, Result};

/// One KV head's keys and values split into the three index sets of QAdA, all borrowed (f32
/// or f16 rows, as the cache stores them).
#[derive(Clone, Copy, Debug)]
pub struct KvSegments<'a> {
    /// Row length `d`.
    pub dim: usize,
    /// First `T_sink` keys.
    pub sink_keys: Rows<'a>,
    /// Values of the sink.
    pub sink_values: Rows<'a>,
    /// Keys between sink and window.
    pub bulk_keys: Rows<'a>,
    /// Values of the bulk.
    pub bulk_values: Rows<'a>,
    /// The most recent `T_local - T_sink` keys.
    pub window_keys: Rows<'a>,
    /// Values of the window.
    pub window_values: Rows<'a>,
    /// Moments of the bulk keys (as the cache keeps them: full, or factored when fixed).
    pub bulk_moments: &'a dyn KeyDistribution,
}

impl KvSegments<'_> {
    /// `|I|`: sink plus window positions.
    pub fn local_len(&self) -> usize {
        (self.sink_keys.len() + self.window_keys.len()) / self.dim.max(1)
    }
    /// `T_bulk`.
    pub fn bulk_len(&self) -> usize {
        self.bulk_keys.len() / self.dim.max(1)
    }
    /// `T`.
    pub fn len(&self) -> usize {
        self.local_len() + self.bulk_len()
    }
    /// True when no position is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Check that every slice is a whole number of rows and keys match values.
    pub fn validate(&self) -> Result<()> {
        let d = self.dim;
        let pairs = [
            ("sink", self.sink_keys, self.sink_values),
            ("bulk", self.bulk_keys, self.bulk_values),
            ("window", self.window_keys, self.window_values),
        ];
        for (what, k, v) in pairs {
            if d == 0 || k.len() % d != 0 || k.len() != v.len() || k.elem_bytes() != v.elem_bytes()
            {
                return Err(CoreError::DimensionMismatch {
                    what: match what {
                        "sink" => "sink keys / values",
                        "bulk" => "bulk keys / values",
                        _ => "window keys / values",
                    },
                    expected: k.len(),
                    found: v.len(),
                });
            }
        }
        if self.bulk_moments.dim() != d {
            return Err(CoreError::DimensionMismatch {
                what: "bulk moments",
                expected: d,
                found: self.bulk_moments.dim(),
            });
        }
        Ok(())
    }
}

/// `a . b` in f32 with eight independent accumulators (vectorizes).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; 8];
    let chunks = n / 8;
    for c in 0..chunks {
        let (x, y) = (&a[c * 8..c * 8 + 8], &b[c * 8..c * 8 + 8]);
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s = 0.0;
    for i in chunks * 8..n {
        s += a[i] * b[i];
    }
    s + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

/// `exp(x)` in f32 without a library call, so that loops over scores vectorize.
///
/// Cody-Waite reduction: `n = round(x / ln 2)`, `r = x - n ln2_hi - n ln2_lo` (so `|r| <= ln 2 / 2`
/// without cancellation), `exp(x) = 2^n exp(r)` with `exp(r)` by its degree-7 Taylor polynomial.
/// Relative error below 3e-7. Inputs below -87 give 0 (the result would be subnormal); callers
/// subtract the maximum score, so inputs are at most 0.
#[inline(always)]
pub fn fast_exp(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
                                     // branch-free so that loops over it vectorize: clamp, compute, then select
    let xc = x.max(EXP_FLOOR);
    let n = (xc * std::f32::consts::LOG2_E + MAGIC) - MAGIC;
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    let p = EXP_TAYLOR[1..]
        .iter()
        .fold(EXP_TAYLOR[0], |p, &c| p * r + c);
    let v = f32::from_bits((p.to_bits() as i32).wrapping_add((n as i32) << 23) as u32);
    if x < EXP_FLOOR {
        0.0
    } else {
        v
    }
}

/// `ln 2` split for the Cody-Waite reduction of [`fast_exp`]: `LN2_HI` has few enough bits
/// that `n * LN2_HI` is exact for the `n` that occur.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// Taylor coefficients of `exp(r)`, highest degree first (Horner order): `1/7!, ..., 1/1!, 1`.
const EXP_TAYLOR: [f32; 8] = [
    1.0 / 5040.0,
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
    1.0,
    1.0,
];
/// Inputs below this give 0 (`exp` would be subnormal).
const EXP_FLOOR: f32 = -87.0;

/// `s_i <- exp(s_i - m)` for every score; returns their sum.
///
/// AVX2/FMA where the CPU has it (the [`fast_exp`] reduction and polynomial, 8 lanes, with
/// fused multiply-adds: relative error below 3e-7 as well); [`fast_exp`] elsewhere.
pub fn exp_in_place(s: &mut [f32], m: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU features were detected.
        return unsafe { avx2::exp_in_place(s, m) };
    }
    for x in s.iter_mut() {
        *x = fast_exp(*x - m);
    }
    let mut acc = [0.0f32; 8];
    let chunks = s.chunks_exact(8);
    let mut sum: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for k in 0..8 {
            acc[k] += c[k];
        }
    }
    sum += acc.iter().sum::<f32>();
    sum
}

/// `max(init, max_i s_i)`; NaN scores are skipped, as by `f32::max`.
pub fn max_score(s: &[f32], init: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU features were detected.
        return unsafe { avx2::max_score(s, init) };
    }
    s.iter().fold(init, |a, &b| a.max(b))
}

/// Element types of cached rows: the dot product with an f32 query and the update
/// `acc += w * row`.
///
/// The two block kernels serve the query heads of one GQA group at once: every key and value
/// row is read (and converted) once for all of them.
pub trait Elem: Copy + Send + Sync {
    /// `q . row`.
    fn dot(q: &[f32], row: &[Self]) -> f32;
    /// `acc += w * row`.
    fn axpy(acc: &mut [f32], w: f32, row: &[Self]);

    /// Scores of `h = queries.len() / d` heads against the `n = keys.len() / d` rows of a block:
    /// `out[j * n + i] = scale * q_j . k_i`.
    fn block_scores(queries: &[f32], keys: &[Self], d: usize, scale: f32, out: &mut [f32]) {
        block_scores_portable(queries, keys, d, scale, out)
    }

    /// `acc_j += sum_i w[j * n + i] v_i` for the `h = acc.len() / d` heads, `n = values.len() / d`.
    fn block_accumulate(acc: &mut [f32], weights: &[f32], values: &[Self], d: usize) {
        block_accumulate_portable(acc, weights, values, d)
    }
}

impl Elem for f32 {
    #[inline]
    fn dot(q: &[f32], row: &[f32]) -> f32 {
        dot(q, row)
    }
    #[inline]
    fn axpy(acc: &mut [f32], w: f32, row: &[f32]) {
        for (a, &x) in acc.iter_mut().zip(row) {
            *a += w * x;
        }
    }
    fn block_scores(queries: &[f32], keys: &[f32], d: usize, scale: f32, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if d % 8 == 0 && has_avx2() && out.len() >= (queries.len() / d) * (keys.len() / d) {
            // SAFETY: features detected, shape checked.
            return unsafe { avx2::block_scores_f32(queries, keys, d, scale, out) };
        }
        block_scores_portable(queries, keys, d, scale, out)
    }
    fn block_accumulate(acc: &mut [f32], weights: &[f32], values: &[f32], d: usize) {
        #[cfg(target_arch = "x86_64")]
        if d % 8 == 0 && has_avx2() && weights.len() >= (acc.len() / d) * (values.len() / d) {
            // SAFETY: features detected, shape checked.
            return unsafe { avx2::block_accumulate_f32(acc, weights, values, d) };
        }
        block_accumulate_portable(acc, weights, values, d)
    }
}

/// The portable [`Elem::block_scores`] (the trait's default, callable from overrides).
fn block_scores_portable<T: Elem>(
    queries: &[f32],
    keys: &[T],
    d: usize,
    scale: f32,
    out: &mut [f32],
) {
    let n = keys.len() / d;
    for (i, k) in keys.chunks_exact(d).enumerate() {
        for (j, q) in queries.chunks_exact(d).enumerate() {
            out[j * n + i] = scale * T::dot(q, k);
        }
    }
}

/// The portable [`Elem::block_accumulate`].
fn block_accumulate_portable<T: Elem>(acc: &mut [f32], weights: &[f32], values: &[T], d: usize) {
    let n = values.len() / d;
    for (i, v) in values.chunks_exact(d).enumerate() {
        for (j, a) in acc.chunks_exact_mut(d).enumerate() {
            T::axpy(a, weights[j * n + i], v);
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn has_avx2() -> bool {
    static F: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *F.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
}

#[cfg(target_arch = "x86_64")]
fn has_f16c() -> bool {
    static F: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *F.get_or_init(|| {
        is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
    })
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use qada_stats::f16;

    use super::{EXP_FLOOR, EXP_TAYLOR, LN2_HI, LN2_LO};

    /// # Safety
    /// AVX2, FMA and F16C; `q.len() == row.len()`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot(q: &[f32], row: &[f16]) -> f32 {
        let n = q.len().min(row.len());
        let mut acc = _mm256_setzero_ps();
        let mut i = 0;
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

    /// [`crate::attention::exp_in_place`] on 8 lanes.
    ///
    /// # Safety
    /// AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn exp_in_place(s: &mut [f32], m: f32) -> f32 {
        let mv = _mm256_set1_ps(m);
        let lo = _mm256_set1_ps(EXP_FLOOR);
        let (log2e, ln2_hi, ln2_lo) = (
            _mm256_set1_ps(std::f32::consts::LOG2_E),
            _mm256_set1_ps(LN2_HI),
            _mm256_set1_ps(LN2_LO),
        );
        let (mut sum0, mut sum1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let exp8 = |x: __m256| -> __m256 {
            let xc = _mm256_max_ps(x, lo);
            let n = _mm256_round_ps(
                _mm256_mul_ps(xc, log2e),
                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
            );
            let r = _mm256_fnmadd_ps(n, ln2_lo, _mm256_fnmadd_ps(n, ln2_hi, xc));
            let mut p = _mm256_set1_ps(EXP_TAYLOR[0]);
            for &c in &EXP_TAYLOR[1..] {
                p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
            }
            let bits = _mm256_add_epi32(
                _mm256_castps_si256(p),
                _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23),
            );
            // inputs below -87 (and -inf) give 0
            _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), _mm256_castsi256_ps(bits))
        };
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

    /// [`crate::attention::max_score`] on 8 lanes.
    ///
    /// # Safety
    /// AVX2.
    #[target_feature(enable = "avx2")]
    pub unsafe fn max_score(s: &[f32], init: f32) -> f32 {
        // `_mm256_max_ps(x, acc)` returns `acc` when `x` is NaN, so NaN scores are skipped
        let (mut a, mut b) = (_mm256_set1_ps(init), _mm256_set1_ps(init));
        let mut chunks = s.chunks_exact(16);
        for c in &mut chunks {
            a = _mm256_max_ps(_mm256_loadu_ps(c.as_ptr()), a);
            b = _mm256_max_ps(_mm256_loadu_ps(c.as_ptr().add(8)), b);
        }
        let mut lanes = [0.0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), _mm256_max_ps(a, b));
        let m = lanes.iter().fold(init, |x, &y| x.max(y));
        chunks.remainder().iter().fold(m, |x, &y| x.max(y))
    }

    /// Largest row length the f16 block kernels accept (kept for the callers' shape checks).
    pub const MAX_D: usize = 512;

    /// Eight f16 at `p` widened to f32.
    #[inline(always)]
    unsafe fn load_f16(p: *const f16) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
    }

    /// Eight f32 at `p`.
    #[inline(always)]
    unsafe fn load_f32(p: *const f32) -> __m256 {
        _mm256_loadu_ps(p)
    }

    /// The sum of the 8 lanes.
    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }

    /// `[sum(a[0]), sum(a[1]), sum(a[2]), sum(a[3])]`: four horizontal sums in three `hadd`s.
    #[inline(always)]
    unsafe fn hsum4(a: &[__m256; 4]) -> __m128 {
        let t = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
        _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1))
    }

    /// The tiled block kernels for one element type. Scores: tiles of 4 rows x `H <= 3` heads
    /// in 12 register accumulators, each 8-wide key chunk loaded once for the tile, four
    /// horizontal sums at a time. Accumulate: blocks of [`ROWS`] rows (in L1 after the first
    /// pass) swept per 16 columns with the `H x 16` accumulators in registers, so `acc` is
    /// loaded and stored once per block instead of once per row.
    macro_rules! block_kernels {
        ($elem:ty, $load:ident, $feat:literal, $scores:ident, $accumulate:ident) => {
            /// [`crate::attention::Elem::block_scores`] (`d % 8 == 0`, `out.len() >= h * n`).
            ///
            /// # Safety
            /// The CPU has the target features; shapes as above.
            #[target_feature(enable = $feat)]
            pub unsafe fn $scores(
                queries: &[f32],
                keys: &[$elem],
                d: usize,
                scale: f32,
                out: &mut [f32],
            ) {
                let (n, h) = (keys.len() / d, queries.len() / d);
                assert!(d % 8 == 0 && out.len() >= h * n);
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
                    while i + 4 <= n {
                        let mut acc = [[_mm256_setzero_ps(); 4]; H];
                        // the rows 32 ahead are on their way from memory meanwhile
                        let ahead = k.wrapping_add((i + 32) * d) as *const i8;
                        for line in (0..4 * d * std::mem::size_of::<$elem>()).step_by(64) {
                            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line));
                        }
                        let mut c = 0;
                        while c < d {
                            let kr = [
                                $load(k.add(i * d + c)),
                                $load(k.add((i + 1) * d + c)),
                                $load(k.add((i + 2) * d + c)),
                                $load(k.add((i + 3) * d + c)),
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
                                a = _mm256_fmadd_ps(qv, $load(k.add(i * d + c)), a);
                                c += 8;
                            }
                            *o.add((j0 + j) * n + i) = scale * hsum(a);
                        }
                        i += 1;
                    }
                }
            }

            /// [`crate::attention::Elem::block_accumulate`] (`d % 8 == 0`,
            /// `weights.len() >= h * n`).
            ///
            /// # Safety
            /// The CPU has the target features; shapes as above.
            #[target_feature(enable = $feat)]
            pub unsafe fn $accumulate(
                acc: &mut [f32],
                weights: &[f32],
                values: &[$elem],
                d: usize,
            ) {
                let (n, h) = (values.len() / d, acc.len() / d);
                assert!(d % 8 == 0 && weights.len() >= h * n);
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
                        if let Some(p) = next {
                            for line in (0..row_bytes).step_by(64) {
                                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(i * row_bytes + line));
                            }
                        }
                        let mut vr = [_mm256_setzero_ps(); W];
                        for (x, vx) in vr.iter_mut().enumerate() {
                            *vx = $load(v.add(i * d + c + 8 * x));
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
        "avx2,fma",
        block_scores_f32,
        block_accumulate_f32
    );

    /// # Safety
    /// AVX2, FMA and F16C; `acc.len() == row.len()`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn axpy(acc: &mut [f32], w: f32, row: &[f16]) {
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
}

impl Elem for f16 {
    #[inline]
    fn dot(q: &[f32], row: &[f16]) -> f32 {
        #[cfg(target_arch = "x86_64")]
        if has_f16c() {
            // SAFETY: the CPU features were detected above.
            return unsafe { avx2::dot(q, row) };
        }
        q.iter().zip(row).map(|(&a, b)| a * b.to_f32()).sum()
    }
    #[inline]
    fn axpy(acc: &mut [f32], w: f32, row: &[f16]) {
        #[cfg(target_arch = "x86_64")]
        if has_f16c() {
            // SAFETY: the CPU features were detected above.
            return unsafe { avx2::axpy(acc, w, row) };
        }
        for (a, x) in acc.iter_mut().zip(row) {
            *a += w * x.to_f32();
        }
    }
    fn block_scores(queries: &[f32], keys: &[f16], d: usize, scale: f32, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if d % 8 == 0
            && d <= avx2::MAX_D
            && has_f16c()
            && out.len() >= (queries.len() / d) * (keys.len() / d)
        {
            // SAFETY: features detected, shape checked.
            return unsafe { avx2::block_scores(queries, keys, d, scale, out) };
        }
        block_scores_portable(queries, keys, d, scale, out)
    }
    fn block_accumulate(acc: &mut [f32], weights: &[f32], values: &[f16], d: usize) {
        #[cfg(target_arch = "x86_64")]
        if d % 8 == 0
            && d <= avx2::MAX_D
            && has_f16c()
            && weights.len() >= (acc.len() / d) * (values.len() / d)
        {
            // SAFETY: features detected, shape checked.
            return unsafe { avx2::block_accumulate(acc, weights, values, d) };
        }
        block_accumulate_portable(acc, weights, values, d)
    }
}

fn scores_typed<T: Elem>(q: &[f32], keys: &[T], scale: f32, out: &mut [f32]) {
    let d = q.len();
    for (o, k) in out.iter_mut().zip(keys.chunks_exact(d)) {
        *o = scale * T::dot(q, k);
    }
}

/// `out[i] = scale * q . k_i` for the rows `k_i` of `keys`.
pub fn scores(q: &[f32], keys: Rows<'_>, scale: f32, out: &mut [f32]) {
    if q.is_empty() {
        return;
    }
    match keys {
        Rows::F32(k) => scores_typed(q, k, scale, out),
        Rows::F16(k) => scores_typed(q, k, scale, out),
    }
}

/// `acc += sum_i w_i v_i` over the rows `v_i` of `values`.
pub fn weighted_sum(acc: &mut [f32], w: &[f32], values: Rows<'_>) {
    let d = acc.len();
    if d == 0 {
        return;
    }
    match values {
        Rows::F32(v) => w
            .iter()
            .zip(v.chunks_exact(d))
            .for_each(|(&wi, r)| f32::axpy(acc, wi, r)),
        Rows::F16(v) => w
            .iter()
            .zip(v.chunks_exact(d))
            .for_each(|(&wi, r)| f16::axpy(acc, wi, r)),
    }
}

/// `out = softmax(s) V` over the union of `(scores, values)` segments.
/// Writes zeros when there is no score at all.
pub fn softmax_attend(parts: &[(&[f32], Rows<'_>)], out: &mut [f32]) {
    out.iter_mut().for_each(|o| *o = 0.0);
    let m = parts
        .iter()
        .fold(f32::NEG_INFINITY, |a, (s, _)| max_score(s, a));
    if m == f32::NEG_INFINITY {
        return;
    }
    let mut sum = 0.0f64;
    let mut w = Vec::new();
    for (s, v) in parts {
        w.clear();
        w.extend(s.iter().map(|&si| (si - m).exp()));
        sum += w.iter().map(|&x| x as f64).sum::<f64>();
        weighted_sum(out, &w, *v);
    }
    let inv = (1.0 / sum) as f32;
    out.iter_mut().for_each(|o| *o *= inv);
}

/// Attention over every position: sink, bulk and window. `scratch` holds the `T` scores.
pub fn dense_attention(
    q: &[f32],
    kv: &KvSegments<'_>,
    scale: f32,
    scratch: &mut Vec<f32>,
    out: &mut [f32],
) {
    let (ns, nb, nw) = (
        kv.sink_keys.n_rows(kv.dim),
        kv.bulk_len(),
        kv.window_keys.n_rows(kv.dim),
    );
    scratch.resize(ns + nb + nw, 0.0);
    let (s_sink, rest) = scratch.split_at_mut(ns);
    let (s_bulk, s_win) = rest.split_at_mut(nb);
    scores(q, kv.sink_keys, scale, s_sink);
    scores(q, kv.bulk_keys, scale, s_bulk);
    scores(q, kv.window_keys, scale, s_win);
    softmax_attend(
        &[
            (s_sink, kv.sink_values),
            (s_bulk, kv.bulk_values),
            (s_win, kv.window_values),
        ],
        out,
    );
}

/// Attention over the local set only: sink and window. `scratch` holds the `|I|` scores.
pub fn local_attention(
    q: &[f32],
    kv: &KvSegments<'_>,
    scale: f32,
    scratch: &mut Vec<f32>,
    out: &mut [f32],
) {
    let (ns, nw) = (kv.sink_keys.n_rows(kv.dim), kv.window_keys.n_rows(kv.dim));
    scratch.resize(ns + nw, 0.0);
    let (s_sink, s_win) = scratch.split_at_mut(ns);
    scores(q, kv.sink_keys, scale, s_sink);
    scores(q, kv.window_keys, scale, s_win);
    softmax_attend(&[(s_sink, kv.sink_values), (s_win, kv.window_values)], out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_exp_is_within_3e_7_relative_of_exp() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x < 20.0 {
            let (a, b) = (fast_exp(x) as f64, (x as f64).exp());
            worst = worst.max(((a - b) / b).abs());
            x += 0.001_37;
        }
        assert!(worst < 3e-7, "worst relative error {worst}");
        assert_eq!(fast_exp(-100.0), 0.0);
        assert_eq!(fast_exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(fast_exp(0.0), 1.0);
    }

    #[test]
    fn exp_in_place_is_within_3e_7_relative_and_sums_its_outputs() {
        for n in [0usize, 1, 7, 8, 9, 16, 23, 1000] {
            let m = 3.5f32;
            let x: Vec<f32> = (0..n).map(|i| m - (i as f32 * 0.0937) % 95.0).collect();
            let mut y = x.clone();
            let sum = exp_in_place(&mut y, m);
            for (&a, &b) in x.iter().zip(&y) {
                let e = ((a - m) as f64).exp();
                if a - m < -87.0 {
                    assert_eq!(b, 0.0, "exp({}) must flush to 0", a - m);
                } else {
                    assert!(
                        ((b as f64 - e) / e).abs() < 3e-7,
                        "exp({}) = {b}, not {e}",
                        a - m
                    );
                }
            }
            let want: f64 = y.iter().map(|&v| v as f64).sum();
            assert!(
                (sum as f64 - want).abs() <= 1e-6 * want.max(1.0),
                "{sum} vs {want}"
            );
        }
        let mut z = [f32::NEG_INFINITY, 0.0, -1e30];
        exp_in_place(&mut z, 0.0);
        assert_eq!(z, [0.0, 1.0, 0.0]);
    }

    #[test]
    fn max_score_equals_the_fold_and_skips_nan() {
        for n in [0usize, 1, 5, 16, 17, 40] {
            let s: Vec<f32> = (0..n).map(|i| ((i * 37 % 11) as f32).sin() * 9.0).collect();
            let want = s.iter().fold(-3.0f32, |a, &b| a.max(b));
            assert_eq!(max_score(&s, -3.0), want, "n = {n}");
        }
        let mut s = vec![1.0f32; 20];
        s[3] = f32::NAN;
        s[17] = 2.0;
        assert_eq!(max_score(&s, f32::NEG_INFINITY), 2.0);
    }
}
