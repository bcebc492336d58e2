//! Element storage of one head's keys or values: contiguous rows in f32, f16 or q8_0 blocks.
//!
//! Every count taken or given here is in **values** (a row is `d` values); a q8 store keeps
//! them as blocks of 32 (`d % 32 == 0`, checked when the cache is built).

use qada_stats::{f16, Q8Block, Rows, Q8_BLOCK};

use crate::{KvError, Result};

/// Element type of the cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvDtype {
    /// 4 bytes per value: exact.
    #[default]
    F32,
    /// 2 bytes per value: half the memory traffic, keys rounded to 11 significant bits.
    F16,
    /// 34 bytes per 32 values (llama.cpp's q8_0, [`Q8Block`]): each block of 32 values of a row
    /// is `x_i ~ d q_i`, `d = amax / 127` (rounded up to an f16), `q_i = round(x_i / d)` in
    /// `[-127, 127]`, so every value is within `d / 2`. The head dimension must be a multiple
    /// of 32. The bulk moments stay those of the f32 keys: keys enter the moments from an f32
    /// copy kept until they leave the window (only keys folded after a change of
    /// [`crate::MomentsMode`] come from the stored blocks).
    Q8,
}

impl KvDtype {
    /// Every element type, in the order their names are listed.
    pub const ALL: [KvDtype; 3] = [KvDtype::F32, KvDtype::F16, KvDtype::Q8];

    /// The name `--kv` and Python's `kv=` take: `f32`, `f16` or `q8`.
    pub fn name(self) -> &'static str {
        match self {
            KvDtype::F32 => "f32",
            KvDtype::F16 => "f16",
            KvDtype::Q8 => "q8",
        }
    }

    /// Bytes per stored value, rounded down: 4, 2, and 1 for q8 (whose scale adds 2 bytes
    /// per 32 values: [`KvDtype::bytes_for`] is exact).
    pub fn size(self) -> usize {
        match self {
            KvDtype::F32 => 4,
            KvDtype::F16 => 2,
            KvDtype::Q8 => 1,
        }
    }
    /// Bytes `values` values take (`values` a multiple of 32 for q8): `4 n`, `2 n`, `34 n / 32`.
    pub fn bytes_for(self, values: usize) -> usize {
        match self {
            KvDtype::F32 => 4 * values,
            KvDtype::F16 => 2 * values,
            KvDtype::Q8 => values / Q8_BLOCK * std::mem::size_of::<Q8Block>(),
        }
    }
}

impl std::fmt::Display for KvDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for KvDtype {
    type Err = KvError;
    /// The element type [`KvDtype::name`] names.
    fn from_str(s: &str) -> Result<Self> {
        KvDtype::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| KvError::UnknownName {
                what: "KV cache type",
                found: s.to_string(),
                expected: "f32, f16 or q8",
            })
    }
}

/// Keys or values of one head, in the cache's element type, row after row.
#[derive(Clone, Debug)]
pub(crate) enum Store {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Q8(Vec<Q8Block>),
}

/// Blocks that hold `n` values (`n % 32 == 0` in a q8 store).
#[inline]
fn blocks(n: usize) -> usize {
    n / Q8_BLOCK
}

impl Store {
    /// Empty storage of `dtype` elements.
    pub(crate) fn new(dtype: KvDtype) -> Self {
        match dtype {
            KvDtype::F32 => Store::F32(Vec::new()),
            KvDtype::F16 => Store::F16(Vec::new()),
            KvDtype::Q8 => Store::Q8(Vec::new()),
        }
    }
    /// Every stored element, borrowed.
    pub(crate) fn rows(&self) -> Rows<'_> {
        match self {
            Store::F32(v) => Rows::F32(v),
            Store::F16(v) => Rows::F16(v),
            Store::Q8(v) => Rows::Q8(v),
        }
    }
    /// Append `x` (one row, or whole rows), converted to the element type.
    pub(crate) fn extend(&mut self, x: &[f32]) {
        match self {
            Store::F32(v) => v.extend_from_slice(x),
            Store::F16(v) => v.extend(x.iter().map(|&a| f16::from_f32(a))),
            Store::Q8(v) => Q8Block::quantize_into(x, v),
        }
    }
    /// Room for `n` more values.
    pub(crate) fn reserve(&mut self, n: usize) {
        match self {
            Store::F32(v) => v.reserve(n),
            Store::F16(v) => v.reserve(n),
            Store::Q8(v) => v.reserve(blocks(n)),
        }
    }
    /// Room for `n` more values, growing geometrically as `reserve` does but never past
    /// `max_total` values unless `n` itself needs more (a sliding layer's bound).
    pub(crate) fn reserve_within(&mut self, n: usize, max_total: usize) {
        fn grow<T>(v: &mut Vec<T>, n: usize, max_total: usize) {
            let need = v.len() + n;
            if need > v.capacity() {
                let target = need.max(v.capacity().saturating_mul(2).min(max_total));
                v.reserve_exact(target - v.len());
            }
        }
        match self {
            Store::F32(v) => grow(v, n, max_total),
            Store::F16(v) => grow(v, n, max_total),
            Store::Q8(v) => grow(v, blocks(n), blocks(max_total)),
        }
    }
    /// Drop the first `n` values: one move of the rest to the front.
    pub(crate) fn drop_front(&mut self, n: usize) {
        match self {
            Store::F32(v) => drop(v.drain(..n)),
            Store::F16(v) => drop(v.drain(..n)),
            Store::Q8(v) => drop(v.drain(..blocks(n))),
        }
    }
    /// Become a copy of `src`, reusing the allocation when the element types agree.
    pub(crate) fn copy_from(&mut self, src: &Store) {
        match (&mut *self, src) {
            (Store::F32(a), Store::F32(b)) => a.clone_from(b),
            (Store::F16(a), Store::F16(b)) => a.clone_from(b),
            (Store::Q8(a), Store::Q8(b)) => a.clone_from(b),
            _ => *self = src.clone(),
        }
    }
    /// Bytes the stored elements take (not counting spare capacity): 34 per 32 values in q8.
    pub(crate) fn bytes(&self) -> usize {
        self.rows().bytes()
    }
    /// Keep the first `n` values.
    pub(crate) fn truncate(&mut self, n: usize) {
        match self {
            Store::F32(v) => v.truncate(n),
            Store::F16(v) => v.truncate(n),
            Store::Q8(v) => v.truncate(blocks(n)),
        }
    }
    /// Drop every element, keep the allocation.
    pub(crate) fn clear(&mut self) {
        self.truncate(0);
    }
}
