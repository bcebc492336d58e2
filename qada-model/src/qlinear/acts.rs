//! Activations prepared once per matrix-vector product, in every form the kernels read.

use super::QK;

/// Values per block of the activations' Q8_K form: one K-quant block.
pub(crate) const QK_K: usize = 256;
/// Values per partial sum (`bsums`) of the Q8_K form: one Q6_K scale group.
pub(crate) const BSUM: usize = 16;

/// How activations enter the quantized products.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ActPrecision {
    /// f32 activations against unpacked weights: the f32 path's result up to summation order.
    #[default]
    F32,
    /// Activations rounded to 8 bits per 32-block (per 256-block against K-quant rows),
    /// integer products (llama.cpp's scheme).
    Int8,
}

impl ActPrecision {
    /// The name `--activations` and Python's `activations=` take: `f32` or `int8`.
    pub fn name(self) -> &'static str {
        match self {
            ActPrecision::F32 => "f32",
            ActPrecision::Int8 => "int8",
        }
    }
}

impl std::fmt::Display for ActPrecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ActPrecision {
    type Err = crate::ModelError;
    /// The precision [`ActPrecision::name`] names.
    fn from_str(s: &str) -> crate::Result<Self> {
        [ActPrecision::F32, ActPrecision::Int8]
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                crate::ModelError::Input(format!(
                    "unknown activation precision {s:?}: use f32 or int8"
                ))
            })
    }
}

/// Activations `x` prepared for the products of one or more layers: as f32 with per-block
/// sums and in the Q4 kernel's nibble order, and (for [`ActPrecision::Int8`]) quantized per
/// block of 32, `x ~ d q` with `q` in [-127, 127], and, when `x` is whole blocks of 256, per
/// block of 256 for the K-quant rows (llama.cpp's Q8_K form).
///
/// Every buffer is rebuilt by [`Q8Acts::quantize`], so the lengths always agree with
/// [`Q8Acts::len`] (the forms of the other precision empty): the kernels rely on it.
#[derive(Clone, Debug, Default)]
pub struct Q8Acts {
    /// The f32 activations (for the types multiplied in f32).
    pub(crate) f: Vec<f32>,
    /// Scale of each block.
    pub(crate) d: Vec<f32>,
    /// `d * sum(q)` of each block.
    pub(crate) s: Vec<f32>,
    /// `sum(q)` of each block.
    pub(crate) qsum: Vec<i32>,
    /// Quantized values, `32 * blocks` (the last block padded with zeros).
    pub(crate) q: Vec<i8>,
    /// Sum of the f32 values of each block.
    pub(crate) sums: Vec<f32>,
    /// The f32 activations of each 32-block in the order the AVX2 Q4 kernel unpacks nibbles
    /// ([`nibble_order`]), the last block padded with zeros; empty for int8 (no kernel reads
    /// it there).
    pub(crate) f_nib: Vec<f32>,
    /// The Q8_K form (one scale per 256 values) the K-quant kernels read; empty unless
    /// int8 and the length is whole blocks of 256.
    pub(crate) k: Q8K,
    /// Whether [`Q8Acts::quantize`] builds the Q8_K form ([`Q8Acts::without_q8k`]).
    pub(crate) no_q8k: bool,
    /// Which product to use: f32 activations (near-exact) or int8 (faster, coarser).
    pub(crate) precision: ActPrecision,
}

/// Activations quantized per block of 256 values, llama.cpp's Q8_K: `x ~ d q` with
/// `d = max|x| / 127` and `q = round(x / d)` in [-127, 127] (llama.cpp takes
/// `d = -x_max / 127`, `x_max` the value of largest magnitude: the same step, sign moved into
/// `q`), and `bsums`, the sum of `q` over each 16 values (`|.| <= 16 * 127 = 2032`).
///
/// A K-quant block meets one scale: its sub-block scales and mins stay integers until one
/// float product per block.
#[derive(Clone, Debug, Default)]
pub(crate) struct Q8K {
    /// Scale of each 256-block.
    pub(crate) d: Vec<f32>,
    /// Quantized values, `256 * blocks`.
    pub(crate) q: Vec<i8>,
    /// `sum(q)` of each 16 values, `16 * blocks`.
    pub(crate) bsums: Vec<i16>,
}

impl Q8K {
    /// Quantize `x` (whole blocks of 256) per 256-block; empty for an `x` of another length.
    fn quantize(&mut self, x: &[f32]) {
        self.d.clear();
        self.q.clear();
        self.bsums.clear();
        if !x.len().is_multiple_of(QK_K) {
            return;
        }
        for xs in x.chunks_exact(QK_K) {
            let amax = xs.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            let d = amax / 127.0;
            let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
            let start = self.q.len();
            self.q.resize(start + QK_K, 0);
            let (xs32, _) = xs.as_chunks::<QK>();
            let (qs32, _) = self.q[start..].as_chunks_mut::<QK>();
            for (x, q) in xs32.iter().zip(qs32) {
                round_whole(x, inv, q);
            }
            self.bsums.extend(
                self.q[start..]
                    .chunks_exact(BSUM)
                    .map(|c| c.iter().map(|&v| v as i16).sum::<i16>()),
            );
            self.d.push(d);
        }
    }

    /// True when the form holds no block (not int8, or a length not whole 256-blocks).
    pub(crate) fn is_empty(&self) -> bool {
        self.d.is_empty()
    }
}

impl Q8Acts {
    /// Empty activations that will be prepared for products at `precision`.
    pub fn new(precision: ActPrecision) -> Self {
        Q8Acts {
            precision,
            ..Default::default()
        }
    }

    /// Without the Q8_K form (one scale per 256 values): K-quant rows then take the int8
    /// kernels per 32 values, as before the Q8_K form existed. For benchmarks and tests
    /// comparing the two; decoding never needs it.
    #[doc(hidden)]
    pub fn without_q8k(mut self) -> Self {
        self.no_q8k = true;
        self.k = Q8K::default();
        self
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
        if self.precision == ActPrecision::F32 {
            // only the Q4_1 x f32 kernel reads it (int8 activations meet Q4_1 rows in integers)
            self.f_nib.resize(nb * QK, 0.0);
            for (b, out) in self.f_nib.chunks_exact_mut(QK).enumerate() {
                for (p, o) in out.iter_mut().enumerate() {
                    *o = x.get(b * QK + nibble_order(p)).copied().unwrap_or(0.0);
                }
            }
        }
        self.k.quantize(&[]);
        if self.precision == ActPrecision::F32 {
            return;
        }
        if !self.no_q8k {
            self.k.quantize(x);
        }
        self.d.resize(nb, 0.0);
        self.s.resize(nb, 0.0);
        self.qsum.resize(nb, 0);
        self.q.resize(nb * QK, 0);
        for b in 0..nb {
            let xs = &x[b * QK..((b + 1) * QK).min(x.len())];
            let q = &mut self.q[b * QK..(b + 1) * QK];
            let d = quantize_block(xs, q);
            let sum = q.iter().map(|&v| v as i32).sum::<i32>();
            self.d[b] = d;
            self.qsum[b] = sum;
            self.s[b] = d * sum as f32;
        }
    }
}

/// One block of up to 32 values into `q` (32 values, zeros past `xs`): `x ~ d q` with
/// `d = max|x| / 127` and `q = round(x / d)` in [-127, 127]; returns `d`.
#[inline]
pub(crate) fn quantize_block(xs: &[f32], q: &mut [i8]) -> f32 {
    let amax = xs.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
    match (
        <&[f32; QK]>::try_from(xs),
        <&mut [i8; QK]>::try_from(&mut *q),
    ) {
        (Ok(xs), Ok(q)) => round_whole(xs, inv, q),
        _ => round_values(xs, inv, q),
    }
    d
}

/// `q_i = round(x_i inv)` clamped to [-127, 127], zeros past `xs`.
fn round_values(xs: &[f32], inv: f32, q: &mut [i8]) {
    for (i, qi) in q.iter_mut().enumerate() {
        let v = xs.get(i).map_or(0, |&v| nearest_int(v * inv));
        *qi = v.clamp(-127, 127) as i8;
    }
}

/// [`round_values`] of a whole block, in loops without branches that LLVM vectorizes
/// (rounded and clamped as floats, then cast: every value fits an i8; NaN casts to 0 as
/// there). Decoding quantizes every product's input with it.
fn round_whole(xs: &[f32; QK], inv: f32, q: &mut [i8; QK]) {
    let mut r = [0.0f32; QK];
    for (r, &v) in r.iter_mut().zip(xs) {
        *r = (((v * inv) + MAGIC) - MAGIC).clamp(-127.0, 127.0);
    }
    for (q, &r) in q.iter_mut().zip(&r) {
        *q = r as i8;
    }
}

/// `1.5 * 2^23`: `(x + MAGIC) - MAGIC` is `x` rounded to the nearest integer, ties to even,
/// for `|x| <= 2^22` (no fraction bits are left after the addition).
const MAGIC: f32 = 12_582_912.0;

/// `x` rounded to the nearest integer, ties to even (llama.cpp's `nearest_int`), for
/// `|x| <= 2^22`: adding `1.5 * 2^23` leaves no fraction bits, so the addition rounds. No
/// library call (`roundf` is one on x86-64 without SSE4.1), so the loops over it vectorize.
#[inline(always)]
fn nearest_int(x: f32) -> i32 {
    ((x + MAGIC) - MAGIC) as i32
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

    /// The vectorized rounding of a whole block is the per-value one: ties, values past
    /// the clamp, zeros, infinities and NaN included.
    #[test]
    fn a_whole_block_rounds_as_value_by_value() {
        let specials = [
            0.5f32,
            1.5,
            -2.5,
            127.49,
            127.5,
            -300.0,
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1e-30,
        ];
        let mut s = 0x2545_f491_4f6c_dd1du64;
        for case in 0..2000 {
            let xs: [f32; QK] = std::array::from_fn(|i| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                if case % 3 == 0 && i % 5 == 0 {
                    specials[(s % specials.len() as u64) as usize]
                } else {
                    ((s >> 11) as f32 / (1u64 << 53) as f32 - 0.5) * 400.0
                }
            });
            for inv in [1.0f32, 0.37, 0.0, 1e6] {
                let (mut whole, mut each) = ([0i8; QK], [0i8; QK]);
                round_whole(&xs, inv, &mut whole);
                round_values(&xs, inv, &mut each);
                assert_eq!(whole, each, "inv {inv}, x {xs:?}");
            }
        }
    }

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
            assert_eq!((a.q.len(), a.f_nib.len()), (nb * QK, 0));
        }
        let mut f = Q8Acts::new(ActPrecision::F32);
        for n in [70usize, 0, 64] {
            f.quantize(&vec![1.0; n]);
            assert_eq!(f.f_nib.len(), n.div_ceil(QK) * QK);
        }
        for (n, whole) in [
            (512usize, true),
            (256, true),
            (70, false),
            (0, false),
            (300, false),
        ] {
            let x: Vec<f32> = (0..n).map(|i| i as f32 - 20.0).collect();
            a.quantize(&x);
            let nk = if whole { n / QK_K } else { 0 };
            assert_eq!(a.k.d.len(), nk, "length {n}");
            assert_eq!(
                (a.k.q.len(), a.k.bsums.len()),
                (nk * QK_K, nk * QK_K / BSUM)
            );
        }
        let mut f = Q8Acts::new(ActPrecision::F32);
        f.quantize(&[1.0; 256]);
        assert!(f.k.is_empty());
        let mut old = Q8Acts::new(ActPrecision::Int8).without_q8k();
        old.quantize(&[1.0; 256]);
        assert!(old.k.is_empty() && old.q.len() == 256);
    }

    /// Q8_K: `|x - d q| <= d / 2` with `d = max|x| / 127` per 256 values, `|q| <= 127`, and
    /// `bsums` the sums of `q` over each 16 values.
    #[test]
    fn nearest_int_rounds_to_nearest_with_ties_to_even() {
        for (x, want) in [
            (0.5f32, 0),
            (1.5, 2),
            (2.5, 2),
            (-0.5, 0),
            (-1.5, -2),
            (126.6, 127),
        ] {
            assert_eq!(nearest_int(x), want, "{x}");
        }
        let mut x = -200.0f32;
        while x < 200.0 {
            let n = nearest_int(x);
            assert!((x - n as f32).abs() <= 0.5, "{x} -> {n}");
            if (x - x.trunc()).abs() != 0.5 {
                assert_eq!(n, x.round() as i32, "{x}");
            }
            x += 0.0137;
        }
    }

    #[test]
    fn q8k_rounds_each_value_by_at_most_half_its_block_step() {
        let mut a = Q8Acts::new(ActPrecision::Int8);
        // a small block, one with an outlier, an all-zero one
        let mut x: Vec<f32> = (0..768)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * if i < 256 { 1e-3 } else { 7.0 })
            .collect();
        x[300] = -900.0;
        x[512..768].iter_mut().for_each(|v| *v = 0.0);
        a.quantize(&x);
        for (b, xs) in x.chunks(QK_K).enumerate() {
            let amax = xs.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let d = a.k.d[b];
            assert_eq!(d, amax / 127.0);
            let q = &a.k.q[b * QK_K..(b + 1) * QK_K];
            for (v, &qi) in xs.iter().zip(q) {
                assert!(qi >= -127);
                assert!(
                    (v - d * qi as f32).abs() <= d / 2.0 * (1.0 + 1e-6),
                    "{v} vs {d} * {qi}"
                );
            }
            for (t, s) in a.k.bsums[b * 16..(b + 1) * 16].iter().enumerate() {
                let want: i32 = q[16 * t..16 * t + 16].iter().map(|&v| v as i32).sum();
                assert_eq!(*s as i32, want);
            }
        }
        assert_eq!(a.k.q[300], -127);
        assert!(a.k.q[512..].iter().all(|&v| v == 0));
    }
}
