//! [`KvSegments`]: one KV head's rows split into QAdA's index sets (sink, bulk, window).

use qada_stats::{ClusterMoments, KeyDistribution, PageBounds, Rows};

use crate::{CoreError, Result};

/// One KV head's keys and values split into the three index sets of QAdA, all borrowed (f32
/// or f16 rows, as the cache stores them).
#[derive(Clone, Copy, Debug)]
pub struct KvSegments<'a> {
    /// Row length `d`.
    pub dim: usize,
    /// First `T_sink` keys.
    pub sink_keys: Rows<'a>,
    /// Values of the sink.
    pub sink_values: Rows<'a>,
    /// Keys between sink and window.
    pub bulk_keys: Rows<'a>,
    /// Values of the bulk.
    pub bulk_values: Rows<'a>,
    /// The most recent `T_local - T_sink` keys.
    pub window_keys: Rows<'a>,
    /// Values of the window.
    pub window_values: Rows<'a>,
    /// Moments of the bulk keys (as the cache keeps them: full, or factored when fixed).
    pub bulk_moments: &'a dyn KeyDistribution,
    /// Page bounds of the bulk keys, when the cache keeps them.
    pub bulk_pages: Option<&'a PageBounds>,
    /// Cluster moments of the bulk keys, when the cache keeps them.
    pub bulk_clusters: Option<&'a ClusterMoments>,
}

impl KvSegments<'_> {
    /// `|I|`: sink plus window positions.
    pub fn local_len(&self) -> usize {
        (self.sink_keys.len() + self.window_keys.len()) / self.dim.max(1)
    }
    /// `T_bulk`.
    pub fn bulk_len(&self) -> usize {
        self.bulk_keys.len() / self.dim.max(1)
    }
    /// `T`.
    pub fn len(&self) -> usize {
        self.local_len() + self.bulk_len()
    }
    /// True when no position is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Check that every slice is a whole number of rows and keys match values (in length and
    /// element type; q8 rows need `d % 32 == 0`).
    pub fn validate(&self) -> Result<()> {
        let d = self.dim;
        let pairs = [
            ("sink", self.sink_keys, self.sink_values),
            ("bulk", self.bulk_keys, self.bulk_values),
            ("window", self.window_keys, self.window_values),
        ];
        for (what, k, v) in pairs {
            // q8 rows are whole blocks of 32: `d` must be a multiple of 32
            let q8_ragged = matches!(k, Rows::Q8(_)) && !d.is_multiple_of(qada_stats::Q8_BLOCK);
            if d == 0 || k.len() % d != 0 || k.len() != v.len() || !k.same_dtype(&v) || q8_ragged {
                return Err(CoreError::DimensionMismatch {
                    what: match what {
                        "sink" => "sink keys / values",
                        "bulk" => "bulk keys / values",
                        _ => "window keys / values",
                    },
                    expected: k.len(),
                    found: v.len(),
                });
            }
        }
        if self.bulk_moments.dim() != d {
            return Err(CoreError::DimensionMismatch {
                what: "bulk moments",
                expected: d,
                found: self.bulk_moments.dim(),
            });
        }
        Ok(())
    }
}
