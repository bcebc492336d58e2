//! Storage of keys and values per layer and KV head, and the bulk moments kept beside them.

use std::sync::Arc;

use qada_stats::{KeyMoments, MomentTable};

use crate::{KvError, Result, Split, WindowConfig};

/// Sizes of a cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheShape {
    /// Transformer layers.
    pub n_layers: usize,
    /// KV heads per layer.
    pub n_kv_heads: usize,
    /// Length `d` of one key or value.
    pub head_dim: usize,
    /// Most tokens a layer may hold (the model's context length).
    pub capacity: usize,
}

/// Where the bulk moments `(mu_K, Sigma_K)` come from.
#[derive(Clone, Debug, Default)]
pub enum MomentsMode {
    /// Option 1, kept current: every key that leaves the window joins the bulk moments.
    #[default]
    Update,
    /// Option 1 as in the paper: moments of the prompt's bulk, frozen by
    /// [`KvCache::finish_prefill`].
    Frozen,
    /// Option 2: moments of the first `T - offset` keys of a calibration run, looked up in the
    /// table for the prompt length `T` at [`KvCache::finish_prefill`].
    Calibration {
        table: Arc<MomentTable>,
        offset: usize,
    },
}

#[derive(Clone, Debug)]
struct HeadStore {
    keys: Vec<f32>,
    values: Vec<f32>,
    /// Moments of the bulk (or of calibration keys).
    bulk: KeyMoments,
    /// Bulk positions `sink .. sink + folded` are in `bulk` (option 1 only).
    folded: usize,
}

/// A KV cache for all layers of a model.
#[derive(Clone, Debug)]
pub struct KvCache {
    shape: CacheShape,
    window: WindowConfig,
    mode: MomentsMode,
    /// Layer-major: `layer * n_kv_heads + kv_head`.
    heads: Vec<HeadStore>,
    lens: Vec<usize>,
    /// Set by `finish_prefill`: moments no longer follow the bulk.
    moments_fixed: bool,
}

/// One contiguous run of positions of one head: borrowed keys and values, row-major.
#[derive(Clone, Copy, Debug)]
pub struct Segment<'a> {
    /// Position of the first row.
    pub start: usize,
    /// `len x d` keys.
    pub keys: &'a [f32],
    /// `len x d` values.
    pub values: &'a [f32],
}

impl<'a> Segment<'a> {
    /// Number of positions, given the row length.
    pub fn len(&self, dim: usize) -> usize {
        self.keys.len().checked_div(dim).unwrap_or(0)
    }
    /// True when the segment holds no position.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// Borrowed view of one layer and KV head.
#[derive(Clone, Copy, Debug)]
pub struct HeadView<'a> {
    keys: &'a [f32],
    values: &'a [f32],
    dim: usize,
    window: WindowConfig,
    bulk: &'a KeyMoments,
}

impl<'a> HeadView<'a> {
    /// Row length `d`.
    pub fn dim(&self) -> usize {
        self.dim
    }
    /// Number of cached tokens `T`.
    pub fn len(&self) -> usize {
        self.keys.len() / self.dim
    }
    /// True when no token is cached.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
    /// All keys, `T x d`.
    pub fn keys(&self) -> &'a [f32] {
        self.keys
    }
    /// All values, `T x d`.
    pub fn values(&self) -> &'a [f32] {
        self.values
    }
    /// The sink, bulk and window ranges for the current length.
    pub fn split(&self) -> Split {
        self.window.split(self.len())
    }
    /// Window configuration of the cache.
    pub fn window_config(&self) -> WindowConfig {
        self.window
    }
    fn segment(&self, r: std::ops::Range<usize>) -> Segment<'a> {
        let d = self.dim;
        Segment {
            start: r.start,
            keys: &self.keys[r.start * d..r.end * d],
            values: &self.values[r.start * d..r.end * d],
        }
    }
    /// The first `T_sink` tokens.
    pub fn sink(&self) -> Segment<'a> {
        self.segment(self.split().sink)
    }
    /// The most recent `T_local - T_sink` tokens.
    pub fn window(&self) -> Segment<'a> {
        self.segment(self.split().window)
    }
    /// Everything between sink and window.
    pub fn bulk(&self) -> Segment<'a> {
        self.segment(self.split().bulk)
    }
    /// Moments of the bulk keys, as the cache's [`MomentsMode`] defines them. Empty (count 0)
    /// when there is nothing to estimate from yet.
    pub fn bulk_moments(&self) -> &'a KeyMoments {
        self.bulk
    }
}

impl KvCache {
    /// An empty cache.
    pub fn new(shape: CacheShape, window: WindowConfig, mode: MomentsMode) -> Result<Self> {
        if shape.head_dim == 0 {
            return Err(KvError::DimensionMismatch {
                what: "head dimension",
                expected: 1,
                found: 0,
            });
        }
        if let MomentsMode::Calibration { table, .. } = &mode {
            let sig = table.signature();
            if sig.n_layers as usize != shape.n_layers
                || sig.n_kv_heads as usize != shape.n_kv_heads
                || sig.head_dim as usize != shape.head_dim
            {
                return Err(KvError::Stats(qada_stats::StatsError::ModelMismatch {
                    field: "layers x KV heads x head dimension",
                    found: format!("{} x {} x {}", sig.n_layers, sig.n_kv_heads, sig.head_dim),
                    expected: format!(
                        "{} x {} x {}",
                        shape.n_layers, shape.n_kv_heads, shape.head_dim
                    ),
                }));
            }
        }
        let head = HeadStore {
            keys: Vec::new(),
            values: Vec::new(),
            bulk: KeyMoments::new(shape.head_dim),
            folded: 0,
        };
        Ok(KvCache {
            shape,
            window,
            mode,
            heads: vec![head; shape.n_layers * shape.n_kv_heads],
            lens: vec![0; shape.n_layers],
            moments_fixed: false,
        })
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
    /// Tokens cached in `layer`.
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

    /// Forget every token and moment; keep the allocations.
    pub fn clear(&mut self) {
        for h in &mut self.heads {
            h.keys.clear();
            h.values.clear();
            h.bulk = KeyMoments::new(self.shape.head_dim);
            h.folded = 0;
        }
        self.lens.iter_mut().for_each(|l| *l = 0);
        self.moments_fixed = false;
    }

    /// Append tokens to one layer. `keys` and `values` are token-major: each token contributes
    /// `n_kv_heads * head_dim` values, head after head. Bulk moments follow in update mode (and
    /// in frozen mode until [`KvCache::finish_prefill`]).
    pub fn append(&mut self, layer: usize, keys: &[f32], values: &[f32]) -> Result<()> {
        let CacheShape {
            n_layers,
            n_kv_heads,
            head_dim: d,
            capacity,
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
        let heads = &mut self.heads[layer * n_kv_heads..(layer + 1) * n_kv_heads];
        for (h, store) in heads.iter_mut().enumerate() {
            store.keys.reserve(n * d);
            store.values.reserve(n * d);
            for t in 0..n {
                let at = t * row + h * d;
                store.keys.extend_from_slice(&keys[at..at + d]);
                store.values.extend_from_slice(&values[at..at + d]);
            }
        }
        self.lens[layer] = len + n;
        if !self.moments_fixed && !matches!(self.mode, MomentsMode::Calibration { .. }) {
            let bulk = self.window.split(len + n).bulk;
            for store in heads.iter_mut() {
                let from = bulk.start + store.folded;
                if bulk.end > from {
                    store.bulk.push_rows(&store.keys[from * d..bulk.end * d])?;
                    store.folded = bulk.end - bulk.start;
                }
            }
        }
        Ok(())
    }

    /// Mark the end of the prompt. Frozen mode stops updating the bulk moments; calibration
    /// mode looks up the checkpoint for the prompt length. Update mode is unaffected.
    pub fn finish_prefill(&mut self) -> Result<()> {
        match &self.mode {
            MomentsMode::Update => {}
            MomentsMode::Frozen => self.moments_fixed = true,
            MomentsMode::Calibration { table, offset } => {
                let checkpoint = table.lookup(self.seq_len(), *offset)?;
                let nh = self.shape.n_kv_heads;
                for (i, store) in self.heads.iter_mut().enumerate() {
                    let m = checkpoint
                        .moments(i / nh, i % nh)
                        .expect("table shape checked at construction");
                    store.bulk.clone_from(m);
                }
                self.moments_fixed = true;
            }
        }
        Ok(())
    }

    /// Borrow one layer and KV head.
    pub fn head(&self, layer: usize, kv_head: usize) -> Result<HeadView<'_>> {
        if layer >= self.shape.n_layers {
            return Err(KvError::OutOfRange {
                what: "layer",
                index: layer,
                count: self.shape.n_layers,
            });
        }
        if kv_head >= self.shape.n_kv_heads {
            return Err(KvError::OutOfRange {
                what: "KV head",
                index: kv_head,
                count: self.shape.n_kv_heads,
            });
        }
        let s = &self.heads[layer * self.shape.n_kv_heads + kv_head];
        Ok(HeadView {
            keys: &s.keys,
            values: &s.values,
            dim: self.shape.head_dim,
            window: self.window,
            bulk: &s.bulk,
        })
    }
}
