//! Summaries of each head's bulk keys besides the moments, kept when a criterion asks for
//! them ([`BulkSummaries`]): page bounds ([`PageBounds`], every bulk key, whatever the
//! moments mode: a bound must cover every key attention could read) and cluster moments
//! ([`ClusterMoments`], k-means on the bulk at the end of prefill, then each key that leaves
//! the window joins its nearest cluster).
//!
//! Both take the keys as stored (f16 or q8 rows converted to f32 exactly as attention reads
//! them). Sliding layers have no bulk and keep none.
//!
//! A criterion that reads them only from some context length on
//! ([`BulkSummaries::from_context`]) gets them hidden from the views while a layer is shorter,
//! and a context shorter than the threshold's last quarter pays nothing for them. From
//! `start = from_context - from_context / 4` on the layer builds its page bounds ahead of
//! use ([`lead_start`]): an append of several tokens (prefill) catches up the whole bulk in
//! one run, and a single decoded token adds whole pages on a linear schedule that completes
//! the bulk at `from_context` ([`lead_due`]: about four keys a step, so a page of 32 every
//! eight steps), so no step pays the `O(T d)` catch-up at once. Clusters are fitted by
//! k-means on the whole bulk, so with clusters asked for the layer starts at `from_context`
//! itself and catches up there in one step.

use qada_stats::{BulkSummaries, ClusterMoments, PageBounds};

use crate::{KvCache, LayerSpan, Result};

/// Room in `pages` for `capacity` keys, so that decoding never grows them (pages of fewer
/// than 8 keys grow as they fill: 6 rows of summaries per page). Built summaries and those a
/// checkpoint gives back both take it.
pub(crate) fn reserve_pages(pages: &mut PageBounds, capacity: usize) {
    if pages.page_size() >= 8 {
        pages.reserve(capacity);
    }
}

/// The context length from which a layer builds the summaries `want` asks for:
/// `from_context - from_context / 4` (the lead), or `from_context` itself when clusters are
/// asked for (k-means fits them on the whole bulk at once).
pub(crate) fn lead_start(want: BulkSummaries) -> usize {
    match want.clusters {
        Some(_) => want.from_context,
        None => want.from_context - want.from_context / 4,
    }
}

/// Bulk keys a layer of length `len` within the lead (`lead_start(want) <= len <
/// from_context`) should have summarized: a linear schedule that reaches the `bulk` keys the
/// layer will hold at `from_context` there,
/// `floor(bulk (len - start) / (from_context - start))`, rounded down to whole pages (a page's
/// rows are derived once, when it closes).
pub(crate) fn lead_due(want: BulkSummaries, len: usize, bulk: usize) -> usize {
    let start = lead_start(want);
    debug_assert!(start <= len && len < want.from_context);
    let page = want.page.unwrap_or(1).max(1);
    let due = bulk as u128 * (len - start) as u128 / (want.from_context - start) as u128;
    (due as usize) / page * page
}

impl KvCache {
    /// The summaries kept (none unless [`KvCache::set_bulk_summaries`] asked for some).
    pub fn bulk_summaries(&self) -> BulkSummaries {
        self.summaries
    }

    /// Keep `want` from now on: when it differs from what is kept, every full layer's
    /// summaries are rebuilt from its current bulk keys (`O(T d)` for pages, k-means for
    /// clusters); nothing happens when it is the same.
    pub fn set_bulk_summaries(&mut self, want: BulkSummaries) -> Result<()> {
        if want == self.summaries {
            return Ok(());
        }
        self.summaries = want;
        self.rebuild_summaries()
    }

    /// Rebuild every head's summaries from its current bulk keys (clusters by k-means, or
    /// left empty during prefill: they are fitted by [`KvCache::finish_prefill`]).
    pub(crate) fn rebuild_summaries(&mut self) -> Result<()> {
        let (nh, d) = (self.shape.n_kv_heads, self.shape.head_dim);
        let want = self.summaries;
        // a page of keys converted at a time: sized now, so decoding never grows it
        if let Some(page) = want.page {
            self.scratch
                .resize(page.min(self.shape.capacity).max(1) * d, 0.0);
        }
        for (i, store) in self.heads.iter_mut().enumerate() {
            let layer = i / nh;
            store.pages = None;
            store.clusters = None;
            store.summarized = 0;
            if self.spans[layer] != LayerSpan::Full {
                continue;
            }
            // a layer shorter than the lead's start keeps them empty until it reaches it
            let bulk = match self.lens[layer] < lead_start(want) {
                true => 0..0,
                false => self.window.split(self.lens[layer]).bulk,
            };
            let rows = store.keys.rows().slice(bulk.start, bulk.end, d);
            if let Some(page) = want.page {
                let mut p = PageBounds::new(d, page)?;
                if want.channel_keys {
                    p.keep_channel_keys()?;
                }
                reserve_pages(&mut p, self.shape.capacity);
                p.push_rows_with(rows, &mut self.scratch)?;
                store.pages = Some(p);
            }
            if let Some(k) = want.clusters {
                let mut c = ClusterMoments::new(d, k)?;
                if self.prefill_done {
                    c.fit(rows)?;
                }
                store.clusters = Some(c);
            }
            store.summarized = bulk.len();
        }
        Ok(())
    }

    /// Add the keys of `layer` that joined the bulk since the last call to its summaries
    /// (clusters only after prefill: until then they are fitted at its end), after an append
    /// of `appended` tokens; none while the layer is shorter than [`lead_start`]. From there
    /// to `from_context`, a single token adds the whole pages [`lead_due`] asks for and an append
    /// of several catches up the whole bulk; from `from_context` on every call does. The first
    /// call that reaches `from_context` with clusters asked for fits them on the whole bulk
    /// when prefill is over.
    pub(crate) fn summarize_layer(&mut self, layer: usize, appended: usize) -> Result<()> {
        let want = self.summaries;
        let len = self.lens[layer];
        if !self.keeps_summaries_from(layer, lead_start(want)) {
            return Ok(());
        }
        let (nh, d) = (self.shape.n_kv_heads, self.shape.head_dim);
        let bulk = self.window.split(len).bulk;
        let prefill_done = self.prefill_done;
        let all = appended > 1 || len >= want.from_context;
        // the bulk keys the layer holds when it reaches `from_context`
        let at_threshold = self.window.split(want.from_context).bulk.len();
        for store in &mut self.heads[layer * nh..(layer + 1) * nh] {
            let from = bulk.start + store.summarized;
            if bulk.end <= from {
                continue;
            }
            let to = match all {
                true => bulk.end,
                false => (bulk.start + lead_due(want, len, at_threshold)).clamp(from, bulk.end),
            };
            if to == from {
                continue;
            }
            let rows = store.keys.rows().slice(from, to, d);
            if let Some(p) = &mut store.pages {
                p.push_rows_with(rows, &mut self.scratch)?;
            }
            match (&mut store.clusters, prefill_done) {
                // caught up at `from_context` after prefill: fitted as at the end of prefill
                (Some(c), true) if store.summarized == 0 && c.is_empty() => c.fit(rows)?,
                (Some(c), true) => c.push_rows_of(rows)?,
                _ => {}
            }
            store.summarized = to - bulk.start;
        }
        Ok(())
    }

    /// True when `layer` keeps its summaries current: some are asked for, it is a full
    /// layer, and it holds at least `from_context` keys.
    pub(crate) fn is_summarized(&self, layer: usize) -> bool {
        self.keeps_summaries_from(layer, self.summaries.from_context)
    }

    /// True when some summaries are asked for, `layer` is a full layer, and it holds at least
    /// `len` keys.
    fn keeps_summaries_from(&self, layer: usize, len: usize) -> bool {
        self.summaries.asks() && self.spans[layer] == LayerSpan::Full && self.lens[layer] >= len
    }

    /// At the end of prefill: fit the clusters on each summarized full layer's bulk (a
    /// shorter layer fits them when it reaches `from_context`).
    pub(crate) fn fit_clusters(&mut self) -> Result<()> {
        if self.summaries.clusters.is_none() {
            return Ok(());
        }
        let (nh, d) = (self.shape.n_kv_heads, self.shape.head_dim);
        for i in 0..self.heads.len() {
            let layer = i / nh;
            if !self.is_summarized(layer) {
                continue;
            }
            let store = &mut self.heads[i];
            let Some(c) = &mut store.clusters else {
                continue;
            };
            let bulk = self.window.split(self.lens[layer]).bulk;
            c.fit(store.keys.rows().slice(bulk.start, bulk.end, d))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CacheShape, KvDtype, MomentsMode, WindowConfig};

    /// One full layer, one KV head, d = 4, sink 2, local 6.
    fn cache() -> KvCache {
        let shape = CacheShape {
            n_layers: 1,
            n_kv_heads: 1,
            head_dim: 4,
            capacity: 256,
            dtype: KvDtype::F32,
        };
        let window = WindowConfig::new(2, 6).unwrap();
        KvCache::new(shape, window, MomentsMode::Update).unwrap()
    }

    fn append(c: &mut KvCache, n: usize) {
        let p0 = c.len(0);
        let x: Vec<f32> = (0..n * 4)
            .map(|i| ((p0 * 4 + i) as f32 * 0.37).sin() + ((p0 + i / 4) / 8) as f32)
            .collect();
        c.append(0, &x, &x).unwrap();
    }

    /// Below `from_context` nothing is summarized (no work, nothing shown); the step that
    /// reaches it catches up the whole bulk, pages and clusters fitted as at prefill's end.
    #[test]
    fn summaries_start_when_the_layer_reaches_from_context() {
        let mut c = cache();
        let want = BulkSummaries {
            page: Some(4),
            clusters: Some(3),
            channel_keys: true,
            from_context: 40,
        };
        c.set_bulk_summaries(want).unwrap();
        append(&mut c, 30);
        c.finish_prefill().unwrap();
        for _ in 0..9 {
            append(&mut c, 1);
            let s = &c.heads[0];
            assert_eq!(s.summarized, 0);
            assert_eq!(s.pages.as_ref().unwrap().n_rows(), 0);
            assert!(s.clusters.as_ref().unwrap().is_empty());
            assert!(c.head(0, 0).unwrap().bulk_pages().is_none());
        }
        append(&mut c, 1);
        assert_eq!(c.len(0), 40);
        let v = c.head(0, 0).unwrap();
        let bulk = v.bulk().keys;
        let mut pages = PageBounds::new(4, 4).unwrap();
        pages.keep_channel_keys().unwrap();
        pages.push_rows_of(bulk).unwrap();
        assert_eq!(v.bulk_pages(), Some(&pages));
        let mut fitted = ClusterMoments::new(4, 3).unwrap();
        fitted.fit(bulk).unwrap();
        assert_eq!(v.bulk_clusters(), Some(&fitted));
        assert_eq!(c.heads[0].summarized, 40 - 6);
        // and from then on each key that leaves the window joins them
        append(&mut c, 1);
        fitted
            .push_rows_of(c.head(0, 0).unwrap().bulk().keys.slice(34, 35, 4))
            .unwrap();
        assert_eq!(c.head(0, 0).unwrap().bulk_clusters(), Some(&fitted));
    }

    /// Pages only: from the lead's start (30 of 40) single tokens add whole pages on the
    /// schedule, never a catch-up of the whole bulk in one step, and the step that reaches
    /// `from_context` leaves the pages equal to pages built from the bulk at once.
    #[test]
    fn pages_are_built_ahead_of_from_context_a_page_at_a_time() {
        let mut c = cache();
        let want = BulkSummaries {
            page: Some(4),
            clusters: None,
            channel_keys: true,
            from_context: 40,
        };
        assert_eq!(lead_start(want), 30);
        c.set_bulk_summaries(want).unwrap();
        append(&mut c, 20);
        c.finish_prefill().unwrap();
        let mut last = 0;
        while c.len(0) < 39 {
            append(&mut c, 1);
            let done = c.heads[0].summarized;
            if c.len(0) < 30 {
                assert_eq!(done, 0, "before the lead, at {}", c.len(0));
            }
            assert!(
                done.is_multiple_of(4) && done >= last && done - last <= 4,
                "{last} -> {done}"
            );
            assert!(c.head(0, 0).unwrap().bulk_pages().is_none());
            last = done;
        }
        // the lead did the work: the step that reaches 40 adds at most a page and a step's
        // share (34 bulk keys over the 10 steps of the lead)
        assert!(last + 4 + 4 >= 40 - 6, "{last}");
        append(&mut c, 1);
        let v = c.head(0, 0).unwrap();
        let mut pages = PageBounds::new(4, 4).unwrap();
        pages.keep_channel_keys().unwrap();
        pages.push_rows_of(v.bulk().keys).unwrap();
        assert_eq!(v.bulk_pages(), Some(&pages));
    }

    /// An append of several tokens within the lead (prefill) catches up the whole bulk.
    #[test]
    fn a_prefill_that_ends_in_the_lead_summarizes_the_whole_bulk() {
        let mut c = cache();
        let want = BulkSummaries {
            page: Some(4),
            clusters: None,
            channel_keys: false,
            from_context: 40,
        };
        c.set_bulk_summaries(want).unwrap();
        append(&mut c, 33);
        assert_eq!(c.heads[0].summarized, 33 - 6);
        assert!(c.head(0, 0).unwrap().bulk_pages().is_none());
    }

    proptest::proptest! {
        /// The schedule starts at 0, never decreases, stays in whole pages and within the bulk
        /// the layer holds, and reaches the bulk at `from_context` (its limit).
        #[test]
        fn the_lead_schedule_is_monotone_in_pages_and_ends_at_the_bulk(
            from in 1usize..20_000, page in proptest::option::of(1usize..128),
            local in 0usize..600,
        ) {
            let want = BulkSummaries {
                page,
                clusters: None,
                channel_keys: false,
                from_context: from,
            };
            let start = lead_start(want);
            let bulk_at = |t: usize| t.saturating_sub(local);
            let b = bulk_at(from);
            let p = page.unwrap_or(1);
            let mut last = 0;
            for len in start..from {
                let due = lead_due(want, len, b);
                proptest::prop_assert!(due.is_multiple_of(p) && due >= last && due <= b);
                if len == start {
                    proptest::prop_assert_eq!(due, 0);
                }
                last = due;
            }
            // one step before the threshold at most a page and a step's share is left
            let share = b.div_ceil((from - start).max(1));
            proptest::prop_assert!(b - last <= p + share, "b {} last {}", b, last);
        }
    }
}
