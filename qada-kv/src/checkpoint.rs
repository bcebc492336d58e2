//! Checkpoints: a cache state to return to (typically right after prefill, to decode the same
//! prompt under several criteria). A checkpoint records the identity of the cache that took it
//! ([`KvCache::id`]) and restores only into that cache.
//!
//! A full layer only grows, so its checkpoint is a length to truncate back to. A sliding layer
//! drops rows as it grows, so its checkpoint also copies the rows it keeps (at most
//! `max(2W, W - 1 + n)` per head, `n` the last block appended) and restore puts them back.

use qada_stats::{BulkSummaries, ClusterMoments, FactoredMoments, KeyMoments, PageBounds};

use crate::exact::ExactKeys;
use crate::store::Store;
use crate::{KvCache, KvError, LayerSpan, MomentsMode, Result};

/// A cache state to return to: lengths, bulk moments, and the kept rows of sliding layers
/// (see [`KvCache::checkpoint`]).
#[derive(Clone, Debug)]
pub struct CacheCheckpoint {
    /// [`KvCache::id`] of the cache that took it.
    cache_id: u64,
    lens: Vec<usize>,
    firsts: Vec<usize>,
    /// Per (layer, KV head): a copy of a sliding layer's kept keys and values; `None` in a
    /// full layer.
    rows: Vec<Option<(Store, Store)>>,
    moments: Vec<(KeyMoments, usize, Option<FactoredMoments>)>,
    /// Per (layer, KV head): the f32 keys not yet in the moments (q8 caches; empty otherwise).
    exact: Vec<ExactKeys>,
    mode: MomentsMode,
    moments_fixed: bool,
    prefill_done: bool,
    /// Per (layer, KV head): page bounds, cluster moments, and how many bulk keys they hold.
    summaries: Vec<(Option<PageBounds>, Option<ClusterMoments>, usize)>,
    wanted: BulkSummaries,
}

impl CacheCheckpoint {
    /// [`KvCache::id`] of the cache that took this checkpoint.
    pub fn cache_id(&self) -> u64 {
        self.cache_id
    }
}

impl KvCache {
    /// Remember the current lengths and moments, and copy the kept rows of sliding layers.
    pub fn checkpoint(&self) -> CacheCheckpoint {
        let nh = self.shape.n_kv_heads;
        CacheCheckpoint {
            cache_id: self.id,
            lens: self.lens.clone(),
            firsts: self.firsts.clone(),
            rows: self
                .heads
                .iter()
                .enumerate()
                .map(|(i, h)| match self.spans[i / nh] {
                    LayerSpan::Full => None,
                    LayerSpan::Sliding(_) => Some((h.keys.clone(), h.values.clone())),
                })
                .collect(),
            moments: self
                .heads
                .iter()
                .map(|h| (h.bulk.clone(), h.folded, h.factored.clone()))
                .collect(),
            exact: self.heads.iter().map(|h| h.exact.clone()).collect(),
            mode: self.mode.clone(),
            moments_fixed: self.moments_fixed,
            prefill_done: self.prefill_done,
            summaries: self
                .heads
                .iter()
                .map(|h| (h.pages.clone(), h.clusters.clone(), h.summarized))
                .collect(),
            wanted: self.summaries,
        }
    }

    /// Return to a checkpoint taken earlier in the same sequence: tokens appended since are
    /// dropped and the moments, summaries, mode and prefill state are restored; sliding layers get their
    /// kept rows back as they were.
    ///
    /// A checkpoint of another cache (another session, a clone, or this cache before
    /// [`KvCache::clear`]) is refused with [`KvError::ForeignCheckpoint`]; one whose lengths
    /// exceed the cache's is refused too.
    pub fn restore(&mut self, cp: &CacheCheckpoint) -> Result<()> {
        if cp.cache_id != self.id {
            return Err(KvError::ForeignCheckpoint {
                checkpoint: cp.cache_id,
                cache: self.id,
            });
        }
        if cp.lens.len() != self.lens.len()
            || cp.moments.len() != self.heads.len()
            || cp.rows.len() != self.heads.len()
            || cp.exact.len() != self.heads.len()
            || cp.summaries.len() != self.heads.len()
        {
            return Err(KvError::OutOfRange {
                what: "checkpoint layers",
                index: cp.lens.len(),
                count: self.lens.len(),
            });
        }
        for (layer, (&now, &then)) in self.lens.iter().zip(&cp.lens).enumerate() {
            if then > now {
                return Err(KvError::CapacityExceeded {
                    layer,
                    len: now,
                    requested: then - now,
                    capacity: now,
                });
            }
        }
        let (nh, d) = (self.shape.n_kv_heads, self.shape.head_dim);
        for (i, ((store, (m, folded, factored)), rows)) in self
            .heads
            .iter_mut()
            .zip(&cp.moments)
            .zip(&cp.rows)
            .enumerate()
        {
            match rows {
                None => {
                    let len = cp.lens[i / nh];
                    store.keys.truncate(len * d);
                    store.values.truncate(len * d);
                }
                Some((keys, values)) => {
                    store.keys.copy_from(keys);
                    store.values.copy_from(values);
                }
            }
            store.bulk.clone_from(m);
            store.folded = *folded;
            store.factored.clone_from(factored);
            store.exact.clone_from(&cp.exact[i]);
            let (pages, clusters, summarized) = &cp.summaries[i];
            store.pages.clone_from(pages);
            // a clone holds only what the checkpoint held: room again for the capacity
            if let Some(p) = &mut store.pages {
                crate::summaries::reserve_pages(p, self.shape.capacity);
            }
            store.clusters.clone_from(clusters);
            store.summarized = *summarized;
        }
        self.lens.clone_from(&cp.lens);
        self.firsts.clone_from(&cp.firsts);
        self.mode = cp.mode.clone();
        self.moments_fixed = cp.moments_fixed;
        self.prefill_done = cp.prefill_done;
        self.summaries = cp.wanted;
        Ok(())
    }
}
