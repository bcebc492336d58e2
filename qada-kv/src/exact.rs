//! The f32 keys a q8 cache keeps until they enter the bulk moments, so that the moments
//! `(mu_K, Sigma_K)` are those of the keys before quantization, not of `d q`.
//!
//! A full layer's keys join the moments when they leave the window; until then they sit here,
//! rows of positions `from .. from + rows`, in f32: at most the local window plus one append,
//! whatever the context length. Folded rows are dropped lazily (one move of the rest once
//! they outnumber the live ones), so one-token decoding allocates nothing once warm. While the
//! moments do not follow the keys (fixed, or from a calibration table) nothing is kept.

use std::ops::Range;

/// f32 keys of positions `from .. from + rows` of one (layer, KV head).
#[derive(Clone, Debug, Default)]
pub(crate) struct ExactKeys {
    /// Row-major values; the first `dead` are folded rows not yet dropped.
    values: Vec<f32>,
    dead: usize,
    /// Position of the first live row.
    from: usize,
}

impl ExactKeys {
    /// Positions held, for rows of `d` values.
    pub(crate) fn range(&self, d: usize) -> Range<usize> {
        let rows = (self.values.len() - self.dead).checked_div(d).unwrap_or(0);
        self.from..self.from + rows
    }

    /// Hold nothing; the next row pushed is position `pos`.
    pub(crate) fn reset(&mut self, pos: usize) {
        self.values.clear();
        self.dead = 0;
        self.from = pos;
    }

    /// Append `rows` (whole rows of `d`), the positions after the last one held.
    pub(crate) fn extend(&mut self, rows: &[f32]) {
        self.values.extend_from_slice(rows);
    }

    /// Room for `n` more values.
    pub(crate) fn reserve(&mut self, n: usize) {
        self.values.reserve(n);
    }

    /// Rows of positions `r`, which must lie in [`ExactKeys::range`].
    pub(crate) fn rows(&self, r: Range<usize>, d: usize) -> &[f32] {
        let at = self.dead + (r.start - self.from) * d;
        &self.values[at..at + r.len() * d]
    }

    /// Forget the rows of positions before `pos` (all of them if `pos` is past the end).
    pub(crate) fn drop_before(&mut self, pos: usize, d: usize) {
        let held = self.range(d);
        let n = pos.clamp(held.start, held.end) - held.start;
        self.dead += n * d;
        self.from += n;
        if self.dead > 0 && self.dead >= self.values.len() - self.dead {
            self.values.copy_within(self.dead.., 0);
            self.values.truncate(self.values.len() - self.dead);
            self.dead = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_follow_positions_across_drops_and_compaction() {
        let d = 2;
        let mut e = ExactKeys::default();
        e.reset(5);
        e.extend(&[5.0, 5.5, 6.0, 6.5, 7.0, 7.5, 8.0, 8.5]);
        assert_eq!(e.range(d), 5..9);
        e.drop_before(6, d);
        assert_eq!(e.range(d), 6..9);
        assert_eq!(e.rows(7..9, d), &[7.0, 7.5, 8.0, 8.5]);
        e.drop_before(8, d); // dead rows outnumber live ones: compacted
        assert_eq!(e.values.len(), 2);
        assert_eq!(e.rows(8..9, d), &[8.0, 8.5]);
        e.drop_before(100, d);
        assert_eq!(e.range(d), 9..9);
        e.drop_before(3, d);
        assert_eq!(e.range(d), 9..9);
    }
}
