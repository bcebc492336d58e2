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
    /// Kept from a context of this many keys on (0: from the first key): a layer holding
    /// fewer shows none, and is current again when it reaches this length. A criterion that
    /// reads no summary on shorter contexts asks for its threshold here, so that a short
    /// context pays nothing for summaries it never reads (a cache may build them somewhat
    /// ahead, to spread the catch-up over the steps before the threshold).
    pub from_context: usize,
}

impl BulkSummaries {
    /// True when a page bound or cluster summary is asked for.
    pub fn asks(&self) -> bool {
        self.page.is_some() || self.clusters.is_some()
    }

    /// Both summaries any of `a` and `b` asks for (the smaller page, the more clusters),
    /// from the shorter context either asks them from.
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
            from_context: match (self.asks(), other.asks()) {
                (true, true) => self.from_context.min(other.from_context),
                (true, false) => self.from_context,
                (false, true) => other.from_context,
                (false, false) => 0,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_union_asks_for_both_from_the_shorter_context() {
        let pages = BulkSummaries {
            page: Some(32),
            channel_keys: true,
            from_context: 5000,
            ..BulkSummaries::default()
        };
        let clusters = BulkSummaries {
            clusters: Some(4),
            from_context: 2000,
            ..BulkSummaries::default()
        };
        let both = pages.union(clusters);
        assert_eq!(both.page, Some(32));
        assert_eq!(both.clusters, Some(4));
        assert!(both.channel_keys);
        assert_eq!(both.from_context, 2000);
        // a side that asks nothing does not move the threshold
        let none = BulkSummaries {
            from_context: 7,
            ..BulkSummaries::default()
        };
        assert_eq!(pages.union(none).from_context, 5000);
        assert_eq!(none.union(pages), pages.union(none));
        assert!(!none.asks() && both.asks());
        assert_eq!(none.union(none).from_context, 0);
    }
}
