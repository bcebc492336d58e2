//! Prefill's attention: a block of `n` queries at positions `pos0..pos0 + n` over the cached
//! positions each may see (`max(0, p - W + 1) ..= p` on a sliding layer of window `W`, else
//! `0 ..= p`), dense and causal, in tiles of [`TILE`] keys with a running softmax: for query
//! row `i` and tile `K_t`,
//!
//! `m' = max(m, max_j s_ij)`, `l' = l e^(m - m') + sum_j e^(s_ij - m')`,
//! `o' = o e^(m - m') + sum_j e^(s_ij - m') v_j`, and at the end `o / l`,
//!
//! with `s = scale * q k`. Memory is `O(n * TILE)` per head whatever the context length; an
//! f16 or q8 cache is converted (q8: dequantized, `d q`) one tile at a time. Scores and weighted sums go through gemm; heads
//! run in parallel.

use qada_kv::{HeadView, KvCache};
use qada_stats::Rows;
use rayon::prelude::*;

use crate::ops::gemm_strided;
use crate::{ModelConfig, Result};

/// Keys per tile.
pub const TILE: usize = 512;

/// Rows `r0..r1` of `x` as f32: borrowed when they are, converted into `buf` when f16,
/// dequantized (`d q`) into `buf` when q8.
fn tile_f32<'a>(x: Rows<'a>, r0: usize, r1: usize, d: usize, buf: &'a mut Vec<f32>) -> &'a [f32] {
    match x.slice(r0, r1, d) {
        Rows::F32(s) => s,
        Rows::F16(s) => {
            buf.clear();
            buf.extend(s.iter().map(|v| v.to_f32()));
            buf
        }
        Rows::Q8(s) => {
            buf.clear();
            buf.resize((r1 - r0) * d, 0.0);
            qada_stats::Q8Block::dequantize_into(s, buf);
            buf
        }
    }
}

/// Attention of query head `h` (`q`: `n` rows of stride `q_rs`, from offset `h * d`) over one
/// KV head's cached rows; writes `n x d` into `out`.
#[allow(clippy::too_many_arguments)]
fn head_attention(
    view: &HeadView<'_>,
    window: Option<usize>,
    q: &[f32],
    q_rs: usize,
    n: usize,
    pos0: usize,
    scale: f32,
    out: &mut [f32],
) {
    let d = view.dim();
    let first = view.first_position();
    let t = pos0 + n - first;
    // kept row range each query sees: [start_i, end_i)
    let end = |i: usize| pos0 + i + 1 - first;
    let start = |i: usize| window.map_or(0, |w| (pos0 + i + 1).saturating_sub(w + first));
    let (keys, values) = (view.keys(), view.values());
    let mut m = vec![f32::NEG_INFINITY; n];
    let mut l = vec![0.0f64; n];
    out[..n * d].iter_mut().for_each(|o| *o = 0.0);
    let mut s = vec![0.0f32; n * TILE];
    let mut pv = vec![0.0f32; n * d];
    let (mut kbuf, mut vbuf) = (Vec::new(), Vec::new());
    let mut c0 = start(0) / TILE * TILE;
    while c0 < t.min(end(n - 1)) {
        let c1 = (c0 + TILE).min(t);
        let w = c1 - c0;
        let kt = tile_f32(keys, c0, c1, d, &mut kbuf);
        // S = Q_h K_t^T: (n x d) (d x w)
        gemm_strided(n, w, d, &mut s, w, q, q_rs, 1, kt, 1, d);
        for i in 0..n {
            let row = &mut s[i * w..(i + 1) * w];
            let (a, b) = (start(i).clamp(c0, c1) - c0, end(i).clamp(c0, c1) - c0);
            if a >= b {
                row.iter_mut().for_each(|x| *x = 0.0);
                continue;
            }
            let mut mt = f32::NEG_INFINITY;
            for x in row[a..b].iter_mut() {
                *x *= scale;
                mt = mt.max(*x);
            }
            let m_new = m[i].max(mt);
            let alpha = (m[i] - m_new).exp();
            let sum = qada_core::attention::exp_in_place(&mut row[a..b], m_new);
            row[..a].iter_mut().for_each(|x| *x = 0.0);
            row[b..].iter_mut().for_each(|x| *x = 0.0);
            l[i] = l[i] * alpha as f64 + sum as f64;
            if alpha != 1.0 {
                out[i * d..(i + 1) * d].iter_mut().for_each(|o| *o *= alpha);
            }
            m[i] = m_new;
        }
        let vt = tile_f32(values, c0, c1, d, &mut vbuf);
        // O += P V_t: (n x w) (w x d)
        gemm_strided(n, d, w, &mut pv, d, &s, w, 1, vt, d, 1);
        out[..n * d].iter_mut().zip(&pv).for_each(|(o, p)| *o += p);
        c0 = c1;
    }
    for i in 0..n {
        let inv = (1.0 / l[i]) as f32;
        out[i * d..(i + 1) * d].iter_mut().for_each(|o| *o *= inv);
    }
}

/// Causal dense attention of a block of `n` queries (`q`: `n x (n_heads d)`) at positions
/// `pos0..pos0 + n` over layer `layer` of the cache, whose keys and values for those positions
/// are already appended; writes `n x (n_heads d)` into `out`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn prefill_attention(
    c: &ModelConfig,
    cache: &KvCache,
    layer: usize,
    window: Option<usize>,
    q: &[f32],
    n: usize,
    pos0: usize,
    out: &mut [f32],
) -> Result<()> {
    let d = c.head_dim;
    let qd = c.n_heads * d;
    let group = c.n_heads / c.n_kv_heads;
    let views: Vec<HeadView<'_>> = (0..c.n_kv_heads)
        .map(|g| cache.head(layer, g))
        .collect::<std::result::Result<_, _>>()?;
    let heads: Vec<Vec<f32>> = (0..c.n_heads)
        .into_par_iter()
        .map(|h| {
            let mut o = vec![0.0f32; n * d];
            let qh = &q[h * d..];
            head_attention(
                &views[h / group],
                window,
                qh,
                qd,
                n,
                pos0,
                c.attention_scale,
                &mut o,
            );
            o
        })
        .collect();
    for (h, o) in heads.iter().enumerate() {
        for i in 0..n {
            out[i * qd + h * d..i * qd + (h + 1) * d].copy_from_slice(&o[i * d..(i + 1) * d]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use qada_kv::{CacheShape, KvDtype, LayerSpan, MomentsMode, WindowConfig};

    fn noise(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| ((i as u32).wrapping_mul(2654435761) ^ seed) as f32 / u32::MAX as f32 - 0.5)
            .map(|x| x * 3.0)
            .collect()
    }

    /// Tiled attention equals a direct softmax (f64) over each query's visible keys, across
    /// tiles, blocks after a long context, sliding windows, and every cache element type.
    #[test]
    fn tiles_with_a_running_softmax_equal_the_direct_softmax() {
        for (span, dtype, d) in [
            (LayerSpan::Full, KvDtype::F32, 4),
            (LayerSpan::Full, KvDtype::F16, 4),
            (LayerSpan::Sliding(700), KvDtype::F16, 4),
            (LayerSpan::Sliding(3), KvDtype::F32, 4),
            (LayerSpan::Full, KvDtype::Q8, 32),
            (LayerSpan::Sliding(700), KvDtype::Q8, 32),
        ] {
            let shape = CacheShape {
                n_layers: 1,
                n_kv_heads: 1,
                head_dim: d,
                capacity: 4096,
                dtype,
            };
            let mut cache =
                KvCache::with_spans(shape, WindowConfig::PAPER, MomentsMode::Update, vec![span])
                    .unwrap();
            let (pos0, n) = (1100, 300);
            let keys = noise((pos0 + n) * d, 1);
            let values = noise((pos0 + n) * d, 2);
            cache
                .append(0, &keys[..pos0 * d], &values[..pos0 * d])
                .unwrap();
            cache
                .append(0, &keys[pos0 * d..], &values[pos0 * d..])
                .unwrap();
            let q = noise(n * d, 3);
            let mut out = vec![0.0f32; n * d];
            let view = cache.head(0, 0).unwrap();
            head_attention(&view, span.window(), &q, d, n, pos0, 0.5, &mut out);
            // the cache's own rounding of keys and values
            let rounded = |x: &[f32]| -> Vec<f32> {
                match dtype {
                    KvDtype::F16 => x.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect(),
                    KvDtype::F32 => x.to_vec(),
                    KvDtype::Q8 => {
                        let mut b = Vec::new();
                        qada_stats::Q8Block::quantize_into(x, &mut b);
                        let mut out = vec![0.0f32; x.len()];
                        qada_stats::Q8Block::dequantize_into(&b, &mut out);
                        out
                    }
                }
            };
            let (rk, rv) = (rounded(&keys), rounded(&values));
            for i in 0..n {
                let p = pos0 + i;
                let lo = span.window().map_or(0, |w| (p + 1).saturating_sub(w));
                let s: Vec<f64> = (lo..=p)
                    .map(|j| {
                        (0..d)
                            .map(|k| q[i * d + k] as f64 * rk[j * d + k] as f64)
                            .sum::<f64>()
                            * 0.5
                    })
                    .collect();
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
                for k in 0..d {
                    let want: f64 = (lo..=p)
                        .zip(&s)
                        .map(|(j, x)| (x - m).exp() / z * rv[j * d + k] as f64)
                        .sum();
                    let got = out[i * d + k] as f64;
                    assert!(
                        (got - want).abs() < 1e-4,
                        "{span:?} {dtype:?} query {i} dim {k}: {got} vs {want}"
                    );
                }
            }
        }
    }
}
