//! [`Q8Block`]: 32 values stored as 8-bit integers with one f16 scale (the layout llama.cpp
//! calls q8_0), the element type of a `--kv q8` cache.
//!
//! A block stores `x_i ~ d q_i` for `i < 32`, with `d = amax / 127` (`amax = max_i |x_i|`)
//! rounded *up* to the next f16, and `q_i = round(x_i / d)` in `[-127, 127]`. Rounding the
//! scale up keeps every `|x_i / d| <= 127`, so no quant is clamped and the reconstruction error
//! is at most `d / 2` per value, also where `d` is an f16 subnormal (`amax` below about
//! `7.6e-3`, down to `d = 2^-24`). Two limits: `amax` below `127 * 2^-25` gives `d = 2^-24`
//! (error still at most `d / 2`, but `d` no longer follows `amax`); `amax` above
//! `127 * 65504` (about `8.3e6`) saturates `d` at the f16 maximum and clamps the quants (the
//! cache of a model never holds such keys). NaN quantizes to 0.
//!
//! `d q_i` is exact in f32 (11 significant bits times 7), so the dequantized rows are exactly
//! what the attention kernels multiply with.

use half::f16;

/// Values per block.
pub const Q8_BLOCK: usize = 32;

/// 32 values as `x_i ~ d q_i`: an f16 scale `d`, then 32 int8 quants (34 bytes, alignment 2;
/// llama.cpp's `block_q8_0`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct Q8Block {
    /// The scale `d`.
    pub d: f16,
    /// The quants `q_i`, in `[-127, 127]` when made by [`Q8Block::quantize`].
    pub qs: [i8; Q8_BLOCK],
}

const _: () = assert!(std::mem::size_of::<Q8Block>() == 34);
const _: () = assert!(std::mem::align_of::<Q8Block>() == 2);

impl Q8Block {
    /// The block of `x`: `d = amax / 127` rounded up to an f16, `q_i = round(x_i * (1 / d))`
    /// (the reciprocal, as ggml's reference: the f32 product can land a hair past the half step).
    pub fn quantize(x: &[f32; Q8_BLOCK]) -> Q8Block {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        if amax == 0.0 {
            return Q8Block::default();
        }
        let want = amax / 127.0;
        let mut d = f16::from_f32(want);
        if d.is_infinite() {
            d = f16::MAX;
        } else if d.to_f32() < want && d < f16::MAX {
            // the next f16 up (`d` is finite and not negative)
            d = f16::from_bits(d.to_bits() + 1);
        }
        let inv = 1.0 / d.to_f32();
        let mut qs = [0i8; Q8_BLOCK];
        for (q, &v) in qs.iter_mut().zip(x) {
            // `as` saturates (and maps NaN to 0); the clamp keeps -128 out
            *q = (v * inv).round().clamp(-127.0, 127.0) as i8;
        }
        Q8Block { d, qs }
    }

    /// The 32 values `d q_i`.
    pub fn dequantize(&self, out: &mut [f32; Q8_BLOCK]) {
        let d = self.d.to_f32();
        for (o, &q) in out.iter_mut().zip(&self.qs) {
            *o = d * f32::from(q);
        }
    }

    /// Quantize `x` (a whole number of blocks: `x.len() % 32 == 0`) onto the end of `out`;
    /// a ragged tail of fewer than 32 values is ignored (callers check lengths first).
    pub fn quantize_into(x: &[f32], out: &mut Vec<Q8Block>) {
        out.extend(
            x.chunks_exact(Q8_BLOCK)
                .map(|c| Q8Block::quantize(c.try_into().expect("chunks_exact gives 32 values"))),
        );
    }

    /// Dequantize `blocks` into `out`, over the common prefix (whole blocks only).
    pub fn dequantize_into(blocks: &[Q8Block], out: &mut [f32]) {
        for (b, o) in blocks.iter().zip(out.chunks_exact_mut(Q8_BLOCK)) {
            b.dequantize(o.try_into().expect("chunks_exact_mut gives 32 values"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantize_known_block() {
        let mut x = [0.0f32; 32];
        x[0] = 127.0;
        x[1] = -63.4;
        x[2] = 0.6;
        let b = Q8Block::quantize(&x);
        assert_eq!(b.d, f16::ONE);
        assert_eq!(&b.qs[..4], &[127, -63, 1, 0]);
        let mut y = [0.0f32; 32];
        b.dequantize(&mut y);
        assert_eq!(&y[..3], &[127.0, -63.0, 1.0]);
        assert_eq!(Q8Block::quantize(&[0.0; 32]), Q8Block::default());
    }

    #[test]
    fn huge_values_saturate_the_scale() {
        let b = Q8Block::quantize(&[1e30; 32]);
        assert_eq!(b.d, f16::MAX);
        assert!(b.qs.iter().all(|&q| q == 127));
    }
}
