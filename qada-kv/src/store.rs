//! Element storage of one head's keys or values: contiguous rows in f32 or f16.

use qada_stats::{f16, Rows};

/// Element type of the cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvDtype {
    /// 4 bytes per element: exact.
    #[default]
    F32,
    /// 2 bytes per element: half the memory traffic, keys rounded to 11 significant bits.
    F16,
}

/// Keys or values of one head, in the cache's element type, row after row.
#[derive(Clone, Debug)]
pub(crate) enum Store {
    F32(Vec<f32>),
    F16(Vec<f16>),
}

impl Store {
    /// Empty storage of `dtype` elements.
    pub(crate) fn new(dtype: KvDtype) -> Self {
        match dtype {
            KvDtype::F32 => Store::F32(Vec::new()),
            KvDtype::F16 => Store::F16(Vec::new()),
        }
    }
    /// Every stored element, borrowed.
    pub(crate) fn rows(&self) -> Rows<'_> {
        match self {
            Store::F32(v) => Rows::F32(v),
            Store::F16(v) => Rows::F16(v),
        }
    }
    /// Append `x`, converted to the element type.
    pub(crate) fn extend(&mut self, x: &[f32]) {
        match self {
            Store::F32(v) => v.extend_from_slice(x),
            Store::F16(v) => v.extend(x.iter().map(|&a| f16::from_f32(a))),
        }
    }
    /// Room for `n` more elements.
    pub(crate) fn reserve(&mut self, n: usize) {
        match self {
            Store::F32(v) => v.reserve(n),
            Store::F16(v) => v.reserve(n),
        }
    }
    /// Keep the first `n` elements.
    pub(crate) fn truncate(&mut self, n: usize) {
        match self {
            Store::F32(v) => v.truncate(n),
            Store::F16(v) => v.truncate(n),
        }
    }
    /// Drop every element, keep the allocation.
    pub(crate) fn clear(&mut self) {
        self.truncate(0);
    }
}
