//! Page selection: which pages of a KV group's bulk one decoding step reads, and which of the
//! group's query heads compute over each.
//!
//! A criterion answers per KV group with a [`GroupRead`]: `Local` (sink and window only),
//! `Full` (the whole bulk for the group's long heads), or `Selected` (the pages of a
//! [`PageSelection`]). The bulk's rows `[0, T_bulk)` are cut into pages of `P` rows,
//! page `p` holding rows `[p P, min((p + 1) P, T_bulk))`; in the cache they are contiguous for
//! both keys and values, so reading a page reads only its bytes.
//!
//! Each selected page carries a bit mask of the group's heads that attend to it: the group
//! reads the union of its heads' pages once, and each head computes only over its own.
//! [`LayerReads`] is what a layer's step read and computed, for the accounting.

use crate::accounting::PhaseTimes;
use crate::attention::HalvesScratch;
use crate::{CoreError, Result};

/// Pages of up to this many rows are scored by channel without allocating (larger ones grow
/// the tile once).
const RESERVED_TILE_ROWS: usize = 128;

/// What one KV group reads of its bulk at one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupRead {
    /// Sink and window only: no bulk row.
    Local,
    /// The pages of the group's [`PageSelection`], each for the heads of its mask.
    Selected,
    /// The whole bulk, for the group's long-context heads.
    Full,
}

/// The pages of one KV group's bulk a step reads, in ascending order, each with the bit mask
/// of the group's heads (bit `j`: the group's `j`-th query head) that attend to it; and the
/// scratch a selecting criterion works in, kept between steps.
#[derive(Clone, Debug, Default)]
pub struct PageSelection {
    page: usize,
    pages: Vec<u32>,
    masks: Vec<u64>,
    /// Bytes of page summaries the criterion read for this group at this step.
    summary_bytes: u64,
    /// FLOPs the criterion spent scoring pages for this group at this step.
    summary_flops: u64,
    /// The pages are a choice made at an earlier step, read again ([`crate::ReusePages`]).
    reused: bool,
    /// Scratch of the selecting criteria (page scores per head, queries, bins).
    pub(crate) scratch: SelectScratch,
}

/// Buffers a selecting criterion reuses between steps.
#[derive(Clone, Debug, Default)]
pub(crate) struct SelectScratch {
    /// The long heads' queries, their magnitudes and squares, contiguous.
    pub queries: Vec<f32>,
    pub queries_abs: Vec<f32>,
    pub queries2: Vec<f32>,
    /// Per head and page (`heads x pages`): `scale q . c`, `|scale| |q| . r`,
    /// `scale q . mu` and `scale^2 (q * q) . v / 2`.
    pub a: Vec<f32>,
    pub b: Vec<f32>,
    pub c: Vec<f32>,
    pub e: Vec<f32>,
    /// One head's per-page order (ln bound), mass (ln estimate or bound) and lower bound.
    pub w_order: Vec<f32>,
    pub w_mass: Vec<f32>,
    pub w_lower: Vec<f32>,
    /// Per page: whether some head already chose it, as a mask.
    pub chosen: Vec<u64>,
    /// Page indices, for partial sorts.
    pub order: Vec<u32>,
    /// One head's scores over the whole bulk (the exact rule, and the channel rule without a
    /// copy of the keys by channel).
    pub scores: Vec<f32>,
    /// The channel rule: per head and page (`heads x pages`) the log mass of the channels'
    /// scores; the heads' weights on the chosen channels (`heads x r`, `scale q_hc`); and the
    /// tiles the pages' scores are summed in (two halves of the pages, two tiles).
    pub masses: Vec<f32>,
    pub weights: Vec<f32>,
    pub halves: HalvesScratch,
    /// The long heads' queries on the chosen channels (0 elsewhere), the channels, and every
    /// channel's weight in choosing them.
    pub queries_sparse: Vec<f32>,
    pub channel: Vec<u32>,
    pub channel_weight: Vec<f32>,
}

impl PageSelection {
    /// An empty selection.
    pub fn new() -> Self {
        Self::default()
    }

    /// Room for `max_pages` pages scored for `group` heads of dimension `d`, so that choosing
    /// them allocates nothing.
    pub fn reserve(&mut self, group: usize, d: usize, max_pages: usize) {
        let s = &mut self.scratch;
        for v in [&mut s.queries, &mut s.queries_abs, &mut s.queries2] {
            v.reserve(group * d);
        }
        for v in [&mut s.a, &mut s.b, &mut s.c, &mut s.e] {
            v.reserve(group * max_pages);
        }
        for v in [&mut s.w_order, &mut s.w_mass, &mut s.w_lower] {
            v.reserve(max_pages);
        }
        s.chosen.reserve(max_pages);
        s.order.reserve(max_pages);
        s.queries_sparse.reserve(group * d);
        s.channel.reserve(d);
        s.channel_weight.reserve(d);
        s.masses.reserve(group * max_pages);
        s.weights.reserve(group * d);
        s.halves
            .reserve(group, group * RESERVED_TILE_ROWS, max_pages);
        self.pages.reserve(max_pages);
        self.masks.reserve(max_pages);
    }

    /// Room for one head's scores over `rows` bulk keys, so that the rules that score every
    /// key of a head (exact; channels without a copy by channel) allocate nothing while the
    /// bulk stays within it.
    pub fn reserve_scores(&mut self, rows: usize) {
        let s = &mut self.scratch.scores;
        s.reserve(rows.saturating_sub(s.len()));
    }

    /// Forget the pages; from now on pages hold `page` rows.
    pub fn clear(&mut self, page: usize) {
        self.page = page;
        self.pages.clear();
        self.masks.clear();
        self.summary_bytes = 0;
        self.summary_flops = 0;
        self.reused = false;
    }

    /// Mark the pages as a choice made at an earlier step.
    pub(crate) fn mark_reused(&mut self) {
        self.reused = true;
    }

    /// Whether the pages are a choice made at an earlier step, read again.
    pub fn reused(&self) -> bool {
        self.reused
    }

    /// Rows per page `P` (0 before the first [`PageSelection::clear`]).
    pub fn page_size(&self) -> usize {
        self.page
    }

    /// Add page `p` for the heads of `mask`. Pages must come in ascending order, each once.
    ///
    /// # Errors
    /// [`CoreError::InvalidParameter`] for a page not above the last one added.
    pub fn push(&mut self, p: usize, mask: u64) -> Result<()> {
        if self.pages.last().is_some_and(|&last| last as usize >= p) || p > u32::MAX as usize {
            return Err(CoreError::InvalidParameter {
                what: "a selected page (pages in ascending order, each once)",
                expected: "a page above the last one added",
                found: p as f64,
            });
        }
        if mask != 0 {
            self.pages.push(p as u32);
            self.masks.push(mask);
        }
        Ok(())
    }

    /// Count what the criterion read and computed to choose the pages.
    pub fn add_cost(&mut self, bytes: u64, flops: u64) {
        self.summary_bytes += bytes;
        self.summary_flops += flops;
    }

    /// Bytes of page summaries read to choose the pages.
    pub fn summary_bytes(&self) -> u64 {
        self.summary_bytes
    }

    /// FLOPs spent choosing the pages.
    pub fn summary_flops(&self) -> u64 {
        self.summary_flops
    }

    /// Selected pages, ascending, with their head masks.
    pub fn pages(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.pages
            .iter()
            .zip(&self.masks)
            .map(|(&p, &m)| (p as usize, m))
    }

    /// Number of selected pages.
    pub fn len(&self) -> usize {
        self.pages.len()
    }

    /// True when no page is selected.
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// The bulk rows `[r0, r1)` of page `p` in a bulk of `bulk_len` rows.
    pub fn rows(&self, p: usize, bulk_len: usize) -> (usize, usize) {
        let r0 = (p * self.page).min(bulk_len);
        (r0, (r0 + self.page).min(bulk_len))
    }

    /// Bulk rows the group reads: the union of its heads' pages.
    pub fn rows_read(&self, bulk_len: usize) -> usize {
        self.pages()
            .map(|(p, _)| {
                let (a, b) = self.rows(p, bulk_len);
                b - a
            })
            .sum()
    }

    /// Bulk rows the group's head `j` computes over.
    pub fn head_rows(&self, j: usize, bulk_len: usize) -> usize {
        self.pages()
            .filter(|&(_, m)| j < 64 && m & (1 << j) != 0)
            .map(|(p, _)| {
                let (a, b) = self.rows(p, bulk_len);
                b - a
            })
            .sum()
    }
}

/// What one step of one layer read of each KV group's bulk and computed per head; written by
/// [`crate::attend_layer`], read by [`crate::Accounting::record_layer_reads`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LayerReads {
    /// Per KV group: bulk rows read (the union over its heads).
    pub group_rows: Vec<usize>,
    /// Per query head: bulk rows its attention computed over.
    pub head_rows: Vec<usize>,
    /// Per KV group: bytes of summaries read to select pages.
    pub summary_bytes: Vec<u64>,
    /// Per KV group: FLOPs spent selecting pages.
    pub summary_flops: Vec<u64>,
    /// KV groups that read chosen pages.
    pub selected_groups: usize,
    /// Of `selected_groups`, those that read a choice made at an earlier step.
    pub reused_groups: usize,
    /// The step's wall time by phase.
    pub times: PhaseTimes,
}

impl LayerReads {
    /// Zeroed for `n_kv` groups of `group` heads (allocates only when larger than before).
    pub(crate) fn reset(&mut self, n_kv: usize, group: usize) {
        for v in [&mut self.group_rows, &mut self.head_rows] {
            v.clear();
        }
        self.group_rows.resize(n_kv, 0);
        self.head_rows.resize(n_kv * group, 0);
        for v in [&mut self.summary_bytes, &mut self.summary_flops] {
            v.clear();
            v.resize(n_kv, 0);
        }
        self.selected_groups = 0;
        self.reused_groups = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_ascending_and_rows_clip_at_the_bulk() {
        let mut s = PageSelection::new();
        s.clear(4);
        s.push(0, 0b01).unwrap();
        s.push(2, 0b11).unwrap();
        s.push(3, 0).unwrap(); // no head: not kept
        assert!(s.push(2, 1).is_err() && s.push(1, 1).is_err());
        assert_eq!(s.len(), 2);
        // bulk of 10 rows: page 2 is rows 8..10
        assert_eq!(s.rows(2, 10), (8, 10));
        assert_eq!(s.rows_read(10), 6);
        assert_eq!((s.head_rows(0, 10), s.head_rows(1, 10)), (6, 2));
        s.clear(8);
        assert!(s.is_empty() && s.page_size() == 8);
    }
}
