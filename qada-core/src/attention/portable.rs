//! The portable kernels: what every CPU runs, and what the AVX2 kernels are checked against.
//!
//! Each reads and writes only within its slices: [`dot`] and the row updates take the common
//! prefix of their arguments, and the block kernels are called with shapes checked by
//! [`super::Elem`]'s entry points.

use qada_stats::{f16, Q8Block, Q8_BLOCK};

use super::Elem;

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

/// `acc += w * row` in f32, over the common prefix of `acc` and `row`.
#[inline]
pub(crate) fn axpy_f32(acc: &mut [f32], w: f32, row: &[f32]) {
    for (a, &x) in acc.iter_mut().zip(row) {
        *a += w * x;
    }
}

/// `q . row` for an f16 row, over the common prefix.
#[inline]
pub(crate) fn dot_f16(q: &[f32], row: &[f16]) -> f32 {
    q.iter().zip(row).map(|(&a, b)| a * b.to_f32()).sum()
}

/// `acc += w * row` for an f16 row, over the common prefix.
#[inline]
pub(crate) fn axpy_f16(acc: &mut [f32], w: f32, row: &[f16]) {
    for (a, x) in acc.iter_mut().zip(row) {
        *a += w * x.to_f32();
    }
}

/// `q . row` for q8 blocks, `sum_b d_b sum_i q_{b,i} x_{b,i}`, over the whole blocks both
/// cover.
#[inline]
pub(crate) fn dot_q8(q: &[f32], row: &[Q8Block]) -> f32 {
    q.chunks_exact(Q8_BLOCK)
        .zip(row)
        .map(|(x, b)| {
            let s: f32 = x.iter().zip(&b.qs).map(|(&a, &k)| a * f32::from(k)).sum();
            b.d.to_f32() * s
        })
        .sum()
}

/// `acc += w * row` for q8 blocks (`acc_i += (w d_b) q_{b,i}`), over the whole blocks both
/// cover.
#[inline]
pub(crate) fn axpy_q8(acc: &mut [f32], w: f32, row: &[Q8Block]) {
    for (a, b) in acc.chunks_exact_mut(Q8_BLOCK).zip(row) {
        let wd = w * b.d.to_f32();
        for (x, &k) in a.iter_mut().zip(&b.qs) {
            *x += wd * f32::from(k);
        }
    }
}

/// `out[j * n + i] = scale * q_j . k_i`, the portable [`Elem::block_scores`].
///
/// Shapes (checked by the caller): `d > 0`, `d % T::VALUES == 0`, `out.len() >= h * n` with
/// `h = queries.len() / d` and `n = keys.len() * T::VALUES / d`; then every index below is in
/// bounds.
pub(crate) fn block_scores_portable<T: Elem>(
    queries: &[f32],
    keys: &[T],
    d: usize,
    scale: f32,
    out: &mut [f32],
) {
    let n = keys.len() * T::VALUES / d;
    for (i, k) in keys.chunks_exact(d / T::VALUES).enumerate() {
        for (j, q) in queries.chunks_exact(d).enumerate() {
            out[j * n + i] = scale * T::dot(q, k);
        }
    }
}

/// `acc_j += sum_i w[j * n + i] v_i`, the portable [`Elem::block_accumulate`].
///
/// Shapes (checked by the caller): `d > 0`, `d % T::VALUES == 0`, `weights.len() >= h * n`
/// with `h = acc.len() / d` and `n = values.len() * T::VALUES / d`.
pub(crate) fn block_accumulate_portable<T: Elem>(
    acc: &mut [f32],
    weights: &[f32],
    values: &[T],
    d: usize,
) {
    let n = values.len() * T::VALUES / d;
    for (i, v) in values.chunks_exact(d / T::VALUES).enumerate() {
        for (j, a) in acc.chunks_exact_mut(d).enumerate() {
            T::axpy(a, weights[j * n + i], v);
        }
    }
}
