//! The packed upper triangle of a symmetric `d x d` matrix, row by row.
//!
//! Row `i` stores `M[i][i..d]`, so `M[i][j]` (for `i <= j`) sits at packed index
//! `p(i, j) = i d - i (i - 1) / 2 + (j - i)`, and the whole triangle takes `d (d + 1) / 2`
//! values. Every walk over the triangle goes through [`rows`]: row `i` and the packed range of
//! its entries `j = i .. d`, so the inner loops stay on slices (`&m[range]` zipped with
//! `&x[i..]`) and vectorize as before.

use std::ops::Range;

/// Number of packed values of a `d x d` symmetric matrix: `d (d + 1) / 2`.
#[inline]
pub(crate) fn len(d: usize) -> usize {
    d * (d + 1) / 2
}

/// Rows of the packed upper triangle of a `d x d` matrix: `(i, range)` where `range` holds the
/// packed indices of `(i, j)` for `j = i .. d`, in order.
#[inline]
pub(crate) fn rows(d: usize) -> PackedRows {
    PackedRows { d, i: 0, off: 0 }
}

/// Iterator returned by [`rows`].
#[derive(Clone, Debug)]
pub(crate) struct PackedRows {
    d: usize,
    i: usize,
    off: usize,
}

impl Iterator for PackedRows {
    type Item = (usize, Range<usize>);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.i >= self.d {
            return None;
        }
        let i = self.i;
        let range = self.off..self.off + (self.d - i);
        self.off = range.end;
        self.i += 1;
        Some((i, range))
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.d - self.i;
        (n, Some(n))
    }
}

impl ExactSizeIterator for PackedRows {}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        /// The walk visits every `(i, j)` with `i <= j` exactly once, at the packed index of the
        /// closed form, and uses every packed index `0 .. d (d + 1) / 2` exactly once, in order.
        #[test]
        fn walk_covers_each_upper_pair_exactly_once(d in 0usize..40) {
            let mut seen = vec![vec![0u32; d]; d];
            let mut next_p = 0;
            let mut n_rows = 0;
            for (i, range) in super::rows(d) {
                prop_assert_eq!(i, n_rows);
                n_rows += 1;
                for (j, p) in (i..).zip(range) {
                    prop_assert!(j < d, "column {j} of {d}");
                    prop_assert_eq!(p, next_p);
                    prop_assert_eq!(p, i * d - i * i.saturating_sub(1) / 2 + (j - i));
                    next_p += 1;
                    seen[i][j] += 1;
                }
            }
            prop_assert_eq!(n_rows, d);
            prop_assert_eq!(next_p, super::len(d));
            for (i, row) in seen.iter().enumerate() {
                for (j, &times) in row.iter().enumerate() {
                    prop_assert_eq!(times, u32::from(i <= j), "({}, {})", i, j);
                }
            }
        }
    }
}
