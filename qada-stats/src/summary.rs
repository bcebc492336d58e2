//! What a criterion asks the cache to keep about the bulk keys besides their moments: page
//! bounds ([`crate::PageBounds`], optionally with a copy of the keys by channel) and cluster
//! moments ([`crate::ClusterMoments`]).

/// Summaries of the bulk a criterion reads; the default is none (the moments only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BulkSummaries {
    /// Page bounds with this many keys per page.
    pub page: Option<usize>,
    /// Cluster moments with at most this many clusters.
    pub clusters: Option<usize>,
    /// With the page bounds, a copy of the bulk keys by channel
    /// ([`crate::PageBounds::channel_keys`]).
    pub channel_keys: bool,
}

impl BulkSummaries {
    /// Both summaries any of `a` and `b` asks for (the smaller page, the more clusters).
    pub fn union(self, other: BulkSummaries) -> BulkSummaries {
        fn pick(a: Option<usize>, b: Option<usize>, f: fn(usize, usize) -> usize) -> Option<usize> {
            match (a, b) {
                (Some(x), Some(y)) => Some(f(x, y)),
                (x, None) => x,
                (None, y) => y,
            }
        }
        BulkSummaries {
            page: pick(self.page, other.page, usize::min),
            clusters: pick(self.clusters, other.clusters, usize::max),
            channel_keys: self.channel_keys || other.channel_keys,
        }
    }
}
