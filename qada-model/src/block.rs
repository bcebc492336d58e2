//! The transformer block, written once: `n` rows of the residual stream (a prefill block, or
//! the one token of a decoding step) through layer `l`, as the family and the layer's
//! [`crate::config::LayerSpec`] say. With `N` the layer's RMSNorms:
//!
//! - `q = rope(qn(Wq N_attn(x)))`, `k = rope(kn(Wk N_attn(x)))`, `v = Wv N_attn(x)`
//!   (`qn`, `kn`: per-head QK-norm where the family has it, identity elsewhere; `rope`: the
//!   identity on a NoPE layer);
//! - `x += N_post_attn(Wo attend(q, k, v))`;
//! - `x += N_post_ffn(Wd (act(Wg N_ffn(x)) * Wu N_ffn(x)))`
//!   (`N_post_*`: post-norm families only).
//!
//! What `attend` does (dense causal attention in prefill, the criterion in decoding) is the
//! caller's [`Attend`].

use crate::model::Model;
use crate::ops::{gated, rms_norm, rms_norm_inplace};
use crate::qlinear::{ActPrecision, Q8Acts, QLinear};
use crate::rope::{rope_inplace, Rope};
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
    /// Queries, keys and values one after another (`n x qd`, `n x kvd`, `n x kvd`): for one
    /// row, the stacked output of one [`QLinear::matvec_stacked`].
    qkv: Vec<f32>,
    att: Vec<f32>,
    proj: Vec<f32>,
    /// Gate, then up (`n x n_ff` each), stacked the same way.
    gu: Vec<f32>,
    /// Activations prepared for the quantized kernels (single rows).
    pub(crate) acts: Q8Acts,
    /// Positions the session holds: which of longrope's factor sets applies.
    context: usize,
    /// RoPE tables of the rows, `n x rope_dim / 2`, and what they were computed for (the
    /// address of the model's [`Rope`], the first position, the rows).
    rope: Vec<(f32, f32)>,
    rope_for: Option<(usize, usize, usize)>,
    table: Vec<(f32, f32)>,
}

impl Buffers {
    /// Buffers for `capacity` rows of `model`, in a session of `context` positions.
    pub(crate) fn new(model: &Model, capacity: usize, context: usize) -> Self {
        let c = &model.config;
        let (qd, kvd) = (c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim);
        let z = |w: usize| vec![0.0f32; capacity * w];
        Buffers {
            capacity,
            x: z(c.n_embd),
            h: z(c.n_embd),
            qkv: z(qd + 2 * kvd),
            att: z(qd),
            proj: z(c.n_embd),
            gu: z(2 * c.n_ff),
            acts: Q8Acts {
                precision: model.activations,
                ..Default::default()
            },
            context,
            rope: Vec::new(),
            rope_for: None,
            table: Vec::new(),
        }
    }

    /// RoPE tables for rows at `pos0..pos0 + n`, recomputed only when the layer's RoPE or the
    /// positions change (decoding computes them once per step, Gemma twice).
    fn rope_tables(&mut self, rope: &Rope, pos0: usize, n: usize) {
        let key = (rope as *const Rope as usize, pos0, n);
        if self.rope_for == Some(key) {
            return;
        }
        self.rope.clear();
        for i in 0..n {
            rope.table(pos0 + i, &mut self.table);
            self.rope.extend_from_slice(&self.table);
        }
        self.rope_for = Some(key);
    }
}

/// `Y_j = X W_j^T` for `n` rows `X` and several matrices, the outputs one after another in
/// `y` (`n x rows_1`, then `n x rows_2`, ...). A single row is prepared once for the quantized
/// kernels and goes through one [`QLinear::matvec_stacked`]; a block of rows goes through
/// [`QLinear::matmul_rows`] per matrix (f32 products on dequantized tiles), or, with int8
/// activations, [`QLinear::matmul_rows_int8`] (quantized once for all the matrices).
fn products(acts: &mut Q8Acts, x: &[f32], n: usize, ws: &[&QLinear], y: &mut [f32]) -> Result<()> {
    if n == 1 {
        acts.quantize(x);
        return QLinear::matvec_stacked(ws, acts, y);
    }
    let int8 = match (acts.precision, ws.first()) {
        (ActPrecision::Int8, Some(w)) => QLinear::prepare_int8(x, n, w.cols()),
        _ => None,
    };
    let mut rest = y;
    for w in ws {
        let (out, tail) = rest.split_at_mut(n * w.rows());
        match &int8 {
            Some(xq) => w.matmul_rows_int8(x, xq, n, out)?,
            None => w.matmul_rows(x, n, out)?,
        }
        rest = tail;
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
    let rope = model.rope(l, r.context);
    if let Some(rope) = rope {
        r.rope_tables(rope, pos0, n);
    }
    let qkv = &mut r.qkv[..n * (qd + 2 * kvd)];
    products(
        &mut r.acts,
        &r.h[..n * e],
        n,
        &[&blk.q, &blk.k, &blk.v],
        qkv,
    )?;
    let (q, kv) = qkv.split_at_mut(n * qd);
    let (k, v) = kv.split_at_mut(n * kvd);
    if let (Some(qn), Some(kn)) = (&blk.q_norm, &blk.k_norm) {
        norm_pieces(q, qn, eps);
        norm_pieces(k, kn, eps);
    }
    if let Some(rope) = rope {
        let half = rope.inv_freq.len();
        for i in 0..n {
            let table = &r.rope[i * half..(i + 1) * half];
            rope_inplace(&mut q[i * qd..(i + 1) * qd], d, table, rope.style);
            rope_inplace(&mut k[i * kvd..(i + 1) * kvd], d, table, rope.style);
        }
    }
    attend.attend(l, q, k, v, n, pos0, &mut r.att[..n * qd])?;

    let proj = &mut r.proj[..n * e];
    products(&mut r.acts, &r.att[..n * qd], n, &[&blk.o], proj)?;
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
    let gu = &mut r.gu[..2 * n * f];
    products(&mut r.acts, &r.h[..n * e], n, &[&blk.gate, &blk.up], gu)?;
    let (g, u) = gu.split_at_mut(n * f);
    gated(c.family.activation, g, u);
    products(&mut r.acts, g, n, &[&blk.down], proj)?;
    if let Some(w) = &blk.post_ffn_norm {
        norm_pieces(proj, w, eps);
    }
    r.x[..n * e]
        .iter_mut()
        .zip(&*proj)
        .for_each(|(a, b)| *a += b);
    Ok(())
}
