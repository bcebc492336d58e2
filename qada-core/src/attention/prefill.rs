//! Prefill's attention: a block of `n` queries at positions `pos0..pos0 + n` over the cached
//! positions each may see (`max(0, p - W + 1) ..= p` on a sliding layer of window `W`, else
//! `0 ..= p`), dense and causal, in tiles of [`TILE`] keys with a running softmax: for query
//! row `i` and tile `K_t`,
//!
//! `m' = max(m, max_j s_ij)`, `l' = l e^(m - m') + sum_j e^(s_ij - m')`,
//! `o' = o e^(m - m') + sum_j e^(s_ij - m') v_j`, and at the end `o / l`,
//!
//! with `s = scale * q k`. Memory is `O(n * TILE)` per head whatever the context length; an
//! f16 or q8 cache is converted (q8: dequantized, `d q`) one tile at a time. Scores and
//! weighted sums go through the AVX-512 tile kernels (`avx512_tiles.rs`) where the CPU has
//! them and `d % 16 == 0`, else through gemm ([`gemm_strided`]); heads run in parallel.

use half::slice::HalfFloatSliceExt;
use qada_stats::{Q8Block, Rows, Q8_BLOCK};
use rayon::prelude::*;

#[cfg(target_arch = "x86_64")]
use qada_stats::simd::Avx512;

#[cfg(target_arch = "x86_64")]
use super::avx512_tiles;
use super::exp::{exp_in_place, max_score};
use super::matmul::gemm_strided;
use super::score_map::ScoreMap;
use crate::{CoreError, Result};

/// Keys per tile.
pub const TILE: usize = 512;

/// One KV head's cached rows as prefill sees them: keys and values of positions
/// `first..first + len` (a sliding layer's cache may have dropped the positions before
/// `first`), token-major rows of the layer's head dimension.
#[derive(Clone, Copy, Debug)]
pub struct PrefillHead<'a> {
    /// Cached keys.
    pub keys: Rows<'a>,
    /// Cached values, as many rows as `keys`.
    pub values: Rows<'a>,
    /// Position of the first cached row.
    pub first: usize,
}

/// The layer's attention shape: query heads, head dimension, score scale and window.
#[derive(Clone, Copy, Debug)]
pub struct PrefillShape {
    /// Query heads; a multiple of the KV heads (GQA: head `h` reads KV head
    /// `h / (n_heads / n_kv_heads)`).
    pub n_heads: usize,
    /// Values per head row `d`.
    pub dim: usize,
    /// `scale` in `s = scale * q k`.
    pub scale: f32,
    /// Soft cap of the scores (Gemma 2): `s = cap tanh(s / cap)`.
    pub softcap: Option<f32>,
    /// `Some(W)` on a sliding layer: a query at `p` sees `max(0, p - W + 1) ..= p`.
    pub window: Option<usize>,
}

/// Rows `r0..r1` of `x` as f32: borrowed when they are, converted into `buf` when f16,
/// dequantized (`d q`) into `buf` when q8.
fn tile_f32<'a>(x: Rows<'a>, r0: usize, r1: usize, d: usize, buf: &'a mut Vec<f32>) -> &'a [f32] {
    match x.slice(r0, r1, d) {
        Rows::F32(s) => s,
        Rows::F16(s) => {
            buf.clear();
            buf.resize(s.len(), 0.0);
            // F16C eight values at a time where the CPU has it
            s.convert_to_f32_slice(buf);
            buf
        }
        Rows::Q8(s) => {
            buf.clear();
            buf.resize((r1 - r0) * d, 0.0);
            Q8Block::dequantize_into(s, buf);
            buf
        }
    }
}

/// The AVX-512 tile products (`avx512_tiles.rs`) where the CPU has them and `d % 16 == 0`;
/// `None`: `gemm`'s.
#[cfg(target_arch = "x86_64")]
fn tile_kernels(d: usize) -> Option<Avx512> {
    Avx512::detect().filter(|_| d.is_multiple_of(16))
}

/// `None`: `gemm`'s tile products.
#[cfg(not(target_arch = "x86_64"))]
fn tile_kernels(_: usize) -> Option<std::convert::Infallible> {
    None
}

/// Attention of one query head (`q`: `n` rows of stride `q_rs`) over one KV head's cached
/// rows; writes `n x d` into `out`. Shapes are checked by [`prefill_attention`].
#[allow(clippy::too_many_arguments)]
fn head_attention(
    kv: &PrefillHead<'_>,
    d: usize,
    window: Option<usize>,
    q: &[f32],
    q_rs: usize,
    n: usize,
    pos0: usize,
    map: ScoreMap,
    out: &mut [f32],
) {
    let first = kv.first;
    let t = pos0 + n - first;
    // kept row range each query sees: [start_i, end_i)
    let end = |i: usize| pos0 + i + 1 - first;
    let start = |i: usize| window.map_or(0, |w| (pos0 + i + 1).saturating_sub(w + first));
    let (keys, values) = (kv.keys, kv.values);
    let mut m = vec![f32::NEG_INFINITY; n];
    let mut l = vec![0.0f64; n];
    out[..n * d].iter_mut().for_each(|o| *o = 0.0);
    let mut s = vec![0.0f32; n * TILE];
    let tiles = tile_kernels(d);
    let mut pv = if tiles.is_some() {
        Vec::new()
    } else {
        vec![0.0f32; n * d]
    };
    let (mut kbuf, mut vbuf) = (Vec::new(), Vec::new());
    #[cfg(target_arch = "x86_64")]
    let mut pack = Vec::new();
    let mut c0 = start(0) / TILE * TILE;
    while c0 < t.min(end(n - 1)) {
        let c1 = (c0 + TILE).min(t);
        let w = c1 - c0;
        let kt = tile_f32(keys, c0, c1, d, &mut kbuf);
        // S = Q_h K_t^T: (n x d) (d x w)
        match tiles {
            #[cfg(target_arch = "x86_64")]
            Some(token) => avx512_tiles::scores(token, q, q_rs, n, kt, w, d, &mut pack, &mut s),
            _ => gemm_strided(n, w, d, &mut s, w, q, q_rs, 1, kt, 1, d),
        }
        for i in 0..n {
            let row = &mut s[i * w..(i + 1) * w];
            let (a, b) = (start(i).clamp(c0, c1) - c0, end(i).clamp(c0, c1) - c0);
            if a >= b {
                row.iter_mut().for_each(|x| *x = 0.0);
                continue;
            }
            map.apply_in_place(&mut row[a..b]);
            let mt = max_score(&row[a..b], f32::NEG_INFINITY);
            let m_new = m[i].max(mt);
            let alpha = (m[i] - m_new).exp();
            let sum = exp_in_place(&mut row[a..b], m_new);
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
        match tiles {
            #[cfg(target_arch = "x86_64")]
            Some(token) => avx512_tiles::accumulate(token, &s, w, n, vt, w, d, out),
            _ => {
                gemm_strided(n, d, w, &mut pv, d, &s, w, 1, vt, d, 1);
                out[..n * d].iter_mut().zip(&pv).for_each(|(o, p)| *o += p);
            }
        }
        c0 = c1;
    }
    for i in 0..n {
        let inv = (1.0 / l[i]) as f32;
        out[i * d..(i + 1) * d].iter_mut().for_each(|o| *o *= inv);
    }
}

/// `Err(DimensionMismatch)` unless `found == expected`.
fn expect(what: &'static str, expected: usize, found: usize) -> Result<()> {
    if found == expected {
        Ok(())
    } else {
        Err(CoreError::DimensionMismatch {
            what,
            expected,
            found,
        })
    }
}

/// The shapes [`head_attention`] relies on: `d > 0` (a multiple of 32 for q8 rows), query
/// heads a multiple of the KV heads, `q` and `out` `n x (n_heads d)`, and every KV head
/// holding at least the rows of positions `first ..= pos0 + n - 1` with `first <= pos0`.
fn check(
    kv: &[PrefillHead<'_>],
    shape: &PrefillShape,
    q: &[f32],
    n: usize,
    pos0: usize,
    out: &[f32],
) -> Result<()> {
    let d = shape.dim;
    if d == 0 {
        return expect(
            "head dimension of prefill attention (must be positive)",
            1,
            0,
        );
    }
    if kv.is_empty() {
        return expect("KV heads of prefill attention (at least one)", 1, 0);
    }
    if !shape.n_heads.is_multiple_of(kv.len()) {
        return expect(
            "query heads of prefill attention (a multiple of the KV heads)",
            shape.n_heads.div_ceil(kv.len()) * kv.len(),
            shape.n_heads,
        );
    }
    let qd = shape.n_heads * d;
    expect(
        "queries of prefill attention (n x n_heads d)",
        n * qd,
        q.len(),
    )?;
    expect(
        "output of prefill attention (n x n_heads d)",
        n * qd,
        out.len(),
    )?;
    for h in kv {
        if matches!(h.keys, Rows::Q8(_)) || matches!(h.values, Rows::Q8(_)) {
            expect(
                "head dimension of q8 rows in prefill attention (a multiple of 32)",
                d - d % Q8_BLOCK,
                d,
            )?;
        }
        if h.first > pos0 {
            return expect(
                "first cached position of prefill attention (at most the block's first)",
                pos0,
                h.first,
            );
        }
        let rows = (pos0 + n - h.first) * d;
        for (what, len) in [
            (
                "cached keys of prefill attention (rows up to the block's last)",
                h.keys.len(),
            ),
            (
                "cached values of prefill attention (rows up to the block's last)",
                h.values.len(),
            ),
        ] {
            if len < rows {
                return expect(what, rows, len);
            }
        }
    }
    Ok(())
}

/// Causal dense attention of a block of `n` queries (`q`: `n x (n_heads d)`) at positions
/// `pos0..pos0 + n` over each KV head's cached rows (`kv`, one per KV head, holding the
/// block's own positions already); writes `n x (n_heads d)` into `out`.
///
/// # Errors
/// [`CoreError::DimensionMismatch`] when the shapes disagree: `d == 0` (or not a multiple of
/// 32 for q8 rows), query heads not a multiple of `kv.len()`, `q` or `out` not
/// `n x (n_heads d)`, or a KV head not holding positions `first ..= pos0 + n - 1` (rows
/// after those are not read).
pub fn prefill_attention(
    kv: &[PrefillHead<'_>],
    shape: &PrefillShape,
    q: &[f32],
    n: usize,
    pos0: usize,
    out: &mut [f32],
) -> Result<()> {
    check(kv, shape, q, n, pos0, out)?;
    if n == 0 {
        return Ok(());
    }
    let d = shape.dim;
    let qd = shape.n_heads * d;
    let group = shape.n_heads / kv.len();
    let heads: Vec<Vec<f32>> = (0..shape.n_heads)
        .into_par_iter()
        .map(|h| {
            let mut o = vec![0.0f32; n * d];
            let qh = &q[h * d..];
            let map = ScoreMap {
                scale: shape.scale,
                softcap: shape.softcap,
            };
            head_attention(
                &kv[h / group],
                d,
                shape.window,
                qh,
                qd,
                n,
                pos0,
                map,
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
    use qada_stats::f16;

    fn noise(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| ((i as u32).wrapping_mul(2654435761) ^ seed) as f32 / u32::MAX as f32 - 0.5)
            .map(|x| x * 3.0)
            .collect()
    }

    #[derive(Clone, Copy, Debug)]
    enum Dtype {
        F32,
        F16,
        Q8,
    }

    /// Tiled attention equals a direct softmax (f64) over each query's visible keys, across
    /// tiles, blocks after a long context, sliding windows (with the positions before the
    /// window dropped from the cache), every cache element type, and soft-capped scores.
    #[test]
    fn tiles_with_a_running_softmax_equal_the_direct_softmax() {
        for (window, dtype, d, cap) in [
            (None, Dtype::F32, 4, None),
            (None, Dtype::F16, 4, None),
            (Some(700), Dtype::F16, 4, None),
            (Some(3), Dtype::F32, 4, None),
            (None, Dtype::Q8, 32, None),
            (Some(700), Dtype::Q8, 32, None),
            (None, Dtype::F32, 4, Some(0.3)),
            (Some(700), Dtype::F16, 4, Some(0.3)),
        ] {
            let (pos0, n) = (1100, 300);
            let keys = noise((pos0 + n) * d, 1);
            let values = noise((pos0 + n) * d, 2);
            // a sliding layer's cache keeps the positions the block's first query sees on
            let first = window.map_or(0, |w: usize| (pos0 + 1).saturating_sub(w));
            let rounded = |x: &[f32]| -> Vec<f32> {
                match dtype {
                    Dtype::F16 => x.iter().map(|&v| f16::from_f32(v).to_f32()).collect(),
                    Dtype::F32 => x.to_vec(),
                    Dtype::Q8 => {
                        let mut b = Vec::new();
                        Q8Block::quantize_into(x, &mut b);
                        let mut out = vec![0.0f32; x.len()];
                        Q8Block::dequantize_into(&b, &mut out);
                        out
                    }
                }
            };
            let (rk, rv) = (rounded(&keys), rounded(&values));
            let kept = |x: &[f32]| x[first * d..].to_vec();
            let (k16, v16): (Vec<f16>, Vec<f16>) = (
                kept(&keys).iter().map(|&v| f16::from_f32(v)).collect(),
                kept(&values).iter().map(|&v| f16::from_f32(v)).collect(),
            );
            let (mut k8, mut v8) = (Vec::new(), Vec::new());
            Q8Block::quantize_into(&kept(&keys), &mut k8);
            Q8Block::quantize_into(&kept(&values), &mut v8);
            let (kf, vf) = (kept(&keys), kept(&values));
            let (k_rows, v_rows) = match dtype {
                Dtype::F32 => (Rows::F32(&kf), Rows::F32(&vf)),
                Dtype::F16 => (Rows::F16(&k16), Rows::F16(&v16)),
                Dtype::Q8 => (Rows::Q8(&k8), Rows::Q8(&v8)),
            };
            let head = PrefillHead {
                keys: k_rows,
                values: v_rows,
                first,
            };
            let shape = PrefillShape {
                n_heads: 1,
                dim: d,
                scale: 0.5,
                softcap: cap,
                window,
            };
            let q = noise(n * d, 3);
            let mut out = vec![0.0f32; n * d];
            prefill_attention(&[head], &shape, &q, n, pos0, &mut out).unwrap();
            for i in 0..n {
                let p = pos0 + i;
                let lo = window.map_or(0, |w| (p + 1).saturating_sub(w));
                let s: Vec<f64> = (lo..=p)
                    .map(|j| {
                        (0..d)
                            .map(|k| q[i * d + k] as f64 * rk[j * d + k] as f64)
                            .sum::<f64>()
                            * 0.5
                    })
                    .map(|x| cap.map_or(x, |c| c as f64 * (x / c as f64).tanh()))
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
                        "{window:?} {dtype:?} query {i} dim {k}: {got} vs {want}"
                    );
                }
            }
        }
    }

    /// Wrong shapes are errors, not panics: short queries, too few cached rows, a first
    /// position after the block, q8 rows of a dimension that splits blocks, heads that do
    /// not divide.
    #[test]
    fn wrong_shapes_are_errors() {
        let (d, n, pos0) = (4, 2, 3);
        let rows = vec![0.5f32; (pos0 + n) * d];
        let head = PrefillHead {
            keys: Rows::F32(&rows),
            values: Rows::F32(&rows),
            first: 0,
        };
        let shape = PrefillShape {
            n_heads: 2,
            dim: d,
            scale: 1.0,
            softcap: None,
            window: None,
        };
        let q = vec![1.0f32; n * 2 * d];
        let mut out = vec![0.0f32; n * 2 * d];
        assert!(prefill_attention(&[head], &shape, &q, n, pos0, &mut out).is_ok());
        assert!(out.iter().all(|&o| (o - 0.5).abs() < 1e-6));
        assert!(prefill_attention(&[head], &shape, &q[1..], n, pos0, &mut out).is_err());
        assert!(prefill_attention(&[head], &shape, &q, n, pos0 + 1, &mut out).is_err());
        assert!(prefill_attention(&[], &shape, &q, n, pos0, &mut out).is_err());
        let late = PrefillHead { first: 4, ..head };
        assert!(prefill_attention(&[late], &shape, &q, n, pos0, &mut out).is_err());
        let three = PrefillShape {
            n_heads: 3,
            ..shape
        };
        assert!(prefill_attention(&[head, head], &three, &q, n, pos0, &mut out).is_err());
        let zero = PrefillShape { dim: 0, ..shape };
        assert!(prefill_attention(&[head], &zero, &q, n, pos0, &mut out).is_err());
        let blocks = vec![Q8Block::default(); 8];
        let q8 = PrefillHead {
            keys: Rows::Q8(&blocks),
            values: Rows::Q8(&blocks),
            first: 0,
        };
        // 256 values: 64 rows of 4, but 4 splits blocks of 32
        assert!(prefill_attention(&[q8], &shape, &q, n, 62, &mut out).is_err());
    }
}
