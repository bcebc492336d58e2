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
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // branch-free so that loops over it vectorize: clamp, compute, then select
    let xc = x.max(-87.0);
    let n = (xc * std::f32::consts::LOG2_E + MAGIC) - MAGIC;
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    let v = f32::from_bits((p.to_bits() as i32).wrapping_add((n as i32) << 23) as u32);
    if x < -87.0 {
        0.0
    } else {
        v
    }
}

/// `s_i <- exp(s_i - m)` for every score; returns their sum.
pub fn exp_in_place(s: &mut [f32], m: f32) -> f32 {
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
            return unsafe { f16_avx2::block_scores_f32(queries, keys, d, scale, out) };
        }
        block_scores_portable(queries, keys, d, scale, out)
    }
    fn block_accumulate(acc: &mut [f32], weights: &[f32], values: &[f32], d: usize) {
        #[cfg(target_arch = "x86_64")]
        if d % 8 == 0 && has_avx2() && weights.len() >= (acc.len() / d) * (values.len() / d) {
            // SAFETY: features detected, shape checked.
            return unsafe { f16_avx2::block_accumulate_f32(acc, weights, values, d) };
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
mod f16_avx2 {
    use std::arch::x86_64::*;

    use qada_stats::f16;

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
        let s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        let mut total = _mm_cvtss_f32(s);
        while i < n {
            total += q[i] * row[i].to_f32();
            i += 1;
        }
        total
    }

    /// `d` halves to f32 (`d % 8 == 0`).
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn widen(row: &[f16], out: &mut [f32]) {
        for (c, o) in row.chunks_exact(8).zip(out.chunks_exact_mut(8)) {
            let v = _mm256_cvtph_ps(_mm_loadu_si128(c.as_ptr() as *const __m128i));
            _mm256_storeu_ps(o.as_mut_ptr(), v);
        }
    }

    /// `a . b` over f32 with `a.len() == b.len()`, `len % 8 == 0`.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
        let (mut x, mut y) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut i = 0;
        while i + 16 <= a.len() {
            x = _mm256_fmadd_ps(
                _mm256_loadu_ps(a.as_ptr().add(i)),
                _mm256_loadu_ps(b.as_ptr().add(i)),
                x,
            );
            y = _mm256_fmadd_ps(
                _mm256_loadu_ps(a.as_ptr().add(i + 8)),
                _mm256_loadu_ps(b.as_ptr().add(i + 8)),
                y,
            );
            i += 16;
        }
        if i < a.len() {
            x = _mm256_fmadd_ps(
                _mm256_loadu_ps(a.as_ptr().add(i)),
                _mm256_loadu_ps(b.as_ptr().add(i)),
                x,
            );
        }
        let acc = _mm256_add_ps(x, y);
        let s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// `acc += w * v` over f32, `len % 8 == 0`.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn axpy_f32(acc: &mut [f32], w: f32, v: &[f32]) {
        let wv = _mm256_set1_ps(w);
        for (a, x) in acc.chunks_exact_mut(8).zip(v.chunks_exact(8)) {
            let r = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x.as_ptr()), _mm256_loadu_ps(a.as_ptr()));
            _mm256_storeu_ps(a.as_mut_ptr(), r);
        }
    }

    /// Largest row length the block kernels widen on the stack.
    pub const MAX_D: usize = 512;

    /// [`crate::attention::Elem::block_scores`] for f16 rows.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `d % 8 == 0`, `d <= MAX_D`, `out.len() >= heads * rows`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn block_scores(
        queries: &[f32],
        keys: &[f16],
        d: usize,
        scale: f32,
        out: &mut [f32],
    ) {
        let n = keys.len() / d;
        let mut row = [0.0f32; MAX_D];
        let row = &mut row[..d];
        for (i, k) in keys.chunks_exact(d).enumerate() {
            widen(k, row);
            for (j, q) in queries.chunks_exact(d).enumerate() {
                out[j * n + i] = scale * dot_f32(q, row);
            }
        }
    }

    /// [`crate::attention::Elem::block_accumulate`] for f16 rows.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `d % 8 == 0`, `d <= MAX_D`, `weights.len() >= heads * rows`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn block_accumulate(acc: &mut [f32], weights: &[f32], values: &[f16], d: usize) {
        let n = values.len() / d;
        let mut row = [0.0f32; MAX_D];
        let row = &mut row[..d];
        for (i, v) in values.chunks_exact(d).enumerate() {
            widen(v, row);
            for (j, a) in acc.chunks_exact_mut(d).enumerate() {
                axpy_f32(a, weights[j * n + i], row);
            }
        }
    }

    /// [`crate::attention::Elem::block_scores`] for f32 rows.
    ///
    /// # Safety
    /// AVX2 and FMA; `d % 8 == 0`, `out.len() >= heads * rows`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn block_scores_f32(
        queries: &[f32],
        keys: &[f32],
        d: usize,
        scale: f32,
        out: &mut [f32],
    ) {
        let n = keys.len() / d;
        for (i, k) in keys.chunks_exact(d).enumerate() {
            for (j, q) in queries.chunks_exact(d).enumerate() {
                out[j * n + i] = scale * dot_f32(q, k);
            }
        }
    }

    /// [`crate::attention::Elem::block_accumulate`] for f32 rows.
    ///
    /// # Safety
    /// AVX2 and FMA; `d % 8 == 0`, `weights.len() >= heads * rows`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn block_accumulate_f32(acc: &mut [f32], weights: &[f32], values: &[f32], d: usize) {
        let n = values.len() / d;
        for (i, v) in values.chunks_exact(d).enumerate() {
            for (j, a) in acc.chunks_exact_mut(d).enumerate() {
                axpy_f32(a, weights[j * n + i], v);
            }
        }
    }

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
            return unsafe { f16_avx2::dot(q, row) };
        }
        q.iter().zip(row).map(|(&a, b)| a * b.to_f32()).sum()
    }
    #[inline]
    fn axpy(acc: &mut [f32], w: f32, row: &[f16]) {
        #[cfg(target_arch = "x86_64")]
        if has_f16c() {
            // SAFETY: the CPU features were detected above.
            return unsafe { f16_avx2::axpy(acc, w, row) };
        }
        for (a, x) in acc.iter_mut().zip(row) {
            *a += w * x.to_f32();
        }
    }
    fn block_scores(queries: &[f32], keys: &[f16], d: usize, scale: f32, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if d % 8 == 0
            && d <= f16_avx2::MAX_D
            && has_f16c()
            && out.len() >= (queries.len() / d) * (keys.len() / d)
        {
            // SAFETY: features detected, shape checked.
            return unsafe { f16_avx2::block_scores(queries, keys, d, scale, out) };
        }
        block_scores_portable(queries, keys, d, scale, out)
    }
    fn block_accumulate(acc: &mut [f32], weights: &[f32], values: &[f16], d: usize) {
        #[cfg(target_arch = "x86_64")]
        if d % 8 == 0
            && d <= f16_avx2::MAX_D
            && has_f16c()
            && weights.len() >= (acc.len() / d) * (values.len() / d)
        {
            // SAFETY: features detected, shape checked.
            return unsafe { f16_avx2::block_accumulate(acc, weights, values, d) };
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
        .flat_map(|(s, _)| s.iter())
        .fold(f32::NEG_INFINITY, |a, &b| a.max(b));
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
}
