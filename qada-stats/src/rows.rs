//! Borrowed rows of cached keys or values, in the cache's element type (f32, f16, or q8_0
//! blocks: [`Q8Block`]).

use half::f16;

use crate::q8::{Q8Block, Q8_BLOCK};

/// Row-major `n x d` values, borrowed from a cache: f32, f16, or q8_0 blocks.
///
/// Every length and index of this type counts **values**, whatever the storage: `len()` of
/// `Q8(b)` is `32 * b.len()`, and `slice(r0, r1, d)` takes rows of `d` values. A q8 row is
/// `d / 32` whole blocks, so `d` must be a multiple of 32 there (a `--kv q8` cache refuses any
/// other head dimension when it is built).
#[derive(Clone, Copy, Debug)]
pub enum Rows<'a> {
    /// Single precision.
    F32(&'a [f32]),
    /// Half precision.
    F16(&'a [f16]),
    /// 8-bit blocks of 32 values with one f16 scale each (`x ~ d q`, see [`Q8Block`]).
    Q8(&'a [Q8Block]),
}

impl<'a> Rows<'a> {
    /// Number of values (for `Q8`, 32 per block).
    pub fn len(&self) -> usize {
        match self {
            Rows::F32(x) => x.len(),
            Rows::F16(x) => x.len(),
            Rows::Q8(x) => x.len() * Q8_BLOCK,
        }
    }
    /// True when there is no value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Number of rows of length `d`.
    pub fn n_rows(&self, d: usize) -> usize {
        self.len().checked_div(d).unwrap_or(0)
    }
    /// Rows `r0..r1` (of length `d`).
    ///
    /// # Panics
    /// When `r1 * d > len()` or `r0 > r1`, as slicing does; for `Q8` also when `d` is not a
    /// multiple of 32 (rows would split blocks).
    pub fn slice(&self, r0: usize, r1: usize, d: usize) -> Rows<'a> {
        match *self {
            Rows::F32(x) => Rows::F32(&x[r0 * d..r1 * d]),
            Rows::F16(x) => Rows::F16(&x[r0 * d..r1 * d]),
            Rows::Q8(x) => {
                assert!(
                    d.is_multiple_of(Q8_BLOCK),
                    "q8 rows of {d} values split blocks of 32"
                );
                let b = d / Q8_BLOCK;
                Rows::Q8(&x[r0 * b..r1 * b])
            }
        }
    }
    /// Copy row `i` (of length `out.len()`) into `out` as f32 (dequantized for `Q8`).
    ///
    /// # Panics
    /// When row `i` is out of range; for `Q8` also when `out.len()` is not a multiple of 32.
    pub fn row_f32(&self, i: usize, out: &mut [f32]) {
        let d = out.len();
        match self {
            Rows::F32(x) => out.copy_from_slice(&x[i * d..(i + 1) * d]),
            Rows::F16(x) => {
                for (o, v) in out.iter_mut().zip(&x[i * d..(i + 1) * d]) {
                    *o = v.to_f32();
                }
            }
            Rows::Q8(_) => match self.slice(i, i + 1, d) {
                Rows::Q8(row) => Q8Block::dequantize_into(row, out),
                _ => unreachable!("a slice keeps the element type"),
            },
        }
    }
    /// Bytes of one value, scales included: 4, 2, and 34 / 32 for `Q8` (32 one-byte quants
    /// and a 2-byte scale per block).
    pub fn value_bytes(&self) -> f64 {
        match self {
            Rows::F32(_) => 4.0,
            Rows::F16(_) => 2.0,
            Rows::Q8(_) => 34.0 / 32.0,
        }
    }
    /// Bytes the rows take: `4 len`, `2 len`, or 34 per 32 values for `Q8`.
    pub fn bytes(&self) -> usize {
        match self {
            Rows::F32(x) => std::mem::size_of_val(*x),
            Rows::F16(x) => std::mem::size_of_val(*x),
            Rows::Q8(x) => std::mem::size_of_val(*x),
        }
    }
    /// True when `self` and `other` have the same element type.
    pub fn same_dtype(&self, other: &Rows<'_>) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

impl<'a> From<&'a [f32]> for Rows<'a> {
    fn from(x: &'a [f32]) -> Self {
        Rows::F32(x)
    }
}

impl<'a> From<&'a [f16]> for Rows<'a> {
    fn from(x: &'a [f16]) -> Self {
        Rows::F16(x)
    }
}

impl<'a> From<&'a [Q8Block]> for Rows<'a> {
    fn from(x: &'a [Q8Block]) -> Self {
        Rows::Q8(x)
    }
}
