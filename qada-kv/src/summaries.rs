//! Summaries of each head's bulk keys besides the moments, kept when a criterion asks for
//! them ([`BulkSummaries`]): page bounds ([`PageBounds`], every bulk key, whatever the
//! moments mode: a bound must cover every key attention could read) and cluster moments
//! ([`ClusterMoments`], k-means on the bulk at the end of prefill, then each key that leaves
//! the window joins its nearest cluster).
//!
//! Both take the keys as stored (f16 or q8 rows converted to f32 exactly as attention reads
//! them). Sliding layers have no bulk and keep none.

use qada_stats::{BulkSummaries, ClusterMoments, PageBounds};

use crate::{KvCache, LayerSpan, Result};

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
        for (i, store) in self.heads.iter_mut().enumerate() {
            let layer = i / nh;
            store.pages = None;
            store.clusters = None;
            store.summarized = 0;
            if self.spans[layer] != LayerSpan::Full {
                continue;
            }
            let bulk = self.window.split(self.lens[layer]).bulk;
            let rows = store.keys.rows().slice(bulk.start, bulk.end, d);
            if let Some(page) = want.page {
                let mut p = PageBounds::new(d, page)?;
                if want.channel_keys {
                    p.keep_channel_keys()?;
                }
                // room for the whole capacity, so that decoding never grows it (pages of
                // fewer than 8 keys grow as they fill: 6 rows of summaries per page)
                if page >= 8 {
                    p.reserve(self.shape.capacity);
                }
                p.push_rows_of(rows)?;
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
    /// (clusters only after prefill: until then they are fitted at its end).
    pub(crate) fn summarize_layer(&mut self, layer: usize) -> Result<()> {
        if self.summaries == BulkSummaries::default() || self.spans[layer] != LayerSpan::Full {
            return Ok(());
        }
        let (nh, d) = (self.shape.n_kv_heads, self.shape.head_dim);
        let bulk = self.window.split(self.lens[layer]).bulk;
        let prefill_done = self.prefill_done;
        for store in &mut self.heads[layer * nh..(layer + 1) * nh] {
            let from = bulk.start + store.summarized;
            if bulk.end <= from {
                continue;
            }
            let rows = store.keys.rows().slice(from, bulk.end, d);
            if let Some(p) = &mut store.pages {
                p.push_rows_of(rows)?;
            }
            if let (Some(c), true) = (&mut store.clusters, prefill_done) {
                c.push_rows_of(rows)?;
            }
            store.summarized = bulk.end - bulk.start;
        }
        Ok(())
    }

    /// At the end of prefill: fit the clusters on each full layer's bulk.
    pub(crate) fn fit_clusters(&mut self) -> Result<()> {
        if self.summaries.clusters.is_none() {
            return Ok(());
        }
        let (nh, d) = (self.shape.n_kv_heads, self.shape.head_dim);
        for (i, store) in self.heads.iter_mut().enumerate() {
            let layer = i / nh;
            let (Some(c), LayerSpan::Full) = (&mut store.clusters, self.spans[layer]) else {
                continue;
            };
            let bulk = self.window.split(self.lens[layer]).bulk;
            c.fit(store.keys.rows().slice(bulk.start, bulk.end, d))?;
        }
        Ok(())
    }
}
