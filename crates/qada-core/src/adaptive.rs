//! One adaptive decoding step for a whole layer.
//!
//! For every query head: compute the local scores `s_I` once; decide with the criterion; a
//! local head gets `softmax(s_I) V_I`, a long-context head gets the bulk scores too and
//! `softmax(s) V` over every position, reusing `s_I`. Under GQA, query head `h` reads KV head
//! `h / (n_heads / n_kv_heads)`.

use crate::attention::{scores, softmax_attend, KvSegments};
use crate::{CoreError, Decision, HeadInput, LocalityCriterion, Result};

/// Buffers reused across steps so that the decode loop does not allocate.
#[derive(Clone, Debug, Default)]
pub struct LayerScratch {
    local_scores: Vec<f32>,
    bulk_scores: Vec<f32>,
}

impl LayerScratch {
    /// Empty buffers; they grow to the largest layer seen.
    pub fn new() -> Self {
        Self::default()
    }
}

/// Attention of one layer at one decoding step.
///
/// - `queries`: `n_heads x d` rotated queries.
/// - `kv`: one [`KvSegments`] per KV head.
/// - `out`: `n_heads x d` attention outputs.
/// - `decisions`: one per query head.
#[allow(clippy::too_many_arguments)]
pub fn attend_layer<C: LocalityCriterion + ?Sized>(
    criterion: &C,
    layer: usize,
    queries: &[f32],
    kv: &[KvSegments<'_>],
    scale: f32,
    scratch: &mut LayerScratch,
    out: &mut [f32],
    decisions: &mut [Decision],
) -> Result<()> {
    let n_kv = kv.len();
    let d = kv.first().map_or(0, |k| k.dim);
    let n_heads = decisions.len();
    if n_kv == 0 || d == 0 || n_heads % n_kv != 0 {
        return Err(CoreError::DimensionMismatch {
            what: "query heads per KV head",
            expected: n_kv,
            found: n_heads,
        });
    }
    for (what, len) in [("queries", queries.len()), ("outputs", out.len())] {
        if len != n_heads * d {
            return Err(CoreError::DimensionMismatch {
                what,
                expected: n_heads * d,
                found: len,
            });
        }
    }
    for k in kv {
        k.validate()?;
        if k.dim != d {
            return Err(CoreError::DimensionMismatch {
                what: "KV head dimension",
                expected: d,
                found: k.dim,
            });
        }
    }
    let group = n_heads / n_kv;
    let local_len = kv[0].local_len();

    // 1. local scores of every head, once.
    scratch.local_scores.resize(n_heads * local_len, 0.0);
    for (h, s) in scratch
        .local_scores
        .chunks_exact_mut(local_len.max(1))
        .enumerate()
        .take(n_heads)
    {
        let k = &kv[h / group];
        let q = &queries[h * d..(h + 1) * d];
        let ns = k.sink_keys.len() / d;
        scores(q, k.sink_keys, scale, &mut s[..ns]);
        scores(q, k.window_keys, scale, &mut s[ns..]);
    }

    // 2. decide.
    let local_scores = &scratch.local_scores;
    let inputs: Vec<HeadInput<'_>> = (0..n_heads)
        .map(|h| {
            let k = &kv[h / group];
            HeadInput {
                layer,
                head: h,
                query: &queries[h * d..(h + 1) * d],
                scale,
                local_scores: &local_scores[h * local_len..(h + 1) * local_len],
                bulk_len: k.bulk_len(),
                bulk_moments: k.bulk_moments,
                bulk_keys: k.bulk_keys,
            }
        })
        .collect();
    criterion.decide_layer(&inputs, decisions)?;
    drop(inputs);

    // 3. attend.
    for h in 0..n_heads {
        let k = &kv[h / group];
        let q = &queries[h * d..(h + 1) * d];
        let s = &scratch.local_scores[h * local_len..(h + 1) * local_len];
        let ns = k.sink_keys.len() / d;
        let (s_sink, s_win) = s.split_at(ns);
        let o = &mut out[h * d..(h + 1) * d];
        if decisions[h].local || k.bulk_len() == 0 {
            softmax_attend(&[(s_sink, k.sink_values), (s_win, k.window_values)], o);
        } else {
            scratch.bulk_scores.resize(k.bulk_len(), 0.0);
            scores(q, k.bulk_keys, scale, &mut scratch.bulk_scores);
            softmax_attend(
                &[
                    (s_sink, k.sink_values),
                    (&scratch.bulk_scores, k.bulk_values),
                    (s_win, k.window_values),
                ],
                o,
            );
        }
    }
    Ok(())
}
