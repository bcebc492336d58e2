//! Running the model: dense prefill in blocks, then one adaptive decoding step per token.

use qada_core::{
    attend_layer, Accounting, Decision, Dense, KvSegments, LayerKv, LayerScratch, LocalityCriterion,
};
use qada_kv::{
    CacheCheckpoint, CacheShape, HeadView, KvCache, KvDtype, LayerView, MomentsMode, WindowConfig,
};

use std::ops::{ControlFlow, Deref};
use std::sync::Arc;

use crate::block::{self, Attend, Buffers};
use crate::model::Model;
use crate::ops::rms_norm;
use crate::qlinear::ActPrecision;
use crate::{ModelError, Result};

/// Tokens per prefill block: large enough for gemm to run at full speed and to amortize
/// dequantizing weight tiles once per block; attention runs over key tiles with a running
/// softmax, so its memory does not grow with the context.
pub const PREFILL_BLOCK: usize = 512;

/// How a session decodes.
pub struct SessionOptions {
    /// The criterion that labels heads local or long-context at every decoding step.
    pub criterion: Box<dyn LocalityCriterion>,
    /// Sink and window sizes.
    pub window: WindowConfig,
    /// Where bulk moments come from.
    pub moments: MomentsMode,
    /// Cache capacity; the model's context length when `None`.
    pub capacity: Option<usize>,
    /// Element type of cached keys and values.
    pub kv_dtype: KvDtype,
}

impl SessionOptions {
    /// A criterion and window; moments of the current prompt kept up to date, the model's
    /// context length as capacity, an f32 cache.
    pub fn new(criterion: Box<dyn LocalityCriterion>, window: WindowConfig) -> Self {
        SessionOptions {
            criterion,
            window,
            moments: MomentsMode::Update,
            capacity: None,
            kv_dtype: KvDtype::F32,
        }
    }
}

/// Observes every decision of every decoding step (analysis uses it).
pub trait StepObserver {
    /// Called per layer after attention, with the layer's queries and KV segments.
    fn observe_layer(
        &mut self,
        layer: usize,
        queries: &[f32],
        kv: &[KvSegments<'_>],
        scale: f32,
        decisions: &[Decision],
    ) -> Result<()>;
}

/// A session state to return to (see [`Session::checkpoint`]).
#[derive(Clone, Debug)]
pub struct SessionCheckpoint {
    cache: CacheCheckpoint,
    logits: Vec<f32>,
    prefilled: bool,
}

/// The model a session reads: borrowed (`Session<'m>` lives within the model's scope), or
/// shared through an `Arc` (a `Session<'static>` that owns its share: one kept across threads,
/// requests or a Python object's life). `Session::new` takes either.
#[derive(Clone)]
pub enum ModelHandle<'m> {
    /// A model the caller keeps alive for the session's lifetime `'m`.
    Borrowed(&'m Model),
    /// A share of a model, kept alive by the session itself.
    Shared(Arc<Model>),
}

impl Deref for ModelHandle<'_> {
    type Target = Model;
    fn deref(&self) -> &Model {
        match self {
            ModelHandle::Borrowed(m) => m,
            ModelHandle::Shared(m) => m,
        }
    }
}

impl<'m> From<&'m Model> for ModelHandle<'m> {
    fn from(m: &'m Model) -> Self {
        ModelHandle::Borrowed(m)
    }
}

impl From<Arc<Model>> for ModelHandle<'_> {
    fn from(m: Arc<Model>) -> Self {
        ModelHandle::Shared(m)
    }
}

/// One sequence being decoded: the cache, scratch buffers and what the criterion saved.
pub struct Session<'m> {
    model: ModelHandle<'m>,
    cache: KvCache,
    criterion: Box<dyn LocalityCriterion>,
    accounting: Accounting,
    prefilled: bool,
    /// Buffers of the one row a decoding step runs.
    rows: Buffers,
    logits: Vec<f32>,
    layer_scratch: LayerScratch,
}

/// Borrow a KV head's three segments as qada-core reads them.
pub fn segments<'a>(v: &HeadView<'a>) -> KvSegments<'a> {
    let (s, b, w) = (v.sink(), v.bulk(), v.window());
    KvSegments {
        dim: v.dim(),
        sink_keys: s.keys,
        sink_values: s.values,
        bulk_keys: b.keys,
        bulk_values: b.values,
        window_keys: w.keys,
        window_values: w.values,
        bulk_moments: v.bulk_distribution(),
        bulk_pages: v.bulk_pages(),
        bulk_clusters: v.bulk_clusters(),
    }
}

/// A cache layer as attention reads it: segments borrowed head by head, no list per step.
struct CacheLayer<'a>(LayerView<'a>);

impl LayerKv for CacheLayer<'_> {
    fn n_kv_heads(&self) -> usize {
        self.0.n_kv_heads()
    }
    fn segments(&self, g: usize) -> KvSegments<'_> {
        segments(&self.0.head(g))
    }
}

impl<'m> Session<'m> {
    /// A new, empty sequence of `model`: a `&Model`, or an `Arc<Model>` for a session that
    /// holds its own share of the model.
    pub fn new(model: impl Into<ModelHandle<'m>>, opts: SessionOptions) -> Result<Self> {
        let model = model.into();
        let c = &model.config;
        let capacity = opts.capacity.unwrap_or(c.context_length);
        let shape = CacheShape {
            n_layers: c.n_layers,
            n_kv_heads: c.n_kv_heads,
            head_dim: c.head_dim,
            capacity,
            dtype: opts.kv_dtype,
        };
        if let MomentsMode::Calibration { table, .. } = &opts.moments {
            table.signature().check_matches(&model.signature())?;
        }
        let mut cache = KvCache::with_spans(shape, opts.window, opts.moments, c.spans())?;
        cache.set_bulk_summaries(opts.criterion.bulk_summaries())?;
        let rows = Buffers::new(&model, 1, capacity);
        let accounting = Accounting::new(c.n_layers, c.n_heads);
        let logits = vec![0.0; c.vocab_size];
        let layer_scratch = LayerScratch::with_capacity(
            c.n_kv_heads,
            c.n_heads / c.n_kv_heads.max(1),
            c.head_dim,
            capacity,
        );
        Ok(Session {
            model,
            cache,
            criterion: opts.criterion,
            accounting,
            prefilled: false,
            rows,
            logits,
            layer_scratch,
        })
    }

    /// Tokens in the sequence so far.
    pub fn len(&self) -> usize {
        self.cache.seq_len()
    }

    /// True before any token.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tokens the cache can hold.
    pub fn capacity(&self) -> usize {
        self.cache.shape().capacity
    }

    /// What the criterion decided and saved so far.
    pub fn accounting(&self) -> &Accounting {
        &self.accounting
    }

    /// The KV cache.
    pub fn cache(&self) -> &KvCache {
        &self.cache
    }

    /// The criterion in use.
    pub fn criterion(&self) -> &dyn LocalityCriterion {
        self.criterion.as_ref()
    }

    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The session's handle on its model, to read the model while the session changes.
    pub fn model_handle(&self) -> ModelHandle<'m> {
        self.model.clone()
    }

    /// The logits after the last token run.
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// Remember this state (typically right after prefill) to decode from it again.
    pub fn checkpoint(&self) -> SessionCheckpoint {
        SessionCheckpoint {
            cache: self.cache.checkpoint(),
            logits: self.logits.clone(),
            prefilled: self.prefilled,
        }
    }

    /// Return to a checkpoint of this sequence; the accounting starts afresh.
    pub fn restore(&mut self, cp: &SessionCheckpoint) -> Result<()> {
        self.cache.restore(&cp.cache)?;
        self.logits.clone_from(&cp.logits);
        self.prefilled = cp.prefilled;
        let c = &self.model.config;
        self.accounting = Accounting::new(c.n_layers, c.n_heads);
        // the checkpoint's summaries are those of the criterion then
        self.cache
            .set_bulk_summaries(self.criterion.bulk_summaries())?;
        self.layer_scratch.forget_choices();
        Ok(())
    }

    /// Decide with another criterion from now on; the cache starts keeping the bulk
    /// summaries it reads (page bounds, clusters), built from the current bulk.
    pub fn set_criterion(&mut self, criterion: Box<dyn LocalityCriterion>) -> Result<()> {
        self.cache.set_bulk_summaries(criterion.bulk_summaries())?;
        self.criterion = criterion;
        self.layer_scratch.forget_choices();
        Ok(())
    }

    /// Take bulk moments from elsewhere from now on (see [`KvCache::set_moments_mode`]).
    pub fn set_moments_mode(&mut self, mode: MomentsMode) -> Result<()> {
        if let MomentsMode::Calibration { table, .. } = &mode {
            table.signature().check_matches(&self.model.signature())?;
        }
        Ok(self.cache.set_moments_mode(mode)?)
    }

    /// Decode with activations at `precision` from now on: the products of every decoding
    /// step quantize their input as `precision` says, while prefill keeps the model's
    /// ([`Model::activations`]) and [`Session::start_over`] returns decoding to them. On one
    /// cache this isolates what int8 activations change in a step (`qada eval`'s
    /// `dense-int8`, the fast path's own drift beside a criterion's).
    pub fn set_decode_activations(&mut self, precision: ActPrecision) {
        self.rows.acts.precision = precision;
    }

    /// The activations decoding steps use ([`Session::set_decode_activations`]).
    pub fn decode_activations(&self) -> ActPrecision {
        self.rows.acts.precision
    }

    /// Forget the sequence and decode the next one with `criterion` and `moments` (a session
    /// reused across configurations otherwise keeps the last one's), with the model's
    /// activations.
    pub fn start_over(
        &mut self,
        criterion: Box<dyn LocalityCriterion>,
        moments: MomentsMode,
    ) -> Result<()> {
        self.reset();
        self.rows.acts.precision = self.model.activations;
        self.set_criterion(criterion)?;
        self.set_moments_mode(moments)
    }

    /// Forget the sequence (keeps allocations and the criterion).
    pub fn reset(&mut self) {
        self.cache.clear();
        let c = &self.model.config;
        self.accounting = Accounting::new(c.n_layers, c.n_heads);
        self.prefilled = false;
        self.layer_scratch.forget_choices();
    }

    fn check_room(&self, n: usize) -> Result<()> {
        if self.len() + n > self.capacity() {
            return Err(ModelError::Input(format!(
                "context full: {} tokens cached, {} more would exceed the context length of {}",
                self.len(),
                n,
                self.capacity()
            )));
        }
        Ok(())
    }

    /// Run the prompt densely, in blocks; returns the logits after its last token and marks
    /// the end of prefill (bulk moments freeze or come from the calibration table here).
    /// `progress(done, total)` is called after every block.
    pub fn prefill(
        &mut self,
        tokens: &[u32],
        progress: &mut (dyn FnMut(usize, usize) + Send),
    ) -> Result<&[f32]> {
        if tokens.is_empty() {
            return Err(ModelError::Input(
                "the prompt is empty: nothing to condition on".into(),
            ));
        }
        self.check_room(tokens.len())?;
        let last = self.prefill_hidden(tokens, progress)?;
        self.rows.x.copy_from_slice(&last);
        self.logits_of_row()?;
        self.cache.finish_prefill()?;
        self.prefilled = true;
        Ok(&self.logits)
    }

    /// Run a first part of a prompt densely, after the tokens already cached, without ending
    /// prefill: no logits, and the bulk moments neither freeze nor come from a calibration
    /// table yet ([`Session::prefill`] runs the prompt's last part and ends it).
    ///
    /// Blocks of [`PREFILL_BLOCK`] start where the cache ends, so a prompt run as parts whose
    /// lengths are multiples of [`PREFILL_BLOCK`], then its rest by [`Session::prefill`],
    /// computes exactly what one [`Session::prefill`] of it computes. A [`Session::checkpoint`]
    /// between parts is a prefix a later prompt can start from (the server's prefix cache).
    ///
    /// # Errors
    /// [`ModelError::Input`] after prefill has ended, or when the cache has no room.
    pub fn extend(
        &mut self,
        tokens: &[u32],
        progress: &mut (dyn FnMut(usize, usize) + Send),
    ) -> Result<()> {
        if self.prefilled {
            return Err(ModelError::Input(
                "prefill has ended (a token was decoded or the prompt's last part run): \
                 extend a prompt before Session::prefill, or restore a checkpoint taken before"
                    .into(),
            ));
        }
        if tokens.is_empty() {
            return Ok(());
        }
        self.check_room(tokens.len())?;
        self.prefill_hidden(tokens, progress)?;
        Ok(())
    }

    /// [`Session::prefill`] of `tokens` after the tokens cached, in parts that end on whole
    /// [`PREFILL_BLOCK`]s of the sequence (so it computes what one prefill computes, as
    /// [`Session::extend`] says); `between(self)` runs after every part but the last, with the
    /// part cached, and may stop the prompt there: `Break(b)` leaves it part-run and prefill
    /// not ended (restore a checkpoint or reset before another prompt). For callers that act
    /// between blocks: the server keeps prefix marks and notices a client that left, the
    /// Python binding runs Ctrl-C's handler.
    ///
    /// # Errors
    /// As [`Session::prefill`].
    pub fn prefill_in_parts<B>(
        &mut self,
        tokens: &[u32],
        mut between: impl FnMut(&Self) -> ControlFlow<B>,
    ) -> Result<ControlFlow<B, &[f32]>> {
        let mut rest = tokens;
        loop {
            let at = self.len();
            let part = ((at / PREFILL_BLOCK + 1) * PREFILL_BLOCK - at).min(rest.len());
            if part == rest.len() {
                return Ok(ControlFlow::Continue(self.prefill(rest, &mut |_, _| {})?));
            }
            self.extend(&rest[..part], &mut |_, _| {})?;
            rest = &rest[part..];
            if let ControlFlow::Break(b) = between(self) {
                return Ok(ControlFlow::Break(b));
            }
        }
    }

    /// `logits = W_out N_out(x)` for the residual row in the decoding buffers.
    fn logits_of_row(&mut self) -> Result<()> {
        let model = self.model.clone();
        let model: &Model = &model;
        let c = &model.config;
        let r = &mut self.rows;
        rms_norm(
            &r.x[..c.n_embd],
            &model.output_norm,
            c.rms_eps,
            &mut r.h[..c.n_embd],
        );
        r.acts.quantize(&r.h[..c.n_embd]);
        model.output_head().matvec(&r.acts, &mut self.logits)?;
        if let Some(cap) = c.final_softcap {
            qada_core::attention::softcap(&mut self.logits, cap);
        }
        Ok(())
    }

    /// The residual stream of the last prompt token after every layer (row 0: embedding),
    /// without the final norm. Runs the prompt like [`Session::prefill`] does.
    pub fn prefill_trace(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        self.check_room(tokens.len())?;
        let mut rows = Vec::new();
        self.prefill_blocks(tokens, &mut |_, _| {}, Some(&mut rows))?;
        Ok(rows)
    }

    fn prefill_hidden(
        &mut self,
        tokens: &[u32],
        progress: &mut (dyn FnMut(usize, usize) + Send),
    ) -> Result<Vec<f32>> {
        // On a worker of rayon's pool, the others kept awake, as [`Session::step_observed`]
        // explains.
        let this = &mut *self;
        crate::warm::in_pool_warm(move || this.prefill_blocks(tokens, progress, None))
    }

    /// Blocks of [`PREFILL_BLOCK`] tokens through every layer, attention dense and causal.
    fn prefill_blocks(
        &mut self,
        tokens: &[u32],
        progress: &mut (dyn FnMut(usize, usize) + Send),
        mut trace: Option<&mut Vec<Vec<f32>>>,
    ) -> Result<Vec<f32>> {
        let model = self.model.clone();
        let model: &Model = &model;
        let e = model.config.n_embd;
        let block_len = PREFILL_BLOCK.min(tokens.len());
        let mut rows = Buffers::new(model, block_len, self.cache.shape().capacity);
        let n_blocks = tokens.len().div_ceil(block_len);
        let mut last = vec![0.0; e];
        for (bi, block) in tokens.chunks(block_len).enumerate() {
            let n = block.len();
            let pos0 = self.cache.seq_len();
            for (i, &t) in block.iter().enumerate() {
                model.embed(t, &mut rows.x[i * e..(i + 1) * e])?;
            }
            let tracing = bi + 1 == n_blocks;
            let mut trace_row = |x: &[f32]| {
                if let (Some(t), true) = (trace.as_deref_mut(), tracing) {
                    t.push(x[(n - 1) * e..n * e].to_vec());
                }
            };
            trace_row(&rows.x);
            let mut attend = PrefillAttention {
                model,
                cache: &mut self.cache,
            };
            for l in 0..model.config.n_layers {
                block::forward(model, l, &mut rows, n, pos0, &mut attend)?;
                trace_row(&rows.x);
            }
            last.copy_from_slice(&rows.x[(n - 1) * e..n * e]);
            progress(pos0 + n, pos0 - bi * block_len + tokens.len());
        }
        Ok(last)
    }

    /// Decode one token at the next position: every global layer's attention goes through
    /// the criterion. Returns the logits for the position after it.
    pub fn step(&mut self, token: u32) -> Result<&[f32]> {
        self.step_observed(token, None)
    }

    /// [`Session::step`] with an observer that sees every global layer's queries and
    /// decisions.
    pub fn step_observed(
        &mut self,
        token: u32,
        observer: Option<&mut (dyn StepObserver + Send)>,
    ) -> Result<&[f32]> {
        // The whole step runs on a worker of rayon's pool: its parallel loops (about eight per
        // layer) then hand work to the other workers directly instead of each waking the pool
        // from outside and putting this thread to sleep until it finishes; and the other
        // workers poll for that work instead of sleeping between the loops (`warm.rs`).
        let this = &mut *self;
        crate::warm::in_pool_warm(move || this.step_inner(token, observer))?;
        Ok(&self.logits)
    }

    fn step_inner(
        &mut self,
        token: u32,
        observer: Option<&mut (dyn StepObserver + Send)>,
    ) -> Result<()> {
        self.check_room(1)?;
        if !self.prefilled {
            return Err(ModelError::Input(
                "decode step before prefill: run the prompt first".into(),
            ));
        }
        let model = self.model.clone();
        let model: &Model = &model;
        let pos = self.cache.seq_len();
        model.embed(token, &mut self.rows.x)?;
        let mut attend = DecodeAttention {
            model,
            cache: &mut self.cache,
            criterion: self.criterion.as_ref(),
            accounting: &mut self.accounting,
            layer_scratch: &mut self.layer_scratch,
            observer,
        };
        for l in 0..model.config.n_layers {
            block::forward(model, l, &mut self.rows, 1, pos, &mut attend)?;
        }
        self.logits_of_row()
    }
}

/// Prefill's attention: append the block's keys and values, then dense causal attention of
/// its `n` queries over every position they may see (the last `W` on a sliding layer).
struct PrefillAttention<'s> {
    model: &'s Model,
    cache: &'s mut KvCache,
}

impl Attend for PrefillAttention<'_> {
    fn attend(
        &mut self,
        layer: usize,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        n: usize,
        pos0: usize,
        out: &mut [f32],
    ) -> Result<()> {
        self.cache.append(layer, k, v)?;
        let c = &self.model.config;
        let shape = qada_core::attention::PrefillShape {
            n_heads: c.n_heads,
            dim: c.head_dim,
            scale: c.attention_scale,
            softcap: c.attn_softcap,
            window: c.layers[layer].span.window(),
        };
        let mut kv = Vec::with_capacity(c.n_kv_heads);
        for g in 0..c.n_kv_heads {
            let view = self.cache.head(layer, g)?;
            kv.push(qada_core::attention::PrefillHead {
                keys: view.keys(),
                values: view.values(),
                first: view.first_position(),
            });
        }
        Ok(qada_core::attention::prefill_attention(
            &kv, &shape, q, n, pos0, out,
        )?)
    }
}

/// A decoding step's attention: append the token's key and value, then on a global layer let
/// the criterion label every head and attend accordingly (recorded in the accounting, shown
/// to the observer); on a sliding layer attend to the window, counted apart.
struct DecodeAttention<'s, 'o> {
    model: &'s Model,
    cache: &'s mut KvCache,
    criterion: &'s dyn LocalityCriterion,
    accounting: &'s mut Accounting,
    layer_scratch: &'s mut LayerScratch,
    observer: Option<&'o mut (dyn StepObserver + Send)>,
}

impl Attend for DecodeAttention<'_, '_> {
    fn attend(
        &mut self,
        l: usize,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        _n: usize,
        _pos: usize,
        out: &mut [f32],
    ) -> Result<()> {
        let c = &self.model.config;
        let d = c.head_dim;
        let scale = c.attention_scale;
        self.cache.append(l, k, v)?;
        let layer = CacheLayer(self.cache.layer(l)?);
        let head0 = layer.0.head(0);
        // the cache shows a sliding layer's last W positions as its window (no bulk): dense
        // attention over it, no decision to record
        let global = c.layers[l].is_global();
        let criterion: &dyn LocalityCriterion = if global { self.criterion } else { &Dense };
        attend_layer(
            criterion,
            l,
            q,
            &layer,
            qada_core::attention::ScoreMap {
                scale,
                softcap: c.attn_softcap,
            },
            self.layer_scratch,
            out,
        )?;
        if !global {
            let len = head0.split().window.len();
            let bytes = head0.keys().value_bytes();
            self.accounting
                .record_sliding_layer(len, d, c.n_kv_heads, bytes);
            return Ok(());
        }
        let split = head0.split();
        let context = split.sink.len() + split.bulk.len() + split.window.len();
        let cost = self.criterion.decision_cost(d, split.bulk_len(), context);
        self.accounting.record_layer_reads(
            l,
            self.layer_scratch.decisions(),
            self.layer_scratch.reads(),
            context,
            split.local_len(),
            d,
            c.n_kv_heads,
            head0.keys().value_bytes(),
            cost,
        );
        if let Some(obs) = self.observer.as_deref_mut() {
            let segs: Vec<KvSegments<'_>> = (0..c.n_kv_heads).map(|g| layer.segments(g)).collect();
            obs.observe_layer(l, q, &segs, scale, self.layer_scratch.decisions())?;
        }
        Ok(())
    }
}
