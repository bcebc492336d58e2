//! The transformer block, written once: `n` rows of the residual stream (a prefill block, or
//! the one token of a decoding step) through layer `l`, as the family and the layer's
//! [`crate::config::LayerSpec`] say. With `N` the layer's RMSNorms:
//!
//! - `q = rope(qn(Wq N_attn(x)))`, `k = rope(kn(Wk N_attn(x)))`, `v = Wv N_attn(x)`
//!   (`qn`, `kn`: per-head QK-norm where the family has it, identity elsewhere);
//! - `x += N_post_attn(Wo attend(q, k, v))`;
//! - `x += N_post_ffn(Wd (act(Wg N_ffn(x)) * Wu N_ffn(x)))`
//!   (`N_post_*`: post-norm families only).
//!
//! What `attend` does (dense causal attention in prefill, the criterion in decoding) is the
//! caller's [`Attend`].

use crate::model::Model;
use crate::ops::{gated, rms_norm, rms_norm_inplace, rope_inplace, Rope};
use crate::qlinear::{Q8Acts, QLinear};
use crate::Result;

/// What a layer does with its queries, keys and values (RoPE applied) of `n` rows at
/// positions `pos0..pos0 + n`: cache the keys and values, and write `n` attention outputs.
pub(crate) trait Attend {
    /// `q`: `n x (n_heads d)`, `k` and `v`: `n x (n_kv_heads d)`, `out`: `n x (n_heads d)`.
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &mut self,
        layer: usize,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        n: usize,
        pos0: usize,
        out: &mut [f32],
    ) -> Result<()>;
}

/// Buffers for up to `capacity` rows, sized once.
pub(crate) struct Buffers {
    capacity: usize,
    /// The residual stream, `capacity x n_embd`.
    pub(crate) x: Vec<f32>,
    /// Normed rows.
    pub(crate) h: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    proj: Vec<f32>,
    g: Vec<f32>,
    u: Vec<f32>,
    /// Activations prepared for the quantized kernels (single rows).
    pub(crate) acts: Q8Acts,
    /// RoPE tables of the rows, `n x rope_dim / 2`, and what they were computed for.
    rope: Vec<(f32, f32)>,
    rope_for: Option<(Rope, usize, usize)>,
    table: Vec<(f32, f32)>,
}

impl Buffers {
    /// Buffers for `capacity` rows of `model`.
    pub(crate) fn new(model: &Model, capacity: usize) -> Self {
        let c = &model.config;
        let (qd, kvd) = (c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim);
        let z = |w: usize| vec![0.0f32; capacity * w];
        Buffers {
            capacity,
            x: z(c.n_embd),
            h: z(c.n_embd),
            q: z(qd),
            k: z(kvd),
            v: z(kvd),
            att: z(qd),
            proj: z(c.n_embd),
            g: z(c.n_ff),
            u: z(c.n_ff),
            acts: Q8Acts {
                precision: model.activations,
                ..Default::default()
            },
            rope: Vec::new(),
            rope_for: None,
            table: Vec::new(),
        }
    }

    /// RoPE tables for rows at `pos0..pos0 + n`, recomputed only when the layer's RoPE or the
    /// positions change (decoding computes them once per step, Gemma twice).
    fn rope_tables(&mut self, rope: Rope, pos0: usize, n: usize) {
        if self.rope_for == Some((rope, pos0, n)) {
            return;
        }
        self.rope.clear();
        for i in 0..n {
            rope.table(pos0 + i, &mut self.table);
            self.rope.extend_from_slice(&self.table);
        }
        self.rope_for = Some((rope, pos0, n));
    }
}

/// `y_j = W_j x` for one input and several matrices: a single row is prepared once for the
/// quantized kernels ([`QLinear::matvec`]); a block of rows goes through
/// [`QLinear::matmul_rows`].
fn products(
    acts: &mut Q8Acts,
    x: &[f32],
    n: usize,
    outs: &mut [(&QLinear, &mut [f32])],
) -> Result<()> {
    if n == 1 {
        acts.quantize(x);
        for (w, y) in outs.iter_mut() {
            w.matvec(acts, y)?;
        }
    } else {
        for (w, y) in outs.iter_mut() {
            w.matmul_rows(x, n, y)?;
        }
    }
    Ok(())
}

/// RMSNorm of every `w.len()`-wide piece of `x` in place (rows, or heads of rows).
fn norm_pieces(x: &mut [f32], w: &[f32], eps: f32) {
    for piece in x.chunks_exact_mut(w.len()) {
        rms_norm_inplace(piece, w, eps);
    }
}

/// Buffers `0..n` of `r.x`, at positions `pos0..pos0 + n`, through layer `l`.
pub(crate) fn forward(
    model: &Model,
    l: usize,
    r: &mut Buffers,
    n: usize,
    pos0: usize,
    attend: &mut dyn Attend,
) -> Result<()> {
    let c = &model.config;
    let blk = &model.blocks[l];
    let (e, d, f) = (c.n_embd, c.head_dim, c.n_ff);
    let (qd, kvd) = (c.n_heads * d, c.n_kv_heads * d);
    let eps = c.rms_eps;
    debug_assert!(n >= 1 && n <= r.capacity);

    for i in 0..n {
        let row = i * e..(i + 1) * e;
        rms_norm(&r.x[row.clone()], &blk.attn_norm, eps, &mut r.h[row]);
    }
    let rope = model.rope(l);
    r.rope_tables(rope, pos0, n);
    let (q, k, v) = (&mut r.q[..n * qd], &mut r.k[..n * kvd], &mut r.v[..n * kvd]);
    products(
        &mut r.acts,
        &r.h[..n * e],
        n,
        &mut [(&blk.q, &mut *q), (&blk.k, &mut *k), (&blk.v, &mut *v)],
    )?;
    if let (Some(qn), Some(kn)) = (&blk.q_norm, &blk.k_norm) {
        norm_pieces(q, qn, eps);
        norm_pieces(k, kn, eps);
    }
    let half = rope.dim / 2;
    for i in 0..n {
        let table = &r.rope[i * half..(i + 1) * half];
        rope_inplace(&mut q[i * qd..(i + 1) * qd], d, table, rope.style);
        rope_inplace(&mut k[i * kvd..(i + 1) * kvd], d, table, rope.style);
    }
    attend.attend(l, q, k, v, n, pos0, &mut r.att[..n * qd])?;

    let proj = &mut r.proj[..n * e];
    products(
        &mut r.acts,
        &r.att[..n * qd],
        n,
        &mut [(&blk.o, &mut *proj)],
    )?;
    if let Some(w) = &blk.post_attn_norm {
        norm_pieces(proj, w, eps);
    }
    r.x[..n * e]
        .iter_mut()
        .zip(&*proj)
        .for_each(|(a, b)| *a += b);

    for i in 0..n {
        let row = i * e..(i + 1) * e;
        rms_norm(&r.x[row.clone()], &blk.ffn_norm, eps, &mut r.h[row]);
    }
    let (g, u) = (&mut r.g[..n * f], &mut r.u[..n * f]);
    products(
        &mut r.acts,
        &r.h[..n * e],
        n,
        &mut [(&blk.gate, &mut *g), (&blk.up, &mut *u)],
    )?;
    gated(c.family.activation, g, u);
    products(&mut r.acts, g, n, &mut [(&blk.down, &mut *proj)])?;
    if let Some(w) = &blk.post_ffn_norm {
        norm_pieces(proj, w, eps);
    }
    r.x[..n * e]
        .iter_mut()
        .zip(&*proj)
        .for_each(|(a, b)| *a += b);
    Ok(())
}
