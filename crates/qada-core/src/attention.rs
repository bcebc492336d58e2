//! Softmax attention for one head over borrowed key/value slices.
//!
//! `o = softmax(s) V` with `s_i = scale * q . k_i`, computed as
//! `o = sum_i exp(s_i - m) v_i / sum_i exp(s_i - m)` with `m = max_i s_i`, so scores of any
//! magnitude give finite results. Scores may come in several segments (sink, bulk, window):
//! the softmax runs over their union without concatenating anything.

use qada_stats::KeyMoments;

use crate::{CoreError, Result};

/// One KV head's keys and values split into the three index sets of QAdA, all borrowed.
#[derive(Clone, Copy, Debug)]
pub struct KvSegments<'a> {
    /// Row length `d`.
    pub dim: usize,
    /// First `T_sink` keys.
    pub sink_keys: &'a [f32],
    /// Values of the sink.
    pub sink_values: &'a [f32],
    /// Keys between sink and window.
    pub bulk_keys: &'a [f32],
    /// Values of the bulk.
    pub bulk_values: &'a [f32],
    /// The most recent `T_local - T_sink` keys.
    pub window_keys: &'a [f32],
    /// Values of the window.
    pub window_values: &'a [f32],
    /// Moments of the bulk keys (as the cache keeps them).
    pub bulk_moments: &'a KeyMoments,
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
            if d == 0 || k.len() % d != 0 || k.len() != v.len() {
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

/// `out[i] = scale * q . k_i` for the rows `k_i` of `keys`.
pub fn scores(q: &[f32], keys: &[f32], scale: f32, out: &mut [f32]) {
    let d = q.len();
    if d == 0 {
        return;
    }
    for (o, k) in out.iter_mut().zip(keys.chunks_exact(d)) {
        *o = scale * dot(q, k);
    }
}

/// `out = softmax(s) V` over the union of `(scores, values)` segments.
/// Writes zeros when there is no score at all.
pub fn softmax_attend(parts: &[(&[f32], &[f32])], out: &mut [f32]) {
    let d = out.len();
    out.iter_mut().for_each(|o| *o = 0.0);
    let m = parts
        .iter()
        .flat_map(|(s, _)| s.iter())
        .fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    if m == f32::NEG_INFINITY {
        return;
    }
    let mut sum = 0.0f64;
    for (s, v) in parts {
        for (&si, vi) in s.iter().zip(v.chunks_exact(d)) {
            let w = (si - m).exp();
            sum += w as f64;
            for (o, &x) in out.iter_mut().zip(vi) {
                *o += w * x;
            }
        }
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
        kv.sink_keys.len() / kv.dim,
        kv.bulk_len(),
        kv.window_keys.len() / kv.dim,
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
    let (ns, nw) = (kv.sink_keys.len() / kv.dim, kv.window_keys.len() / kv.dim);
    scratch.resize(ns + nw, 0.0);
    let (s_sink, s_win) = scratch.split_at_mut(ns);
    scores(q, kv.sink_keys, scale, s_sink);
    scores(q, kv.window_keys, scale, s_win);
    softmax_attend(&[(s_sink, kv.sink_values), (s_win, kv.window_values)], out);
}
