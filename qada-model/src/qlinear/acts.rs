//! Activations prepared once per matrix-vector product, in every form the kernels read.

use super::QK;

/// How activations enter the quantized products.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ActPrecision {
    /// f32 activations against unpacked weights: the f32 path's result up to summation order.
    #[default]
    F32,
    /// Activations rounded to 8 bits per 32-block, integer products (llama.cpp's scheme).
    Int8,
}

/// Activations `x` prepared for the products of one or more layers: as f32 with per-block
/// sums and in the Q4 kernel's nibble order, and (for [`ActPrecision::Int8`]) quantized per
/// block of 32, `x ~ d q` with `q` in [-127, 127].
///
/// Every buffer is rebuilt by [`Q8Acts::quantize`], so the lengths always agree with
/// [`Q8Acts::len`]: the kernels rely on it.
#[derive(Clone, Debug, Default)]
pub struct Q8Acts {
    /// The f32 activations (for the types multiplied in f32).
    pub(crate) f: Vec<f32>,
    /// Scale of each block.
    pub(crate) d: Vec<f32>,
    /// `d * sum(q)` of each block.
    pub(crate) s: Vec<f32>,
    /// Quantized values, `32 * blocks` (the last block padded with zeros).
    pub(crate) q: Vec<i8>,
    /// Sum of the f32 values of each block.
    pub(crate) sums: Vec<f32>,
    /// The f32 activations of each 32-block in the order the AVX2 Q4 kernel unpacks nibbles
    /// ([`nibble_order`]), the last block padded with zeros.
    pub(crate) f_nib: Vec<f32>,
    /// Which product to use: f32 activations (near-exact) or int8 (faster, coarser).
    pub(crate) precision: ActPrecision,
}

impl Q8Acts {
    /// Empty activations that will be prepared for products at `precision`.
    pub fn new(precision: ActPrecision) -> Self {
        Q8Acts {
            precision,
            ..Default::default()
        }
    }

    /// The precision the products use.
    pub fn precision(&self) -> ActPrecision {
        self.precision
    }

    /// Number of activations (the `x` of the last [`Q8Acts::quantize`]).
    pub fn len(&self) -> usize {
        self.f.len()
    }

    /// True before the first [`Q8Acts::quantize`] or after one of an empty `x`.
    pub fn is_empty(&self) -> bool {
        self.f.is_empty()
    }

    /// The f32 activations.
    pub fn values(&self) -> &[f32] {
        &self.f
    }

    /// Prepare `x` (any length; a partial last block is padded with zeros).
    pub fn quantize(&mut self, x: &[f32]) {
        let nb = x.len().div_ceil(QK);
        self.f.clear();
        self.f.extend_from_slice(x);
        self.sums.clear();
        self.sums
            .extend(x.chunks(QK).map(|c| c.iter().sum::<f32>()));
        self.f_nib.clear();
        self.f_nib.resize(nb * QK, 0.0);
        for (b, out) in self.f_nib.chunks_exact_mut(QK).enumerate() {
            for (p, o) in out.iter_mut().enumerate() {
                *o = x.get(b * QK + nibble_order(p)).copied().unwrap_or(0.0);
            }
        }
        if self.precision == ActPrecision::F32 {
            return;
        }
        self.d.resize(nb, 0.0);
        self.s.resize(nb, 0.0);
        self.q.resize(nb * QK, 0);
        for b in 0..nb {
            let xs = &x[b * QK..((b + 1) * QK).min(x.len())];
            let amax = xs.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            let d = amax / 127.0;
            let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
            let q = &mut self.q[b * QK..(b + 1) * QK];
            let mut sum = 0i32;
            for (i, qi) in q.iter_mut().enumerate() {
                let v = xs.get(i).map_or(0, |&v| (v * inv).round() as i32);
                *qi = v.clamp(-127, 127) as i8;
                sum += *qi as i32;
            }
            self.d[b] = d;
            self.s[b] = d * sum as f32;
        }
    }
}

/// Which value of a Q4 block the AVX2 kernel finds in position `p` (0..32) of its four 8-lane
/// vectors: vector `k = p / 8` shifts the block's four 32-bit words (read twice) right by
/// `8k` in lanes 0-3 and `8k + 4` in lanes 4-7, so lane `l < 4` holds the low nibble of byte
/// `4l + k` (value `4l + k`) and lane `4 + l` its high nibble (value `16 + 4l + k`).
pub(crate) fn nibble_order(p: usize) -> usize {
    let (k, lane) = (p / 8, p % 8);
    if lane < 4 {
        4 * lane + k
    } else {
        16 + 4 * (lane - 4) + k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nibble_order_is_a_permutation_of_a_block() {
        let mut seen = [false; QK];
        for p in 0..QK {
            seen[nibble_order(p)] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn every_buffer_follows_the_length_of_x() {
        let mut a = Q8Acts::new(ActPrecision::Int8);
        for n in [70usize, 0, 64, 33] {
            let x: Vec<f32> = (0..n).map(|i| i as f32 - 20.0).collect();
            a.quantize(&x);
            let nb = n.div_ceil(QK);
            assert_eq!(a.len(), n);
            assert_eq!((a.sums.len(), a.d.len(), a.s.len()), (nb, nb, nb));
            assert_eq!((a.q.len(), a.f_nib.len()), (nb * QK, nb * QK));
        }
    }
}
