//! The reference softmax attention of one head: scores, `o = softmax(s) V` over segments, and
//! dense (every position) or local (sink and window) attention over [`KvSegments`].
//!
//! `o = sum_i exp(s_i - m) v_i / sum_i exp(s_i - m)` with `m = max_i s_i`, so scores of any
//! magnitude give finite results; the weights are summed in f64. Scores may come in several
//! segments (sink, bulk, window): the softmax runs over their union without concatenating.
//!
//! Lengths: every function works on whole rows of the given length and the common prefix of
//! its slices (a shorter `out` gets fewer scores), so no length reaches an out-of-bounds index.
//! Q8 rows ([`Rows::Q8`], `x ~ d q` per block of 32) are read in place; a row length that is
//! not a multiple of 32 has no whole q8 row, so there are no scores and no weighted rows.

use qada_stats::{f16, Q8Block, Rows};

use super::{max_score, Elem, KvSegments};

fn scores_typed<T: Elem>(q: &[f32], keys: &[T], scale: f32, out: &mut [f32]) {
    let d = q.len();
    if !d.is_multiple_of(T::VALUES) {
        return;
    }
    for (o, k) in out.iter_mut().zip(keys.chunks_exact(d / T::VALUES)) {
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
        Rows::Q8(k) => scores_typed(q, k, scale, out),
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
        Rows::Q8(v) if d.is_multiple_of(Q8Block::VALUES) => w
            .iter()
            .zip(v.chunks_exact(d / Q8Block::VALUES))
            .for_each(|(&wi, r)| Q8Block::axpy(acc, wi, r)),
        Rows::Q8(_) => {}
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
