//! Prefill's products with int8 activations: `Y = X W^T` for a block of tokens, the weights
//! written once per tile in integer form (`w = d u + m` per sub-block,
//! [`crate::quant::int_form_row`]) and the tokens quantized once per product ([`TokenActs`]).
//!
//! Per row `r`, token `t` and sub-block `s` (16 or 32 values):
//! `y_rt += (sum_j u_rj q_tj) (d_rs d_t) + m_rs x_ts`, with `x_ts = d_t sum_j q_tj` the
//! activations' own sum over the sub-block, so the minimum meets exactly what the integers
//! multiplied. The integer sums are exact; the result differs from the f32 tiles by the
//! activations' 8-bit rounding only, as decoding's int8 kernels do.
//!
//! Eight rows form a [`Group`], interleaved four values at a time: one 32-byte load holds four
//! consecutive values of each of the eight rows, so one `vpdpbusd` (AVX-VNNI) or one
//! `vpmaddubsw` + `vpmaddwd` (AVX2) against the token's four values broadcast adds four
//! products to each row's i32 lane: no horizontal sums. A group is reused for every token.
//! The kernels: [`group_tokens_portable`] here, the AVX2 and AVX-VNNI ones in
//! `tiles_int8_x86.rs`, all with the same float operations in the same order, so they agree
//! bit for bit; `tiles_int8_matmul.rs` chooses one and runs the product over tiles of rows.

use rayon::prelude::*;

use super::acts::quantize_block;
use super::QK;
use crate::quant::{int_form_row, int_form_shape, GgmlType};

/// Rows of a [`Group`]: the eight i32 lanes of a 256-bit register.
pub(crate) const GROUP: usize = 8;
/// Tokens a kernel call multiplies by one group (an accumulator register each).
pub(crate) const CHUNK: usize = 4;

/// Activations of `n` tokens of `k` values each (`k` a multiple of 32), quantized per
/// 32-block as decoding's int8 path does: `x ~ d q`, `d = max|x| / 127`, `q` in [-127, 127].
#[derive(Clone, Debug)]
pub(crate) struct TokenActs {
    pub(crate) n: usize,
    pub(crate) k: usize,
    /// `n * k` quantized values, token after token.
    pub(crate) q: Vec<i8>,
    /// `n * k / 32` block scales.
    pub(crate) d: Vec<f32>,
    /// `n * k / 16`: `d * sum(q)` over each 16 values.
    pub(crate) s16: Vec<f32>,
    /// `n * k / 32`: `d * sum(q)` over each 32 values.
    pub(crate) s32: Vec<f32>,
}

impl TokenActs {
    /// Quantize the first `n` rows of `x` (`n x k`, row-major). `None` when `k` is not a
    /// multiple of 32 or `x` holds fewer than `n * k` values.
    pub(crate) fn quantize(x: &[f32], n: usize, k: usize) -> Option<TokenActs> {
        if !k.is_multiple_of(QK) || x.len() < n.checked_mul(k)? {
            return None;
        }
        let blocks = k / QK;
        let mut a = TokenActs {
            n,
            k,
            q: vec![0; n * k],
            d: vec![0.0; n * blocks],
            s16: vec![0.0; 2 * n * blocks],
            s32: vec![0.0; n * blocks],
        };
        // token by token in parallel: `blocks` blocks of 32 each
        a.q.par_chunks_mut(k.max(1))
            .zip(a.d.par_chunks_mut(blocks.max(1)))
            .zip(a.s16.par_chunks_mut(2 * blocks.max(1)))
            .zip(a.s32.par_chunks_mut(blocks.max(1)))
            .zip(x[..n * k].par_chunks(k.max(1)))
            .for_each(|((((q, d), s16), s32), x)| {
                for b in 0..blocks {
                    let q = &mut q[b * QK..(b + 1) * QK];
                    d[b] = quantize_block(&x[b * QK..(b + 1) * QK], q);
                    let sum = |h: &[i8]| h.iter().map(|&v| v as i32).sum::<i32>();
                    let (lo, hi) = (sum(&q[..16]), sum(&q[16..]));
                    s16[2 * b] = d[b] * lo as f32;
                    s16[2 * b + 1] = d[b] * hi as f32;
                    s32[b] = d[b] * (lo + hi) as f32;
                }
            });
        Some(a)
    }

    /// The token's sums over sub-blocks of `sub` values (16 or 32).
    #[inline]
    pub(crate) fn sums(&self, sub: usize) -> &[f32] {
        if sub == 16 {
            &self.s16
        } else {
            &self.s32
        }
    }
}

/// Eight rows of `k` values in integer form: byte `32 e + 4 r + i` of `u` is value `4 e + i`
/// of row `r`; `d[8 s + r]` and `m[8 s + r]` are row `r`'s pair of sub-block `s`. Rows past the
/// matrix's end are zeros (their outputs are dropped).
#[derive(Clone, Debug)]
pub(crate) struct Group {
    pub(crate) u: Vec<u8>,
    pub(crate) d: Vec<f32>,
    pub(crate) m: Vec<f32>,
}

impl Group {
    /// Rows `r0 .. r0 + 8` (those that exist) of `ty` blocks, `row_bytes` each, from `data`;
    /// `None` when a row has no integer form of `k` values.
    pub(crate) fn pack(
        ty: GgmlType,
        data: &[u8],
        row_bytes: usize,
        rows: usize,
        r0: usize,
        k: usize,
    ) -> Option<Group> {
        let (sub, _) = int_form_shape(ty)?;
        let subs = k / sub;
        let mut g = Group {
            u: vec![0; GROUP * k],
            d: vec![0.0; GROUP * subs],
            m: vec![0.0; GROUP * subs],
        };
        let (mut u, mut d, mut m) = (vec![0u8; k], vec![0.0f32; subs], vec![0.0f32; subs]);
        for r in 0..GROUP.min(rows.saturating_sub(r0)) {
            let row = data.get((r0 + r) * row_bytes..(r0 + r + 1) * row_bytes)?;
            if !int_form_row(ty, row, &mut u, &mut d, &mut m) {
                return None;
            }
            for (e, four) in u.chunks_exact(4).enumerate() {
                g.u[32 * e + 4 * r..32 * e + 4 * r + 4].copy_from_slice(four);
            }
            for s in 0..subs {
                g.d[GROUP * s + r] = d[s];
                g.m[GROUP * s + r] = m[s];
            }
        }
        Some(g)
    }
}

/// `out[8 c + r] = sum_s (sum_j u_rj q_tj) (d_rs d_t) + m_rs x_ts` for the `c < count`
/// tokens `t = t0 + c` (the other entries of `out` untouched), summed over the sub-blocks
/// `s` in order, each step one fused multiply-add.
///
/// # Panics
/// When `g` or `a` are not of `a.k` values, `t0 + count > a.n`, `count > 4` or `out` is
/// shorter than `8 count`.
pub(crate) fn group_tokens_portable(
    g: &Group,
    sub: usize,
    a: &TokenActs,
    t0: usize,
    count: usize,
    out: &mut [f32],
) {
    let k = a.k;
    assert!(count <= CHUNK && t0 + count <= a.n && out.len() >= GROUP * count);
    assert!(g.u.len() == GROUP * k && g.d.len() * sub == GROUP * k);
    let sums = a.sums(sub);
    for c in 0..count {
        let t = t0 + c;
        let q = &a.q[t * k..(t + 1) * k];
        for r in 0..GROUP {
            let mut acc = 0.0f32;
            for s in 0..k / sub {
                let isum: i32 = (s * sub..(s + 1) * sub)
                    .map(|j| g.u[32 * (j / 4) + 4 * r + j % 4] as i32 * q[j] as i32)
                    .sum();
                let dd = g.d[GROUP * s + r] * a.d[t * k / QK + s * sub / QK];
                acc = (isum as f32).mul_add(dd, acc);
                acc = g.m[GROUP * s + r].mul_add(sums[t * k / sub + s], acc);
            }
            out[GROUP * c + r] = acc;
        }
    }
}
