//! Storage of keys and values per layer and KV head, and the bulk moments kept beside them.

use std::sync::Arc;

use qada_stats::{f16, FactoredMoments, KeyDistribution, KeyMoments, MomentTable, Rows};

/// Share of the covariance trace a factored form may leave out (see [`FactoredMoments`]).
pub const FACTOR_TOLERANCE: f64 = 1e-3;

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
    /// Element type of stored keys and values.
    pub dtype: KvDtype,
}

/// Element type of the cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvDtype {
    /// 4 bytes per element: exact.
    #[default]
    F32,
    /// 2 bytes per element: half the memory traffic, keys rounded to 11 significant bits.
    F16,
}

/// Keys or values of one head, in the cache's element type.
#[derive(Clone, Debug)]
enum Store {
    F32(Vec<f32>),
    F16(Vec<f16>),
}

impl Store {
    fn new(dtype: KvDtype) -> Self {
        match dtype {
            KvDtype::F32 => Store::F32(Vec::new()),
            KvDtype::F16 => Store::F16(Vec::new()),
        }
    }
    fn rows(&self) -> Rows<'_> {
        match self {
            Store::F32(v) => Rows::F32(v),
            Store::F16(v) => Rows::F16(v),
        }
    }
    fn extend(&mut self, x: &[f32]) {
        match self {
            Store::F32(v) => v.extend_from_slice(x),
            Store::F16(v) => v.extend(x.iter().map(|&a| f16::from_f32(a))),
        }
    }
    fn reserve(&mut self, n: usize) {
        match self {
            Store::F32(v) => v.reserve(n),
            Store::F16(v) => v.reserve(n),
        }
    }
    fn truncate(&mut self, n: usize) {
        match self {
            Store::F32(v) => v.truncate(n),
            Store::F16(v) => v.truncate(n),
        }
    }
    fn clear(&mut self) {
        self.truncate(0);
    }
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
    keys: Store,
    values: Store,
    /// Moments of the bulk (or of calibration keys).
    bulk: KeyMoments,
    /// Bulk positions `sink .. sink + folded` are in `bulk` (option 1 only).
    folded: usize,
    /// `bulk` factored, while the moments are fixed.
    factored: Option<FactoredMoments>,
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
    /// Set by `finish_prefill`.
    prefill_done: bool,
}

/// A cache state to return to: lengths and bulk moments (see [`KvCache::checkpoint`]).
#[derive(Clone, Debug)]
pub struct CacheCheckpoint {
    lens: Vec<usize>,
    moments: Vec<(KeyMoments, usize, Option<FactoredMoments>)>,
    mode: MomentsMode,
    moments_fixed: bool,
    prefill_done: bool,
}

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
#[derive(Clone, Copy, Debug)]
pub struct HeadView<'a> {
    keys: Rows<'a>,
    values: Rows<'a>,
    dim: usize,
    window: WindowConfig,
    bulk: &'a KeyMoments,
    factored: Option<&'a FactoredMoments>,
}

impl<'a> HeadView<'a> {
    /// Row length `d`.
    pub fn dim(&self) -> usize {
        self.dim
    }
    /// Number of cached tokens `T`.
    pub fn len(&self) -> usize {
        self.keys.n_rows(self.dim)
    }
    /// True when no token is cached.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
    /// All keys, `T x d`.
    pub fn keys(&self) -> Rows<'a> {
        self.keys
    }
    /// All values, `T x d`.
    pub fn values(&self) -> Rows<'a> {
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
            keys: self.keys.slice(r.start, r.end, d),
            values: self.values.slice(r.start, r.end, d),
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
    /// The bulk key distribution the criterion should use: the factored form of the moments
    /// while they are fixed (frozen or calibration), the full moments otherwise.
    pub fn bulk_distribution(&self) -> &'a dyn KeyDistribution {
        match self.factored {
            Some(f) => f,
            None => self.bulk,
        }
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
        let head = HeadStore {
            keys: Store::new(shape.dtype),
            values: Store::new(shape.dtype),
            bulk: KeyMoments::new(shape.head_dim),
            folded: 0,
            factored: None,
        };
        let cache = KvCache {
            shape,
            window,
            mode,
            heads: vec![head; shape.n_layers * shape.n_kv_heads],
            lens: vec![0; shape.n_layers],
            moments_fixed: false,
            prefill_done: false,
        };
        if let MomentsMode::Calibration { table, .. } = &cache.mode {
            cache.check_table(table)?;
        }
        Ok(cache)
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
            h.factored = None;
        }
        self.lens.iter_mut().for_each(|l| *l = 0);
        self.moments_fixed = false;
        self.prefill_done = false;
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
        let heads = &mut self.heads[layer * n_kv_heads..(layer + 1) * n_kv_heads];
        for (h, store) in heads.iter_mut().enumerate() {
            store.keys.reserve(n * d);
            store.values.reserve(n * d);
            for t in 0..n {
                let at = t * row + h * d;
                store.keys.extend(&keys[at..at + d]);
                store.values.extend(&values[at..at + d]);
            }
        }
        self.lens[layer] = len + n;
        if self.follows_bulk() {
            self.fold_layer(layer)?;
        }
        Ok(())
    }

    /// True when the moments track the cache's own bulk keys as they arrive.
    fn follows_bulk(&self) -> bool {
        !self.moments_fixed && !matches!(self.mode, MomentsMode::Calibration { .. })
    }

    /// Fold the keys of `layer` that left the window since the last fold into its moments.
    fn fold_layer(&mut self, layer: usize) -> Result<()> {
        let (nh, d) = (self.shape.n_kv_heads, self.shape.head_dim);
        let bulk = self.window.split(self.lens[layer]).bulk;
        for store in &mut self.heads[layer * nh..(layer + 1) * nh] {
            let from = bulk.start + store.folded;
            if bulk.end > from {
                store
                    .bulk
                    .push_rows_of(store.keys.rows().slice(from, bulk.end, d))?;
                store.folded = bulk.end - bulk.start;
            }
        }
        Ok(())
    }

    /// Replace every head's moments by those of its current bulk keys (two passes).
    fn recompute_own_moments(&mut self) -> Result<()> {
        let d = self.shape.head_dim;
        for h in &mut self.heads {
            h.bulk = KeyMoments::new(d);
            h.folded = 0;
        }
        for layer in 0..self.shape.n_layers {
            self.fold_layer(layer)?;
        }
        Ok(())
    }

    fn apply_calibration(&mut self) -> Result<()> {
        if let MomentsMode::Calibration { table, offset } = &self.mode {
            let checkpoint = table.lookup(self.seq_len(), *offset)?;
            let nh = self.shape.n_kv_heads;
            for (i, store) in self.heads.iter_mut().enumerate() {
                let m = checkpoint
                    .moments(i / nh, i % nh)
                    .expect("table shape checked at construction");
                store.bulk.clone_from(m);
                store.folded = 0;
            }
            self.moments_fixed = true;
        }
        Ok(())
    }

    /// Factor every head's moments (they are fixed from now on), or drop the factors.
    fn refactor(&mut self) -> Result<()> {
        let fixed = self.moments_fixed;
        for h in &mut self.heads {
            h.factored = if fixed && !h.bulk.is_empty() {
                Some(FactoredMoments::new(&h.bulk, FACTOR_TOLERANCE)?)
            } else {
                None
            };
        }
        Ok(())
    }

    /// Change where the bulk moments come from, from now on. Update resumes folding keys that
    /// leave the window; frozen stops (after prefill); calibration looks up the table for the
    /// current length (after prefill). Leaving calibration recomputes the moments of the
    /// cache's own bulk keys.
    pub fn set_moments_mode(&mut self, mode: MomentsMode) -> Result<()> {
        if let MomentsMode::Calibration { table, .. } = &mode {
            self.check_table(table)?;
        }
        let had_own = !matches!(self.mode, MomentsMode::Calibration { .. });
        self.mode = mode;
        self.moments_fixed = false;
        match self.mode {
            MomentsMode::Calibration { .. } => {
                if self.prefill_done {
                    self.apply_calibration()?;
                }
            }
            MomentsMode::Update | MomentsMode::Frozen => {
                if had_own {
                    for layer in 0..self.shape.n_layers {
                        self.fold_layer(layer)?;
                    }
                } else {
                    self.recompute_own_moments()?;
                }
                self.moments_fixed = self.prefill_done && matches!(self.mode, MomentsMode::Frozen);
            }
        }
        self.refactor()
    }

    /// Remember the current lengths and moments.
    pub fn checkpoint(&self) -> CacheCheckpoint {
        CacheCheckpoint {
            lens: self.lens.clone(),
            moments: self
                .heads
                .iter()
                .map(|h| (h.bulk.clone(), h.folded, h.factored.clone()))
                .collect(),
            mode: self.mode.clone(),
            moments_fixed: self.moments_fixed,
            prefill_done: self.prefill_done,
        }
    }

    /// Return to a checkpoint taken earlier in the same sequence: tokens appended since are
    /// dropped and the moments, mode and prefill state are restored.
    pub fn restore(&mut self, cp: &CacheCheckpoint) -> Result<()> {
        if cp.lens.len() != self.lens.len() || cp.moments.len() != self.heads.len() {
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
        for (i, (store, (m, folded, factored))) in
            self.heads.iter_mut().zip(&cp.moments).enumerate()
        {
            let len = cp.lens[i / nh];
            store.keys.truncate(len * d);
            store.values.truncate(len * d);
            store.bulk.clone_from(m);
            store.folded = *folded;
            store.factored.clone_from(factored);
        }
        self.lens.clone_from(&cp.lens);
        self.mode = cp.mode.clone();
        self.moments_fixed = cp.moments_fixed;
        self.prefill_done = cp.prefill_done;
        Ok(())
    }

    fn check_table(&self, table: &MomentTable) -> Result<()> {
        let sig = table.signature();
        let shape = self.shape;
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
        Ok(())
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
        Ok(LayerView { cache: self, layer })
    }
}

/// One layer of a [`KvCache`] (see [`KvCache::layer`]).
#[derive(Clone, Copy, Debug)]
pub struct LayerView<'a> {
    cache: &'a KvCache,
    layer: usize,
}

impl<'a> LayerView<'a> {
    /// KV heads in the layer.
    pub fn n_kv_heads(&self) -> usize {
        self.cache.shape.n_kv_heads
    }

    /// KV head `kv_head`; panics when `kv_head >= n_kv_heads()`, as slice indexing does.
    pub fn head(&self, kv_head: usize) -> HeadView<'a> {
        let c = self.cache;
        assert!(
            kv_head < c.shape.n_kv_heads,
            "KV head {kv_head} of {}",
            c.shape.n_kv_heads
        );
        let s = &c.heads[self.layer * c.shape.n_kv_heads + kv_head];
        HeadView {
            keys: s.keys.rows(),
            values: s.values.rows(),
            dim: c.shape.head_dim,
            window: c.window,
            bulk: &s.bulk,
            factored: s.factored.as_ref(),
        }
    }
}
