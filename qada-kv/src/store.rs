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

impl KvDtype {
    /// Bytes per stored element.
    pub fn size(self) -> usize {
        match self {
            KvDtype::F32 => 4,
            KvDtype::F16 => 2,
        }
    }
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
    /// Room for `n` more elements, growing geometrically as `reserve` does but never past
    /// `max_total` elements unless `n` itself needs more (a sliding layer's bound).
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
        }
    }
    /// Drop the first `n` elements: one move of the rest to the front.
    pub(crate) fn drop_front(&mut self, n: usize) {
        match self {
            Store::F32(v) => drop(v.drain(..n)),
            Store::F16(v) => drop(v.drain(..n)),
        }
    }
    /// Become a copy of `src`, reusing the allocation when the element types agree.
    pub(crate) fn copy_from(&mut self, src: &Store) {
        match (&mut *self, src) {
            (Store::F32(a), Store::F32(b)) => a.clone_from(b),
            (Store::F16(a), Store::F16(b)) => a.clone_from(b),
            _ => *self = src.clone(),
        }
    }
    /// Bytes the stored elements take (not counting spare capacity).
    pub(crate) fn bytes(&self) -> usize {
        match self {
            Store::F32(v) => std::mem::size_of_val(v.as_slice()),
            Store::F16(v) => std::mem::size_of_val(v.as_slice()),
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
