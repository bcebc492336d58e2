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
//! ([`BulkSummaries::from_context`]) gets them empty, and hidden from the views, while a layer
//! is shorter: the layer catches them up from its bulk rows when it reaches that length
//! (`O(T d)` once, clusters fitted by k-means), so a short context pays nothing for them.

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
            // a layer shorter than `from_context` keeps them empty until it reaches it
            let bulk = match self.lens[layer] < want.from_context {
                true => 0..0,
                false => self.window.split(self.lens[layer]).bulk,
            };
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
    /// (clusters only after prefill: until then they are fitted at its end), or none while
    /// the layer is shorter than `from_context`. The first call from that length on catches
    /// up the whole bulk, and fits the clusters on it when prefill is over.
    pub(crate) fn summarize_layer(&mut self, layer: usize) -> Result<()> {
        if !self.is_summarized(layer) {
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
            match (&mut store.clusters, prefill_done) {
                // caught up at `from_context` after prefill: fitted as at the end of prefill
                (Some(c), true) if store.summarized == 0 && c.is_empty() => c.fit(rows)?,
                (Some(c), true) => c.push_rows_of(rows)?,
                _ => {}
            }
            store.summarized = bulk.end - bulk.start;
        }
        Ok(())
    }

    /// True when `layer` keeps its summaries current: some are asked for, it is a full
    /// layer, and it holds at least `from_context` keys.
    pub(crate) fn is_summarized(&self, layer: usize) -> bool {
        self.summaries.asks()
            && self.spans[layer] == LayerSpan::Full
            && self.lens[layer] >= self.summaries.from_context
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
}
