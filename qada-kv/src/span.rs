//! How far back a layer's queries see: every position (`Full`), or the last `W` positions
//! (`Sliding(W)`, Gemma 3's local layers: a query at position `p` sees keys `p - W + 1 ..= p`).
//!
//! A sliding layer keeps only the rows a query can still see. After appending `n` rows to a
//! layer of length `T` (now `T' = T + n`), its kept rows are positions `first .. T'` with
//!
//! `first <= T' - (n + W - 1)` (saturating), so each of the `n` new queries sees its `W - 1`
//! predecessors, and `T' - first <= max(2W, W - 1 + n)`, so memory is bounded at any length.
//!
//! Compaction is lazy: the front is dropped (one memmove of the tail) only when the bound would
//! be exceeded, and then down to `W - 1 + n` rows, so one-token decoding drops `W + 1` rows
//! (and moves the `W - 1` after them) once every `W + 1` tokens.

use std::ops::Range;

use crate::{Split, WindowConfig};

/// The positions a layer's queries attend to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LayerSpan {
    /// Global attention: every position so far.
    #[default]
    Full,
    /// Sliding-window attention over the last `W` positions, the query's own included
    /// (`W >= 1`).
    Sliding(usize),
}

impl LayerSpan {
    /// `W` of a sliding layer; `None` for a full one.
    pub fn window(self) -> Option<usize> {
        match self {
            LayerSpan::Full => None,
            LayerSpan::Sliding(w) => Some(w),
        }
    }

    /// The sink, bulk and window position ranges of a layer of `t` positions: `window`'s for
    /// a full layer; for a sliding one, sink and bulk empty and the window the last
    /// `min(W, t)` positions (`s = t - min(W, t)`: sink `s..s`, bulk `s..s`, window `s..t`).
    pub fn split(self, window: &WindowConfig, t: usize) -> Split {
        match self {
            LayerSpan::Full => window.split(t),
            LayerSpan::Sliding(w) => {
                let s = t.saturating_sub(w);
                Split {
                    sink: s..s,
                    bulk: s..s,
                    window: s..t,
                }
            }
        }
    }
}

/// Most rows a sliding layer of window `w >= 1` keeps right after an append of `n` rows:
/// `max(2W, W - 1 + n)`.
pub(crate) fn kept_bound(w: usize, n: usize) -> usize {
    w.saturating_mul(2).max((w - 1).saturating_add(n))
}

/// The positions a sliding layer of window `w >= 1` drops before appending `n` rows to `len`
/// positions whose kept rows start at `first`: none while [`kept_bound`] holds, else
/// `first .. len + n - (n + W - 1)` (saturating), up to the block's first predecessor that
/// its queries still see.
pub(crate) fn rows_to_drop(w: usize, first: usize, len: usize, n: usize) -> Range<usize> {
    let end = len + n;
    if n == 0 || end - first <= kept_bound(w, n) {
        return first..first;
    }
    first..end.saturating_sub(n.saturating_add(w - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decoding one token at a time keeps between `W` and `2W` rows once the layer is longer
    /// than `2W`, and drops `W + 1` rows every `W + 1` tokens.
    #[test]
    fn one_token_decoding_compacts_every_w_plus_one_tokens() {
        let w = 4;
        let mut first = 0;
        let mut drops = vec![];
        for len in 0..40 {
            let r = rows_to_drop(w, first, len, 1);
            if !r.is_empty() {
                drops.push((len + 1, r.len()));
            }
            first = r.end.max(first);
            let kept = len + 1 - first;
            assert!(
                kept <= 2 * w && (len + 1 < w || kept >= w),
                "len {len} kept {kept}"
            );
        }
        // the first drop at 2W + 1 rows, down to W
        assert_eq!(drops[0], (2 * w + 1, w + 1));
        assert!(drops[1..].iter().all(|&(_, n)| n == w + 1), "{drops:?}");
        assert!(
            drops.windows(2).all(|p| p[1].0 - p[0].0 == w + 1),
            "{drops:?}"
        );
    }

    #[test]
    fn a_long_block_keeps_its_predecessors() {
        // 10 positions kept from 0, a block of 100 with W = 8: keep 7 predecessors
        assert_eq!(rows_to_drop(8, 0, 10, 100), 0..3);
        assert_eq!(kept_bound(8, 100), 107);
        // huge windows never drop and never overflow
        assert_eq!(rows_to_drop(usize::MAX, 0, 10, 100), 0..0);
        assert_eq!(kept_bound(usize::MAX, 5), usize::MAX);
    }
}
