//! Blocks in integer form: every value `w = d u + m` with `u` an unsigned integer and one
//! `(d, m)` pair per sub-block of 16 or 32 values. Prefill's int8 tiles
//! (`qlinear::tiles_int8`) multiply `u` by int8 activations and apply `d` and `m` once per
//! sub-block: `sum w x ~ d d_x sum(u q_x) + m d_x sum(q_x)`.
//!
//! | type | sub-block | u | d | m |
//! |---|---|---|---|---|
//! | Q4_0 | 32 | `q` (0..15) | `d` | `-8 d` |
//! | Q4_1 | 32 | `q` (0..15) | `d` | `m` |
//! | Q5_0 | 32 | `q` (0..31) | `d` | `-16 d` |
//! | Q5_1 | 32 | `q` (0..31) | `d` | `m` |
//! | Q8_0 | 32 | `q + 128` (0..255) | `d` | `-128 d` |
//! | Q4_K | 32 | `q` (0..15) | `d sc` | `-dmin m` |
//! | Q5_K | 32 | `q` (0..31) | `d sc` | `-dmin m` |
//! | Q6_K | 16 | `q` (0..63) | `d sc` | `-32 d sc` |

use super::blocks::{
    f16_value, view, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K,
    BlockQ8_0, QuantBlock,
};
use super::dequant::k4_scales_mins;
use super::GgmlType;

/// A block that can be written in integer form.
pub(crate) trait IntForm: QuantBlock {
    /// Values per `(d, m)` pair.
    const SUB: usize;
    /// Write the block's `VALUES` integers to `u` and its `VALUES / SUB` pairs to `d`, `m`.
    ///
    /// # Panics
    /// When a slice is shorter than that.
    fn int_form(&self, u: &mut [u8], d: &mut [f32], m: &mut [f32]);
}

/// Values per `(d, m)` pair of `ty`'s integer form, and the largest `u` it holds; `None` for a
/// type without one.
pub fn int_form_shape(ty: GgmlType) -> Option<(usize, u8)> {
    use GgmlType::*;
    Some(match ty {
        Q4_0 | Q4_1 | Q4_K => (32, 15),
        Q5_0 | Q5_1 | Q5_K => (32, 31),
        Q8_0 => (32, 255),
        Q6_K => (16, 63),
        _ => return None,
    })
}

/// A row of `ty` blocks in integer form: `u` gets one integer per value, `d` and `m` one value
/// per sub-block ([`int_form_shape`]). Returns `false` (writing nothing) for a type without an
/// integer form or when `bytes` is not whole blocks holding `u.len()` values or `d`, `m` are
/// not one per sub-block.
pub fn int_form_row(
    ty: GgmlType,
    bytes: &[u8],
    u: &mut [u8],
    d: &mut [f32],
    m: &mut [f32],
) -> bool {
    let Some((sub, _)) = int_form_shape(ty) else {
        return false;
    };
    if ty.bytes_for(u.len() as u64) != Some(bytes.len() as u64)
        || d.len() * sub != u.len()
        || m.len() != d.len()
    {
        return false;
    }
    use GgmlType::*;
    match ty {
        Q4_0 => blocks::<BlockQ4_0>(bytes, u, d, m),
        Q4_1 => blocks::<BlockQ4_1>(bytes, u, d, m),
        Q5_0 => blocks::<BlockQ5_0>(bytes, u, d, m),
        Q5_1 => blocks::<BlockQ5_1>(bytes, u, d, m),
        Q8_0 => blocks::<BlockQ8_0>(bytes, u, d, m),
        Q4_K => blocks::<BlockQ4K>(bytes, u, d, m),
        Q5_K => blocks::<BlockQ5K>(bytes, u, d, m),
        Q6_K => blocks::<BlockQ6K>(bytes, u, d, m),
        _ => false,
    }
}

/// Every block of `bytes`, viewed as `B`, in integer form.
fn blocks<B: IntForm>(bytes: &[u8], u: &mut [u8], d: &mut [f32], m: &mut [f32]) -> bool {
    let Some(row) = view::<B>(bytes) else {
        return false;
    };
    let per = B::VALUES / B::SUB;
    for (((b, u), d), m) in row
        .iter()
        .zip(u.chunks_exact_mut(B::VALUES))
        .zip(d.chunks_exact_mut(per))
        .zip(m.chunks_exact_mut(per))
    {
        b.int_form(u, d, m);
    }
    true
}

/// The 32 nibbles of `qs`: low nibbles first, then high nibbles (Q4_0, Q4_1, Q5_0, Q5_1).
#[inline]
fn nibbles(qs: &[u8; 16], u: &mut [u8]) {
    for (j, &q) in qs.iter().enumerate() {
        u[j] = q & 0x0f;
        u[j + 16] = q >> 4;
    }
}

/// The fifth bits of Q5_0 and Q5_1: bit `j` of `qh` is value `j`'s.
#[inline]
fn fifth_bits(qh: [u8; 4], u: &mut [u8]) {
    let qh = u32::from_le_bytes(qh);
    for (j, v) in u[..32].iter_mut().enumerate() {
        *v |= (((qh >> j) & 1) << 4) as u8;
    }
}

impl IntForm for BlockQ4_0 {
    const SUB: usize = 32;
    #[inline]
    fn int_form(&self, u: &mut [u8], d: &mut [f32], m: &mut [f32]) {
        nibbles(&self.qs, u);
        d[0] = f16_value(self.d);
        m[0] = -8.0 * d[0];
    }
}

impl IntForm for BlockQ4_1 {
    const SUB: usize = 32;
    #[inline]
    fn int_form(&self, u: &mut [u8], d: &mut [f32], m: &mut [f32]) {
        nibbles(&self.qs, u);
        d[0] = f16_value(self.d);
        m[0] = f16_value(self.m);
    }
}

impl IntForm for BlockQ5_0 {
    const SUB: usize = 32;
    #[inline]
    fn int_form(&self, u: &mut [u8], d: &mut [f32], m: &mut [f32]) {
        nibbles(&self.qs, u);
        fifth_bits(self.qh, u);
        d[0] = f16_value(self.d);
        m[0] = -16.0 * d[0];
    }
}

impl IntForm for BlockQ5_1 {
    const SUB: usize = 32;
    #[inline]
    fn int_form(&self, u: &mut [u8], d: &mut [f32], m: &mut [f32]) {
        nibbles(&self.qs, u);
        fifth_bits(self.qh, u);
        d[0] = f16_value(self.d);
        m[0] = f16_value(self.m);
    }
}

impl IntForm for BlockQ8_0 {
    const SUB: usize = 32;
    #[inline]
    fn int_form(&self, u: &mut [u8], d: &mut [f32], m: &mut [f32]) {
        for (v, &q) in u[..32].iter_mut().zip(&self.qs) {
            *v = (q as u8) ^ 0x80; // q + 128 for an i8 q
        }
        d[0] = f16_value(self.d);
        m[0] = -128.0 * d[0];
    }
}

/// Q4_K and Q5_K: sub-block `s` has scale `d sc_s` and minimum `-dmin m_s`.
#[inline]
fn k4_pairs(dd: f32, dmin: f32, scales: &[u8; 12], d: &mut [f32], m: &mut [f32]) {
    let sm = k4_scales_mins(scales);
    for s in 0..8 {
        d[s] = dd * sm[s] as f32;
        m[s] = -(dmin * sm[8 + s] as f32);
    }
}

impl IntForm for BlockQ4K {
    const SUB: usize = 32;
    #[inline]
    fn int_form(&self, u: &mut [u8], d: &mut [f32], m: &mut [f32]) {
        for (g, q) in self.qs.chunks_exact(32).enumerate() {
            for l in 0..32 {
                u[g * 64 + l] = q[l] & 0x0f;
                u[g * 64 + 32 + l] = q[l] >> 4;
            }
        }
        k4_pairs(f16_value(self.d), f16_value(self.dmin), &self.scales, d, m);
    }
}

impl IntForm for BlockQ5K {
    const SUB: usize = 32;
    #[inline]
    fn int_form(&self, u: &mut [u8], d: &mut [f32], m: &mut [f32]) {
        for (g, q) in self.qs.chunks_exact(32).enumerate() {
            for l in 0..32 {
                let h = self.qh[l] >> (2 * g);
                u[g * 64 + l] = (q[l] & 0x0f) | ((h & 1) << 4);
                u[g * 64 + 32 + l] = (q[l] >> 4) | ((h & 2) << 3);
            }
        }
        k4_pairs(f16_value(self.d), f16_value(self.dmin), &self.scales, d, m);
    }
}

impl IntForm for BlockQ6K {
    const SUB: usize = 16;
    #[inline]
    fn int_form(&self, u: &mut [u8], d: &mut [f32], m: &mut [f32]) {
        for n in 0..2 {
            let (ql, qh) = (&self.ql[n * 64..n * 64 + 64], &self.qh[n * 32..n * 32 + 32]);
            let out = &mut u[n * 128..n * 128 + 128];
            for l in 0..32 {
                out[l] = (ql[l] & 0x0f) | ((qh[l] & 3) << 4);
                out[l + 32] = (ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4);
                out[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                out[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
            }
        }
        let dd = f16_value(self.d);
        for (s, &sc) in self.scales.iter().enumerate() {
            d[s] = dd * sc as f32;
            m[s] = -32.0 * d[s];
        }
    }
}
