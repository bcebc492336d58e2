//! Borrowed views of the cache: one layer ([`LayerView`]), one KV head ([`HeadView`]) and its
//! sink, bulk and window [`Segment`]s. Every view is a sub-slice of the head's contiguous
//! storage: nothing is copied. Positions are the sequence's; a sliding layer's storage starts
//! at its first kept position ([`HeadView::first_position`]), and segments map one to the other.

use qada_stats::{ClusterMoments, FactoredMoments, KeyDistribution, KeyMoments, PageBounds, Rows};

use crate::{KvCache, LayerSpan, Split, WindowConfig};

/// One contiguous run of positions of one head: borrowed keys and values, row-major.
#[derive(Clone, Copy, Debug)]
pub struct Segment<'a> {
    /// Position of the first row.
    pub start: usize,
    /// `len x d` keys.
    pub keys: Rows<'a>,
    /// `len x d` values.
    pub values: Rows<'a>,
}

impl<'a> Segment<'a> {
    /// Number of positions, given the row length.
    pub fn len(&self, dim: usize) -> usize {
        self.keys.n_rows(dim)
    }
    /// True when the segment holds no position.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// Borrowed view of one layer and KV head.
///
/// It covers positions `0..len()`, of which the rows of `first_position()..len()` are kept: all
/// of them in a full layer, the ones its queries can still see in a sliding layer
/// ([`LayerSpan::Sliding`]). [`HeadView::keys`] and [`HeadView::values`] return the kept rows;
/// the segments ([`HeadView::sink`], [`HeadView::bulk`], [`HeadView::window`]) are given in
/// positions and always lie within the kept rows (a sliding layer is all window).
#[derive(Clone, Copy, Debug)]
pub struct HeadView<'a> {
    /// Kept keys: positions `first..len`.
    keys: Rows<'a>,
    /// Kept values: positions `first..len`.
    values: Rows<'a>,
    /// Position of the first kept row.
    first: usize,
    /// Positions `T`.
    len: usize,
    span: LayerSpan,
    dim: usize,
    window: WindowConfig,
    bulk: &'a KeyMoments,
    factored: Option<&'a FactoredMoments>,
    pages: Option<&'a PageBounds>,
    clusters: Option<&'a ClusterMoments>,
}

impl<'a> HeadView<'a> {
    /// Row length `d`.
    pub fn dim(&self) -> usize {
        self.dim
    }
    /// Number of positions `T` appended, kept or not.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True when no token is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Position of the first kept row: 0 in a full layer, in a sliding layer the oldest
    /// position a query may still need.
    pub fn first_position(&self) -> usize {
        self.first
    }
    /// What this layer's queries see.
    pub fn span(&self) -> LayerSpan {
        self.span
    }
    /// The kept keys, `(T - first_position()) x d`: row `i` is position
    /// `first_position() + i`. All `T` keys in a full layer.
    pub fn keys(&self) -> Rows<'a> {
        self.keys
    }
    /// The kept values, `(T - first_position()) x d`: row `i` is position
    /// `first_position() + i`. All `T` values in a full layer.
    pub fn values(&self) -> Rows<'a> {
        self.values
    }
    /// The sink, bulk and window position ranges for the current length (a sliding layer's
    /// sink and bulk are empty and its window is the last `min(W, T)` positions; see
    /// [`LayerSpan::split`]).
    pub fn split(&self) -> Split {
        self.span.split(&self.window, self.len)
    }
    /// Window configuration of the cache.
    pub fn window_config(&self) -> WindowConfig {
        self.window
    }
    /// Positions `r` (within `first..len`), as kept rows.
    fn segment(&self, r: std::ops::Range<usize>) -> Segment<'a> {
        let (d, f) = (self.dim, self.first);
        Segment {
            start: r.start,
            keys: self.keys.slice(r.start - f, r.end - f, d),
            values: self.values.slice(r.start - f, r.end - f, d),
        }
    }
    /// The first `T_sink` tokens (none in a sliding layer).
    pub fn sink(&self) -> Segment<'a> {
        self.segment(self.split().sink)
    }
    /// The most recent `T_local - T_sink` tokens (`W` in a sliding layer).
    pub fn window(&self) -> Segment<'a> {
        self.segment(self.split().window)
    }
    /// Everything between sink and window (none in a sliding layer).
    pub fn bulk(&self) -> Segment<'a> {
        self.segment(self.split().bulk)
    }
    /// Moments of the bulk keys, as the cache's [`MomentsMode`](crate::MomentsMode) defines
    /// them. Empty (count 0) when there is nothing to estimate from yet.
    pub fn bulk_moments(&self) -> &'a KeyMoments {
        self.bulk
    }
    /// Page bounds of the bulk keys, when the cache keeps them
    /// ([`KvCache::set_bulk_summaries`]) and they are current (the layer holds at least
    /// their `from_context` keys).
    pub fn bulk_pages(&self) -> Option<&'a PageBounds> {
        self.pages
    }
    /// Cluster moments of the bulk keys, when the cache keeps them and they are current, as
    /// the pages (empty until the end of prefill).
    pub fn bulk_clusters(&self) -> Option<&'a ClusterMoments> {
        self.clusters
    }
    /// The bulk key distribution the criterion should use: the factored form of the moments
    /// while they are fixed (frozen or calibration), the full moments otherwise.
    pub fn bulk_distribution(&self) -> &'a dyn KeyDistribution {
        match self.factored {
            Some(f) => f,
            None => self.bulk,
        }
    }
}

/// One layer of a [`KvCache`] (see [`KvCache::layer`]).
#[derive(Clone, Copy, Debug)]
pub struct LayerView<'a> {
    cache: &'a KvCache,
    layer: usize,
}

impl<'a> LayerView<'a> {
    /// View of `layer`, already checked to be one of the cache's.
    pub(crate) fn new(cache: &'a KvCache, layer: usize) -> Self {
        LayerView { cache, layer }
    }

    /// KV heads in the layer.
    pub fn n_kv_heads(&self) -> usize {
        self.cache.shape.n_kv_heads
    }

    /// KV head `kv_head`; panics when `kv_head >= n_kv_heads()`, as slice indexing does.
    pub fn head(&self, kv_head: usize) -> HeadView<'a> {
        let c = self.cache;
        let shape = c.shape;
        assert!(
            kv_head < shape.n_kv_heads,
            "KV head {kv_head} of {}",
            shape.n_kv_heads
        );
        let s = c.head_store(self.layer, kv_head);
        // summaries kept from a longer context on are not current yet: hidden
        let current = c.is_summarized(self.layer);
        HeadView {
            keys: s.keys.rows(),
            values: s.values.rows(),
            first: c.firsts[self.layer],
            len: c.lens[self.layer],
            span: c.spans[self.layer],
            dim: shape.head_dim,
            window: c.window,
            bulk: &s.bulk,
            factored: s.factored.as_ref(),
            pages: s.pages.as_ref().filter(|_| current),
            clusters: s.clusters.as_ref().filter(|_| current),
        }
    }
}
