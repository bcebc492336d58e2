//! Test fixtures: one head's keys and values, split as qada-kv would split them.
#![allow(dead_code)]

use qada_core::KvSegments;
use qada_stats::KeyMoments;

#[derive(Debug, Clone)]
pub struct Head {
    pub d: usize,
    pub sink: usize,
    pub local: usize,
    pub keys: Vec<f32>,
    pub values: Vec<f32>,
    pub moments: KeyMoments,
}

impl Head {
    pub fn new(d: usize, sink: usize, local: usize, keys: Vec<f32>, values: Vec<f32>) -> Self {
        let t = keys.len() / d;
        let (b0, b1) = Self::bulk_range(t, sink, local);
        let moments = KeyMoments::from_rows(d, &keys[b0 * d..b1 * d]).unwrap();
        Head {
            d,
            sink,
            local,
            keys,
            values,
            moments,
        }
    }

    fn bulk_range(t: usize, sink: usize, local: usize) -> (usize, usize) {
        if t <= local {
            let s = t.min(sink);
            (s, s)
        } else {
            (sink, t - (local - sink))
        }
    }

    pub fn t(&self) -> usize {
        self.keys.len() / self.d
    }

    pub fn segments(&self) -> KvSegments<'_> {
        let d = self.d;
        let (b0, b1) = Self::bulk_range(self.t(), self.sink, self.local);
        KvSegments {
            dim: d,
            sink_keys: (&self.keys[..b0 * d]).into(),
            sink_values: (&self.values[..b0 * d]).into(),
            bulk_keys: (&self.keys[b0 * d..b1 * d]).into(),
            bulk_values: (&self.values[b0 * d..b1 * d]).into(),
            window_keys: (&self.keys[b1 * d..]).into(),
            window_values: (&self.values[b1 * d..]).into(),
            bulk_moments: &self.moments,
            bulk_pages: None,
            bulk_clusters: None,
        }
    }

    /// Is position `i` in the local set I?
    pub fn is_local_pos(&self, i: usize) -> bool {
        let (b0, b1) = Self::bulk_range(self.t(), self.sink, self.local);
        i < b0 || i >= b1
    }
}

/// Scores in f64, straight from the definition.
pub fn scores_f64(q: &[f32], keys: &[f32], scale: f32) -> Vec<f64> {
    keys.chunks_exact(q.len())
        .map(|k| {
            scale as f64
                * q.iter()
                    .zip(k)
                    .map(|(&a, &b)| a as f64 * b as f64)
                    .sum::<f64>()
        })
        .collect()
}

/// A head whose keys are `+-q` (sign flipping every third row), so that with scale 1 every
/// score is exactly `+-|q|^2` (1e4 for the query returned).
pub fn extreme_head(values: Option<Vec<f32>>) -> ([f32; 4], Head) {
    let d = 4;
    let q = [50.0f32, -50.0, 50.0, -50.0];
    let keys: Vec<f32> = (0..300 * d)
        .map(|i| {
            if (i / d) % 3 == 0 {
                q[i % d]
            } else {
                -q[i % d]
            }
        })
        .collect();
    let values = values.unwrap_or_else(|| keys.clone());
    (q, Head::new(d, 4, 32, keys, values))
}
