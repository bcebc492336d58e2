//! Test fixtures: one head's keys and values, split as qada-kv would split them.
#![allow(dead_code)]

use ndarray::{concatenate, s, Array1, Array2, Axis};
use proptest::prelude::*;
use qada_core::{
    Decision, GroupRead, HeadInput, KvSegments, LocalityCriterion, PageSelection, Result,
};
use qada_stats::{KeyMoments, PageBounds};
use rand::{Rng, SeedableRng};

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

/// A criterion that reads fixed pages: page `p` for the group's heads in `masks[p]`.
pub struct FixedPages {
    pub page: usize,
    pub masks: Vec<u64>,
}

impl LocalityCriterion for FixedPages {
    fn decide(&self, _input: &HeadInput<'_>) -> Result<Decision> {
        Ok(Decision::LONG)
    }
    fn choose_pages(
        &self,
        inputs: &[HeadInput<'_>],
        _out: &mut [Decision],
        selection: &mut PageSelection,
    ) -> Result<GroupRead> {
        selection.clear(self.page);
        let n_pages = inputs[0].bulk_len.div_ceil(self.page);
        for (p, &m) in self.masks.iter().enumerate().take(n_pages) {
            selection.push(p, m)?;
        }
        Ok(GroupRead::Selected)
    }
}

/// Heads of `d` channels from rows holding each head's keys, then its values (as many).
pub fn heads_of(kvs: Vec<Vec<f32>>, d: usize, sink: usize, local: usize) -> Vec<Head> {
    kvs.into_iter()
        .map(|kv| {
            let (k, v) = kv.split_at(kv.len() / 2);
            Head::new(d, sink, local, k.to_vec(), v.to_vec())
        })
        .collect()
}

/// Keys and values of `n_kv` heads with `t` tokens, queries of `n_kv * group` heads.
pub fn layer() -> impl Strategy<Value = (Vec<Head>, Vec<f32>, usize, usize)> {
    layer_of(&[4, 8, 32], 600)
}

/// [`layer`] with `d` drawn from `dims` and `t` from `40..40 + max_extra`.
pub fn layer_of(
    dims: &'static [usize],
    max_extra: usize,
) -> impl Strategy<Value = (Vec<Head>, Vec<f32>, usize, usize)> {
    (
        prop::sample::select(dims),
        1usize..3,
        1usize..8,
        1usize..9,
        0usize..max_extra,
    )
        .prop_flat_map(|(d, n_kv, group, page, t_extra)| {
            let t = 40 + t_extra;
            (
                prop::collection::vec(
                    prop::collection::vec(-2.0f32..2.0, 2 * t * d..=2 * t * d),
                    n_kv..=n_kv,
                ),
                prop::collection::vec(-2.0f32..2.0, n_kv * group * d..=n_kv * group * d),
            )
                .prop_map(move |(kvs, q)| (heads_of(kvs, d, 4, 20), q, group, page))
        })
}

/// Page summaries of a head's bulk.
pub fn pages_of(h: &Head, page: usize) -> PageBounds {
    let seg = h.segments();
    let mut b = PageBounds::new(h.d, page).unwrap();
    b.push_rows_of(seg.bulk_keys).unwrap();
    b
}

/// A head mask per page from `seed` (xorshift; some pages for no head, some for all).
pub fn seeded_masks(seed: u64, n_pages: usize, group: usize) -> Vec<u64> {
    let mut x = seed | 1;
    (0..n_pages)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x & ((1u64 << group) - 1)
        })
        .collect()
}

/// A query and `t` keys of dimension `d`, uniform in [-2, 2), from `seed`.
pub fn random(seed: u64, t: usize, d: usize) -> (Array1<f32>, Array2<f32>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let q = Array1::from_shape_fn(d, |_| rng.gen_range(-2.0f32..2.0));
    let k = Array2::from_shape_fn((t, d), |_| rng.gen_range(-2.0f32..2.0));
    (q, k)
}

/// Sink rows `..sink`, window the last `window`, bulk between.
pub fn split(k: &Array2<f32>, sink: usize, window: usize) -> (Array2<f32>, Array2<f32>) {
    let t = k.nrows();
    let local = concatenate![
        Axis(0),
        k.slice(s![..sink, ..]),
        k.slice(s![t - window.., ..])
    ];
    (local, k.slice(s![sink..t - window, ..]).to_owned())
}
