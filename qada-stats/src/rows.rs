//! Borrowed rows of cached keys or values, in the cache's element type (f32 or f16).

use half::f16;

/// Row-major `n x d` elements, f32 or f16, borrowed from a cache.
#[derive(Clone, Copy, Debug)]
pub enum Rows<'a> {
    /// Single precision.
    F32(&'a [f32]),
    /// Half precision.
    F16(&'a [f16]),
}

impl<'a> Rows<'a> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Rows::F32(x) => x.len(),
            Rows::F16(x) => x.len(),
        }
    }
    /// True when there is no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Number of rows of length `d`.
    pub fn n_rows(&self, d: usize) -> usize {
        self.len().checked_div(d).unwrap_or(0)
    }
    /// Rows `r0..r1` (of length `d`).
    pub fn slice(&self, r0: usize, r1: usize, d: usize) -> Rows<'a> {
        match *self {
            Rows::F32(x) => Rows::F32(&x[r0 * d..r1 * d]),
            Rows::F16(x) => Rows::F16(&x[r0 * d..r1 * d]),
        }
    }
    /// Copy row `i` (of length `out.len()`) into `out` as f32.
    pub fn row_f32(&self, i: usize, out: &mut [f32]) {
        let d = out.len();
        match self {
            Rows::F32(x) => out.copy_from_slice(&x[i * d..(i + 1) * d]),
            Rows::F16(x) => {
                for (o, v) in out.iter_mut().zip(&x[i * d..(i + 1) * d]) {
                    *o = v.to_f32();
                }
            }
        }
    }
    /// Bytes of one element.
    pub fn elem_bytes(&self) -> usize {
        match self {
            Rows::F32(_) => 4,
            Rows::F16(_) => 2,
        }
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
