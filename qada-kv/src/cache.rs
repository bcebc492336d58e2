//! The cache itself: per (layer, KV head) contiguous keys and values, the bulk moments beside
//! them, and the core operations (`new`, `append`, `finish_prefill`, borrowing views). Where the
//! moments come from is in `moments_mode.rs`, checkpoints in `checkpoint.rs`, views in
//! `views.rs`, element storage in `store.rs`, what a sliding layer keeps in `span.rs`.

use std::sync::atomic::{AtomicU64, Ordering};

use qada_stats::{BulkSummaries, ClusterMoments, FactoredMoments, KeyMoments, PageBounds};

use crate::exact::ExactKeys;
use crate::span::{kept_bound, rows_to_drop};
use crate::store::Store;
use crate::{HeadView, KvDtype, KvError, LayerSpan, LayerView, MomentsMode, Result, WindowConfig};

/// Sizes of a cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheShape {
    /// Transformer layers.
    pub n_layers: usize,
    /// KV heads per layer.
    pub n_kv_heads: usize,
    /// Length `d` of one key or value.
    pub head_dim: usize,
    /// Most tokens a layer may hold (the model's context length); a sliding layer counts
    /// every position appended, not only the rows it keeps.
    pub capacity: usize,
    /// Element type of stored keys and values.
    pub dtype: KvDtype,
}

/// Keys, values and bulk moments of one (layer, KV head).
#[derive(Clone, Debug)]
pub(crate) struct HeadStore {
    pub(crate) keys: Store,
    pub(crate) values: Store,
    /// Moments of the bulk (or of calibration keys); empty in a sliding layer.
    pub(crate) bulk: KeyMoments,
    /// Bulk positions `sink .. sink + folded` are in `bulk` (option 1 only).
    pub(crate) folded: usize,
    /// `bulk` factored, while the moments are fixed.
    pub(crate) factored: Option<FactoredMoments>,
    /// q8 caches, full layers: the f32 keys not yet in `bulk` (empty otherwise).
    pub(crate) exact: ExactKeys,
    /// Page bounds of the bulk keys, when kept ([`KvCache::set_bulk_summaries`]).
    pub(crate) pages: Option<PageBounds>,
    /// Cluster moments of the bulk keys, when kept.
    pub(crate) clusters: Option<ClusterMoments>,
    /// Bulk positions `sink .. sink + summarized` are in `pages` and `clusters`.
    pub(crate) summarized: usize,
}

/// Source of [`KvCache::id`]: process-wide, never reused.
static NEXT_CACHE_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh cache identity.
fn next_cache_id() -> u64 {
    NEXT_CACHE_ID.fetch_add(1, Ordering::Relaxed)
}

/// A KV cache for all layers of a model.
///
/// Each layer has a [`LayerSpan`]: a full layer keeps every row, a sliding layer only the rows
/// its queries can still see (see [`KvCache::with_spans`]). Layer indices are the model's
/// either way.
///
/// Each cache has an identity ([`KvCache::id`]), unique in the process, that its checkpoints
/// record: [`KvCache::restore`] refuses a checkpoint of another cache. A clone is another
/// cache (another session): it starts with the same contents but a new id, because from then
/// on the two sequences diverge and a checkpoint of one would restore garbage into the other.
#[derive(Debug)]
pub struct KvCache {
    /// Identity of this cache and sequence, recorded in its checkpoints.
    pub(crate) id: u64,
    pub(crate) shape: CacheShape,
    pub(crate) window: WindowConfig,
    pub(crate) mode: MomentsMode,
    /// Layer-major: `layer * n_kv_heads + kv_head`.
    pub(crate) heads: Vec<HeadStore>,
    /// Positions appended per layer.
    pub(crate) lens: Vec<usize>,
    /// What each layer's queries see.
    pub(crate) spans: Vec<LayerSpan>,
    /// Position of each layer's first kept row (0 in a full layer).
    pub(crate) firsts: Vec<usize>,
    /// Set by `finish_prefill`: moments no longer follow the bulk.
    pub(crate) moments_fixed: bool,
    /// Set by `finish_prefill`.
    pub(crate) prefill_done: bool,
    /// What each full layer keeps about its bulk besides the moments.
    pub(crate) summaries: BulkSummaries,
    /// Keys converted to f32 on their way into the page bounds, a page long once summaries
    /// are asked for, so that adding a page while decoding allocates nothing.
    pub(crate) scratch: Vec<f32>,
}

impl Clone for KvCache {
    /// The same contents under a new [`KvCache::id`]: checkpoints of `self` do not restore
    /// into the clone, nor the clone's into `self`.
    fn clone(&self) -> Self {
        KvCache {
            id: next_cache_id(),
            shape: self.shape,
            window: self.window,
            mode: self.mode.clone(),
            heads: self.heads.clone(),
            lens: self.lens.clone(),
            spans: self.spans.clone(),
            firsts: self.firsts.clone(),
            moments_fixed: self.moments_fixed,
            prefill_done: self.prefill_done,
            summaries: self.summaries,
            scratch: self.scratch.clone(),
        }
    }
}

impl KvCache {
    /// An empty cache whose layers are all [`LayerSpan::Full`].
    pub fn new(shape: CacheShape, window: WindowConfig, mode: MomentsMode) -> Result<Self> {
        Self::with_spans(shape, window, mode, vec![LayerSpan::Full; shape.n_layers])
    }

    /// An empty cache with one [`LayerSpan`] per layer (`spans[layer]`).
    ///
    /// A sliding layer (`Sliding(W)`) still counts every position appended ([`KvCache::len`],
    /// capacity checks), but keeps only the rows of positions `first .. len` its queries can
    /// still see: after an append of `n` tokens, `first <= len - (n + W - 1)` and at most
    /// `max(2W, W - 1 + n)` rows are kept. Its views are all window (the last `min(W, len)`
    /// positions) and it keeps no bulk moments. `W >= capacity` is legal: nothing is dropped.
    ///
    /// Errors: [`KvError::SpanCount`] when `spans.len() != shape.n_layers`,
    /// [`KvError::EmptySlidingWindow`] for a `Sliding(0)`, [`KvError::Q8HeadDim`] for a
    /// [`KvDtype::Q8`] cache whose head dimension is not a multiple of 32.
    pub fn with_spans(
        shape: CacheShape,
        window: WindowConfig,
        mode: MomentsMode,
        spans: Vec<LayerSpan>,
    ) -> Result<Self> {
        if spans.len() != shape.n_layers {
            return Err(KvError::SpanCount {
                spans: spans.len(),
                layers: shape.n_layers,
            });
        }
        if let Some(layer) = spans.iter().position(|&s| s == LayerSpan::Sliding(0)) {
            return Err(KvError::EmptySlidingWindow { layer });
        }
        if shape.head_dim == 0 {
            return Err(KvError::DimensionMismatch {
                what: "head dimension",
                expected: 1,
                found: 0,
            });
        }
        if shape.dtype == KvDtype::Q8 && !shape.head_dim.is_multiple_of(qada_stats::Q8_BLOCK) {
            return Err(KvError::Q8HeadDim {
                head_dim: shape.head_dim,
            });
        }
        let head = HeadStore {
            keys: Store::new(shape.dtype),
            values: Store::new(shape.dtype),
            bulk: KeyMoments::new(shape.head_dim),
            folded: 0,
            factored: None,
            exact: ExactKeys::default(),
            pages: None,
            clusters: None,
            summarized: 0,
        };
        let cache = KvCache {
            id: next_cache_id(),
            shape,
            window,
            mode,
            heads: vec![head; shape.n_layers * shape.n_kv_heads],
            lens: vec![0; shape.n_layers],
            spans,
            firsts: vec![0; shape.n_layers],
            moments_fixed: false,
            prefill_done: false,
            summaries: BulkSummaries::default(),
            scratch: Vec::new(),
        };
        if let MomentsMode::Calibration { table, .. } = &cache.mode {
            cache.check_table(table)?;
        }
        Ok(cache)
    }

    /// Identity of this cache and of the sequence it holds: unique in the process, new at
    /// [`KvCache::new`], at `clone` and at [`KvCache::clear`]. Checkpoints record it.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Sizes of the cache.
    pub fn shape(&self) -> CacheShape {
        self.shape
    }
    /// Sink and window sizes.
    pub fn window(&self) -> WindowConfig {
        self.window
    }
    /// Where bulk moments come from.
    pub fn mode(&self) -> &MomentsMode {
        &self.mode
    }
    /// What `layer`'s queries see; [`LayerSpan::Full`] for a layer out of range (as
    /// [`KvCache::len`] reads 0 there).
    pub fn span(&self, layer: usize) -> LayerSpan {
        self.spans.get(layer).copied().unwrap_or_default()
    }
    /// Every layer's span, by layer.
    pub fn spans(&self) -> &[LayerSpan] {
        &self.spans
    }
    /// Bytes of the keys and values the cache holds: every row of a full layer, the kept
    /// rows of a sliding one (spare allocation not counted); 34 bytes per 32 values in a q8
    /// cache (its f32 copy of the keys not yet in the moments, at most a window's, is not
    /// counted).
    pub fn stored_bytes(&self) -> usize {
        self.heads
            .iter()
            .map(|h| h.keys.bytes() + h.values.bytes())
            .sum()
    }
    /// Positions cached in `layer` (all appended, kept or not).
    pub fn len(&self, layer: usize) -> usize {
        self.lens.get(layer).copied().unwrap_or(0)
    }
    /// Tokens cached in every layer (the sequence length after a full forward pass).
    pub fn seq_len(&self) -> usize {
        self.lens.iter().copied().min().unwrap_or(0)
    }
    /// True when no layer holds a token.
    pub fn is_empty(&self) -> bool {
        self.lens.iter().all(|&l| l == 0)
    }

    /// Forget every token and moment; keep the allocations. The cache starts another
    /// sequence: it takes a new [`KvCache::id`], so checkpoints taken before are refused.
    pub fn clear(&mut self) {
        for h in &mut self.heads {
            h.keys.clear();
            h.values.clear();
            h.bulk = KeyMoments::new(self.shape.head_dim);
            h.folded = 0;
            h.factored = None;
            h.exact.reset(0);
            h.summarized = 0;
            if let Some(p) = &mut h.pages {
                p.clear();
            }
            if let Some(c) = &mut h.clusters {
                c.clear();
            }
        }
        self.id = next_cache_id();
        self.lens.iter_mut().for_each(|l| *l = 0);
        self.firsts.iter_mut().for_each(|f| *f = 0);
        self.moments_fixed = false;
        self.prefill_done = false;
    }

    /// Append tokens to one layer. `keys` and `values` are token-major: each token contributes
    /// `n_kv_heads * head_dim` values, head after head. Bulk moments follow in update mode (and
    /// in frozen mode until [`KvCache::finish_prefill`]). A sliding layer first drops the rows
    /// none of the new queries sees, when keeping them would pass its bound.
    pub fn append(&mut self, layer: usize, keys: &[f32], values: &[f32]) -> Result<()> {
        let CacheShape {
            n_layers,
            n_kv_heads,
            head_dim: d,
            capacity,
            ..
        } = self.shape;
        if layer >= n_layers {
            return Err(KvError::OutOfRange {
                what: "layer",
                index: layer,
                count: n_layers,
            });
        }
        let row = n_kv_heads * d;
        for (what, x) in [("keys", keys), ("values", values)] {
            if x.len() % row != 0 {
                return Err(KvError::DimensionMismatch {
                    what,
                    expected: row,
                    found: x.len(),
                });
            }
        }
        let n = keys.len() / row;
        if values.len() / row != n {
            return Err(KvError::KeyValueMismatch {
                keys: n,
                values: values.len() / row,
            });
        }
        let len = self.lens[layer];
        if len + n > capacity {
            return Err(KvError::CapacityExceeded {
                layer,
                len,
                requested: n,
                capacity,
            });
        }
        let first = self.firsts[layer];
        let (drop, max_rows) = match self.spans[layer] {
            LayerSpan::Full => (first..first, None),
            LayerSpan::Sliding(w) => (
                rows_to_drop(w, first, len, n),
                Some(kept_bound(w, n).min(capacity)),
            ),
        };
        // a q8 full layer keeps its keys in f32 too until they join the moments (exact.rs)
        let exact = self.shape.dtype == KvDtype::Q8 && max_rows.is_none();
        let follows = self.follows_bulk();
        let heads = &mut self.heads[layer * n_kv_heads..(layer + 1) * n_kv_heads];
        for (h, store) in heads.iter_mut().enumerate() {
            if exact && !follows {
                store.exact.reset(len + n);
            } else if exact {
                store.exact.reserve(n * d);
                for t in 0..n {
                    let at = t * row + h * d;
                    store.exact.extend(&keys[at..at + d]);
                }
            }
            match max_rows {
                None => {
                    store.keys.reserve(n * d);
                    store.values.reserve(n * d);
                }
                Some(rows) => {
                    store.keys.drop_front(drop.len() * d);
                    store.values.drop_front(drop.len() * d);
                    store.keys.reserve_within(n * d, rows * d);
                    store.values.reserve_within(n * d, rows * d);
                }
            }
            for t in 0..n {
                let at = t * row + h * d;
                store.keys.extend(&keys[at..at + d]);
                store.values.extend(&values[at..at + d]);
            }
        }
        self.lens[layer] = len + n;
        self.firsts[layer] = drop.end;
        if self.follows_bulk() {
            self.fold_layer(layer)?;
        }
        self.summarize_layer(layer, n)
    }

    /// Storage of one (layer, KV head), both already checked to be in range.
    #[inline]
    pub(crate) fn head_store(&self, layer: usize, kv_head: usize) -> &HeadStore {
        &self.heads[layer * self.shape.n_kv_heads + kv_head]
    }

    /// Mark the end of the prompt. Frozen mode stops updating the bulk moments; calibration
    /// mode looks up the checkpoint for the prompt length. Update mode is unaffected.
    pub fn finish_prefill(&mut self) -> Result<()> {
        self.prefill_done = true;
        match &self.mode {
            MomentsMode::Update => {}
            MomentsMode::Frozen => self.moments_fixed = true,
            MomentsMode::Calibration { .. } => self.apply_calibration()?,
        }
        self.fit_clusters()?;
        self.refactor()
    }

    /// Borrow one layer and KV head.
    pub fn head(&self, layer: usize, kv_head: usize) -> Result<HeadView<'_>> {
        let view = self.layer(layer)?;
        if kv_head >= self.shape.n_kv_heads {
            return Err(KvError::OutOfRange {
                what: "KV head",
                index: kv_head,
                count: self.shape.n_kv_heads,
            });
        }
        Ok(view.head(kv_head))
    }

    /// Borrow one layer: its KV heads without a `Result` each (a decoding step asks for
    /// every head of every layer).
    pub fn layer(&self, layer: usize) -> Result<LayerView<'_>> {
        if layer >= self.shape.n_layers {
            return Err(KvError::OutOfRange {
                what: "layer",
                index: layer,
                count: self.shape.n_layers,
            });
        }
        Ok(LayerView::new(self, layer))
    }
}
