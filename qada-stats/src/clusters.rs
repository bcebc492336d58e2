//! Bulk keys in `k` clusters, each with its own moments: the mixture behind the `mixture`
//! criterion, `A_bulk_hat = sum_c n_c exp(mu_c + sigma_c^2 / 2)`.
//!
//! [`ClusterMoments::fit`] runs k-means (Lloyd's iterations, `O(n k d)` each) on the keys
//! present, from centroids at evenly spaced rows (deterministic: the same keys give the same
//! clusters), and keeps the moments of each cluster's keys. Afterwards
//! [`ClusterMoments::push`] sends each new key to its nearest cluster mean (squared Euclidean
//! distance) and folds it into that cluster's moments (Welford): the means move, nothing is
//! re-fitted. With `k = 1` the one cluster's moments are those of every key.

use crate::{KeyMoments, Result, Rows, StatsError};

/// Lloyd's iterations of [`ClusterMoments::fit`].
pub const KMEANS_ITERATIONS: usize = 8;

/// Moments of the keys in each of at most `k` clusters.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterMoments {
    dim: usize,
    k: usize,
    clusters: Vec<KeyMoments>,
}

impl ClusterMoments {
    /// No key yet; keys of length `dim`, at most `k >= 1` clusters.
    pub fn new(dim: usize, k: usize) -> Result<Self> {
        if dim == 0 || k == 0 {
            return Err(StatsError::ShapeMismatch {
                what: "cluster moments (key length and cluster count, both at least 1)",
                expected: 1,
                found: 0,
            });
        }
        Ok(ClusterMoments {
            dim,
            k,
            clusters: Vec::new(),
        })
    }
    /// Key length `d`.
    pub fn dim(&self) -> usize {
        self.dim
    }
    /// Clusters asked for.
    pub fn k(&self) -> usize {
        self.k
    }
    /// The non-empty clusters' moments (fewer than `k` when there were fewer distinct keys).
    pub fn clusters(&self) -> &[KeyMoments] {
        &self.clusters
    }
    /// Keys in every cluster.
    pub fn count(&self) -> u64 {
        self.clusters.iter().map(KeyMoments::count).sum()
    }
    /// True when no key was added.
    pub fn is_empty(&self) -> bool {
        self.count() == 0
    }
    /// Forget every key (the next push starts one cluster; [`ClusterMoments::fit`] makes `k`).
    pub fn clear(&mut self) {
        self.clusters.clear();
    }

    /// Replace the clusters by k-means clusters of `keys` (`n x d`, f32, f16 or q8 rows).
    pub fn fit(&mut self, keys: Rows<'_>) -> Result<()> {
        let d = self.dim;
        if !keys.len().is_multiple_of(d)
            || (matches!(keys, Rows::Q8(_)) && !d.is_multiple_of(crate::Q8_BLOCK))
        {
            return Err(StatsError::DimensionMismatch {
                expected: d,
                found: keys.len() % d,
            });
        }
        let n = keys.n_rows(d);
        let mut x = vec![0.0f32; n * d];
        for (i, row) in x.chunks_exact_mut(d).enumerate() {
            keys.row_f32(i, row);
        }
        self.clusters.clear();
        if n == 0 {
            return Ok(());
        }
        let k = self.k.min(n);
        // centroids at evenly spaced rows: keys drift with position, so these spread out
        let mut centroids: Vec<f64> = (0..k)
            .flat_map(|c| {
                x[(c * n / k + n / (2 * k)) * d..][..d]
                    .iter()
                    .map(|&v| v as f64)
            })
            .collect();
        let mut assign = vec![0usize; n];
        for _ in 0..KMEANS_ITERATIONS {
            let mut moved = false;
            for (a, row) in assign.iter_mut().zip(x.chunks_exact(d)) {
                let c = nearest(&centroids, d, row);
                moved |= c != *a;
                *a = c;
            }
            let mut sums = vec![0.0f64; k * d];
            let mut counts = vec![0usize; k];
            for (&a, row) in assign.iter().zip(x.chunks_exact(d)) {
                counts[a] += 1;
                for (s, &v) in sums[a * d..(a + 1) * d].iter_mut().zip(row) {
                    *s += v as f64;
                }
            }
            for c in 0..k {
                // an empty cluster keeps its centroid (it stays empty and is dropped below)
                if counts[c] > 0 {
                    for j in 0..d {
                        centroids[c * d + j] = sums[c * d + j] / counts[c] as f64;
                    }
                }
            }
            if !moved {
                break;
            }
        }
        let mut clusters = vec![KeyMoments::new(d); k];
        for (&a, row) in assign.iter().zip(x.chunks_exact(d)) {
            clusters[a].push(row)?;
        }
        clusters.retain(|c| !c.is_empty());
        self.clusters = clusters;
        Ok(())
    }

    /// Fold one key into the cluster whose mean is nearest (a first cluster if none).
    pub fn push(&mut self, key: &[f32]) -> Result<()> {
        if key.len() != self.dim {
            return Err(StatsError::DimensionMismatch {
                expected: self.dim,
                found: key.len(),
            });
        }
        if self.clusters.is_empty() {
            self.clusters.push(KeyMoments::new(self.dim));
        }
        let mut best = (0, f64::INFINITY);
        for (c, m) in self.clusters.iter().enumerate() {
            let dist = squared_distance(m.mean(), key);
            if dist < best.1 {
                best = (c, dist);
            }
        }
        self.clusters[best.0].push(key)
    }

    /// Fold every row of `keys` (f32, f16 or q8 rows), one at a time, in order.
    pub fn push_rows_of(&mut self, keys: Rows<'_>) -> Result<()> {
        let d = self.dim;
        if !keys.len().is_multiple_of(d)
            || (matches!(keys, Rows::Q8(_)) && !d.is_multiple_of(crate::Q8_BLOCK))
        {
            return Err(StatsError::DimensionMismatch {
                expected: d,
                found: keys.len() % d,
            });
        }
        let mut row = vec![0.0f32; d];
        for i in 0..keys.n_rows(d) {
            keys.row_f32(i, &mut row);
            self.push(&row)?;
        }
        Ok(())
    }
}

/// `|m - x|^2` in f64.
fn squared_distance(m: &[f64], x: &[f32]) -> f64 {
    m.iter()
        .zip(x)
        .map(|(&a, &b)| {
            let t = a - b as f64;
            t * t
        })
        .sum()
}

/// Index of the centroid (rows of `d` in `centroids`) nearest to `x`; ties to the first.
fn nearest(centroids: &[f64], d: usize, x: &[f32]) -> usize {
    let mut best = (0, f64::INFINITY);
    for (c, m) in centroids.chunks_exact(d).enumerate() {
        let dist = squared_distance(m, x);
        if dist < best.1 {
            best = (c, dist);
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_blobs_make_two_clusters_and_new_keys_join_the_nearest() {
        let mut keys = Vec::new();
        for i in 0..10 {
            keys.extend_from_slice(&[i as f32 * 0.01, 0.0]);
        }
        for i in 0..6 {
            keys.extend_from_slice(&[10.0 + i as f32 * 0.01, 5.0]);
        }
        let mut c = ClusterMoments::new(2, 2).unwrap();
        c.fit(Rows::F32(&keys)).unwrap();
        let mut counts: Vec<u64> = c.clusters().iter().map(KeyMoments::count).collect();
        counts.sort();
        assert_eq!(counts, vec![6, 10]);
        c.push(&[9.0, 5.0]).unwrap();
        let far = c.clusters().iter().find(|m| m.mean()[1] > 1.0).unwrap();
        assert_eq!(far.count(), 7);
    }

    #[test]
    fn one_cluster_holds_the_moments_of_every_key() {
        let keys: Vec<f32> = (0..40).map(|i| ((i * 7919) % 13) as f32 - 6.0).collect();
        let mut c = ClusterMoments::new(4, 1).unwrap();
        c.fit(Rows::F32(&keys[..20])).unwrap();
        c.push_rows_of(Rows::F32(&keys[20..])).unwrap();
        let all = KeyMoments::from_rows(4, &keys).unwrap();
        assert_eq!(c.clusters().len(), 1);
        assert_eq!(c.clusters()[0].count(), all.count());
        for (a, b) in c.clusters()[0].mean().iter().zip(all.mean()) {
            assert!((a - b).abs() < 1e-12);
        }
    }

    #[test]
    fn fewer_keys_than_clusters_and_bad_shapes() {
        let mut c = ClusterMoments::new(2, 8).unwrap();
        c.fit(Rows::F32(&[1.0, 2.0, 3.0, 4.0])).unwrap();
        assert_eq!((c.clusters().len(), c.count()), (2, 2));
        assert!(c.fit(Rows::F32(&[1.0, 2.0, 3.0])).is_err());
        assert!(c.push(&[1.0]).is_err());
        assert!(ClusterMoments::new(2, 0).is_err());
    }
}
