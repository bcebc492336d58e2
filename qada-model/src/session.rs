//! Running the model: dense prefill in blocks, then one adaptive decoding step per token.

use qada_core::{
    attend_layer, Accounting, Decision, KvSegments, LayerKv, LayerScratch, LocalityCriterion,
};
use qada_kv::{
    CacheCheckpoint, CacheShape, HeadView, KvCache, KvDtype, LayerView, MomentsMode, WindowConfig,
};
use qada_stats::Rows;
use rayon::prelude::*;

use crate::model::Model;
use crate::ops::{gemm_strided, rms_norm, rope_inplace, rope_table, swiglu};
use crate::qlinear::Q8Acts;
use crate::{ModelError, Result};

/// Tokens per prefill block: large enough for gemm to run at full speed and to amortize
/// dequantizing weight tiles once per block, small enough that the `block x T` score matrices
/// (16 MiB per head at 8k context) stay small.
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

/// One sequence being decoded: the cache, scratch buffers and what the criterion saved.
pub struct Session<'m> {
    model: &'m Model,
    cache: KvCache,
    criterion: Box<dyn LocalityCriterion>,
    accounting: Accounting,
    prefilled: bool,
    // scratch, sized once
    x: Vec<f32>,
    xb: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    hb: Vec<f32>,
    hb2: Vec<f32>,
    logits: Vec<f32>,
    rope: Vec<(f32, f32)>,
    acts: Q8Acts,
    layer_scratch: LayerScratch,
    decisions: Vec<Decision>,
}

/// Rows as f32: borrowed when they are, converted when the cache holds f16.
fn as_f32(r: Rows<'_>) -> std::borrow::Cow<'_, [f32]> {
    match r {
        Rows::F32(x) => std::borrow::Cow::Borrowed(x),
        Rows::F16(x) => std::borrow::Cow::Owned(x.iter().map(|v| v.to_f32()).collect()),
    }
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
    /// A new, empty sequence.
    pub fn new(model: &'m Model, opts: SessionOptions) -> Result<Self> {
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
        let cache = KvCache::new(shape, opts.window, opts.moments)?;
        let qd = c.n_heads * c.head_dim;
        let kvd = c.n_kv_heads * c.head_dim;
        Ok(Session {
            model,
            cache,
            criterion: opts.criterion,
            accounting: Accounting::new(c.n_layers, c.n_heads),
            prefilled: false,
            x: vec![0.0; c.n_embd],
            xb: vec![0.0; c.n_embd],
            q: vec![0.0; qd],
            k: vec![0.0; kvd],
            v: vec![0.0; kvd],
            att: vec![0.0; qd],
            hb: vec![0.0; c.n_ff],
            hb2: vec![0.0; c.n_ff],
            logits: vec![0.0; c.vocab_size],
            rope: Vec::new(),
            acts: Q8Acts {
                precision: model.activations,
                ..Default::default()
            },
            layer_scratch: LayerScratch::new(),
            decisions: vec![Decision::LONG; c.n_heads],
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
    pub fn model(&self) -> &'m Model {
        self.model
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
        Ok(())
    }

    /// Decide with another criterion from now on.
    pub fn set_criterion(&mut self, criterion: Box<dyn LocalityCriterion>) {
        self.criterion = criterion;
    }

    /// Take bulk moments from elsewhere from now on (see [`KvCache::set_moments_mode`]).
    pub fn set_moments_mode(&mut self, mode: MomentsMode) -> Result<()> {
        if let MomentsMode::Calibration { table, .. } = &mode {
            table.signature().check_matches(&self.model.signature())?;
        }
        Ok(self.cache.set_moments_mode(mode)?)
    }

    /// Forget the sequence and decode the next one with `criterion` and `moments` (a session
    /// reused across configurations otherwise keeps the last one's).
    pub fn start_over(
        &mut self,
        criterion: Box<dyn LocalityCriterion>,
        moments: MomentsMode,
    ) -> Result<()> {
        self.reset();
        self.set_criterion(criterion);
        self.set_moments_mode(moments)
    }

    /// Forget the sequence (keeps allocations and the criterion).
    pub fn reset(&mut self) {
        self.cache.clear();
        let c = &self.model.config;
        self.accounting = Accounting::new(c.n_layers, c.n_heads);
        self.prefilled = false;
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
        let c = &self.model.config;
        let last = self.prefill_hidden(tokens, progress)?;
        let mut h = vec![0.0; c.n_embd];
        rms_norm(&last, &self.model.output_norm, c.rms_eps, &mut h);
        self.acts.quantize(&h);
        self.model
            .output_head()
            .matvec(&self.acts, &mut self.logits)?;
        self.cache.finish_prefill()?;
        self.prefilled = true;
        Ok(&self.logits)
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
        // On a worker of rayon's pool, as [`Session::step_observed`] explains.
        let this = &mut *self;
        rayon::scope(move |_| this.prefill_blocks(tokens, progress, None))
    }

    fn prefill_blocks(
        &mut self,
        tokens: &[u32],
        progress: &mut (dyn FnMut(usize, usize) + Send),
        mut trace: Option<&mut Vec<Vec<f32>>>,
    ) -> Result<Vec<f32>> {
        let model = self.model;
        let c = &model.config;
        let (e, d) = (c.n_embd, c.head_dim);
        let (qd, kvd) = (c.n_heads * d, c.n_kv_heads * d);
        let mut last = vec![0.0; e];
        let n_blocks = tokens.len().div_ceil(PREFILL_BLOCK);
        let mut x = vec![0.0f32; PREFILL_BLOCK * e];
        let mut h = vec![0.0f32; PREFILL_BLOCK * e];
        let mut q = vec![0.0f32; PREFILL_BLOCK * qd];
        let mut k = vec![0.0f32; PREFILL_BLOCK * kvd];
        let mut v = vec![0.0f32; PREFILL_BLOCK * kvd];
        let mut att = vec![0.0f32; PREFILL_BLOCK * qd];
        let mut proj = vec![0.0f32; PREFILL_BLOCK * e];
        let mut g = vec![0.0f32; PREFILL_BLOCK * c.n_ff];
        let mut u = vec![0.0f32; PREFILL_BLOCK * c.n_ff];
        for (bi, block) in tokens.chunks(PREFILL_BLOCK).enumerate() {
            let n = block.len();
            let pos0 = self.cache.seq_len();
            for (i, &t) in block.iter().enumerate() {
                model.embed(t, &mut x[i * e..(i + 1) * e])?;
            }
            let trace_row = |x: &[f32], tr: &mut Option<&mut Vec<Vec<f32>>>| {
                if let Some(rows) = tr.as_deref_mut() {
                    if bi + 1 == n_blocks {
                        rows.push(x[(n - 1) * e..n * e].to_vec());
                    }
                }
            };
            trace_row(&x, &mut trace);
            for (l, blk) in model.blocks.iter().enumerate() {
                for i in 0..n {
                    rms_norm(
                        &x[i * e..(i + 1) * e],
                        &blk.attn_norm,
                        c.rms_eps,
                        &mut h[i * e..(i + 1) * e],
                    );
                }
                blk.q.matmul_rows(&h, n, &mut q)?;
                blk.k.matmul_rows(&h, n, &mut k)?;
                blk.v.matmul_rows(&h, n, &mut v)?;
                for i in 0..n {
                    rope_table(pos0 + i, model.rope_base, c.rope_dim, &mut self.rope);
                    let style = c.architecture.rope_style();
                    rope_inplace(&mut q[i * qd..(i + 1) * qd], d, &self.rope, style);
                    rope_inplace(&mut k[i * kvd..(i + 1) * kvd], d, &self.rope, style);
                }
                self.cache.append(l, &k[..n * kvd], &v[..n * kvd])?;
                self.prefill_attention(l, &q[..n * qd], n, pos0, &mut att)?;
                blk.o.matmul_rows(&att, n, &mut proj)?;
                x[..n * e].iter_mut().zip(&proj).for_each(|(a, b)| *a += b);
                for i in 0..n {
                    rms_norm(
                        &x[i * e..(i + 1) * e],
                        &blk.ffn_norm,
                        c.rms_eps,
                        &mut h[i * e..(i + 1) * e],
                    );
                }
                blk.gate.matmul_rows(&h, n, &mut g)?;
                blk.up.matmul_rows(&h, n, &mut u)?;
                swiglu(&mut g[..n * c.n_ff], &u[..n * c.n_ff]);
                blk.down.matmul_rows(&g, n, &mut proj)?;
                x[..n * e].iter_mut().zip(&proj).for_each(|(a, b)| *a += b);
                trace_row(&x, &mut trace);
            }
            last.copy_from_slice(&x[(n - 1) * e..n * e]);
            progress(pos0 + n, pos0 - bi * PREFILL_BLOCK + tokens.len());
        }
        Ok(last)
    }

    /// Causal dense attention of a block of `n` queries at positions `pos0..pos0 + n` over
    /// every cached position, with gemm per query head, heads in parallel.
    fn prefill_attention(
        &self,
        layer: usize,
        q: &[f32],
        n: usize,
        pos0: usize,
        out: &mut [f32],
    ) -> Result<()> {
        let c = &self.model.config;
        let d = c.head_dim;
        let qd = c.n_heads * d;
        let group = c.n_heads / c.n_kv_heads;
        let t = pos0 + n;
        let scale = 1.0 / (d as f32).sqrt();
        let views: Vec<HeadView<'_>> = (0..c.n_kv_heads)
            .map(|g| self.cache.head(layer, g))
            .collect::<std::result::Result<_, _>>()?;
        let heads: Vec<Vec<f32>> = (0..c.n_heads)
            .into_par_iter()
            .map(|h| {
                let view = &views[h / group];
                let (keys, values) = (as_f32(view.keys()), as_f32(view.values()));
                let (keys, values): (&[f32], &[f32]) = (&keys, &values);
                let mut s = vec![0.0f32; n * t];
                // S = Q_h K^T: (n x d) (d x t)
                gemm_strided(n, t, d, &mut s, t, &q[h * d..], qd, 1, keys, 1, d);
                for i in 0..n {
                    let row = &mut s[i * t..(i + 1) * t];
                    let visible = pos0 + i + 1;
                    let mut m = f32::NEG_INFINITY;
                    for r in row[..visible].iter_mut() {
                        *r *= scale;
                        m = m.max(*r);
                    }
                    let z = qada_core::attention::exp_in_place(&mut row[..visible], m);
                    let inv = 1.0 / z;
                    row[..visible].iter_mut().for_each(|r| *r *= inv);
                    row[visible..].iter_mut().for_each(|r| *r = 0.0);
                }
                // O_h = P V: (n x t) (t x d)
                let mut o = vec![0.0f32; n * d];
                gemm_strided(n, d, t, &mut o, d, &s, t, 1, values, d, 1);
                o
            })
            .collect();
        for (h, o) in heads.iter().enumerate() {
            for i in 0..n {
                out[i * qd + h * d..i * qd + (h + 1) * d].copy_from_slice(&o[i * d..(i + 1) * d]);
            }
        }
        Ok(())
    }

    /// Decode one token at the next position: every layer's attention goes through the
    /// criterion. Returns the logits for the position after it.
    pub fn step(&mut self, token: u32) -> Result<&[f32]> {
        self.step_observed(token, None)
    }

    /// [`Session::step`] with an observer that sees every layer's queries and decisions.
    pub fn step_observed(
        &mut self,
        token: u32,
        observer: Option<&mut (dyn StepObserver + Send)>,
    ) -> Result<&[f32]> {
        // The whole step runs on a worker of rayon's pool: its parallel loops (about eight per
        // layer) then hand work to the other workers directly instead of each waking the pool
        // from outside and putting this thread to sleep until it finishes.
        let this = &mut *self;
        rayon::scope(move |_| this.step_inner(token, observer))?;
        Ok(&self.logits)
    }

    fn step_inner(
        &mut self,
        token: u32,
        mut observer: Option<&mut (dyn StepObserver + Send)>,
    ) -> Result<()> {
        self.check_room(1)?;
        if !self.prefilled {
            return Err(ModelError::Input(
                "decode step before prefill: run the prompt first".into(),
            ));
        }
        let model = self.model;
        let c = &model.config;
        let d = c.head_dim;
        let pos = self.cache.seq_len();
        let scale = 1.0 / (d as f32).sqrt();
        model.embed(token, &mut self.x)?;
        rope_table(pos, model.rope_base, c.rope_dim, &mut self.rope);
        let style = c.architecture.rope_style();
        for (l, blk) in model.blocks.iter().enumerate() {
            rms_norm(&self.x, &blk.attn_norm, c.rms_eps, &mut self.xb);
            self.acts.quantize(&self.xb);
            blk.q.matvec(&self.acts, &mut self.q)?;
            blk.k.matvec(&self.acts, &mut self.k)?;
            blk.v.matvec(&self.acts, &mut self.v)?;
            rope_inplace(&mut self.q, d, &self.rope, style);
            rope_inplace(&mut self.k, d, &self.rope, style);
            self.cache.append(l, &self.k, &self.v)?;
            let layer = CacheLayer(self.cache.layer(l)?);
            attend_layer(
                self.criterion.as_ref(),
                l,
                &self.q,
                &layer,
                scale,
                &mut self.layer_scratch,
                &mut self.att,
                &mut self.decisions,
            )?;
            let head0 = layer.0.head(0);
            let split = head0.split();
            let flops = self.criterion.decision_flops(d, split.bulk_len());
            self.accounting.record_layer(
                l,
                &self.decisions,
                split.sink.len() + split.bulk.len() + split.window.len(),
                split.local_len(),
                d,
                c.n_kv_heads,
                head0.keys().elem_bytes(),
                flops,
            );
            if let Some(obs) = observer.as_deref_mut() {
                let segs: Vec<KvSegments<'_>> =
                    (0..c.n_kv_heads).map(|g| layer.segments(g)).collect();
                obs.observe_layer(l, &self.q, &segs, scale, &self.decisions)?;
            }
            self.acts.quantize(&self.att);
            blk.o.matvec(&self.acts, &mut self.xb)?;
            self.x.iter_mut().zip(&self.xb).for_each(|(a, b)| *a += b);
            rms_norm(&self.x, &blk.ffn_norm, c.rms_eps, &mut self.xb);
            self.acts.quantize(&self.xb);
            blk.gate.matvec(&self.acts, &mut self.hb)?;
            blk.up.matvec(&self.acts, &mut self.hb2)?;
            swiglu(&mut self.hb, &self.hb2);
            self.acts.quantize(&self.hb);
            blk.down.matvec(&self.acts, &mut self.xb)?;
            self.x.iter_mut().zip(&self.xb).for_each(|(a, b)| *a += b);
        }
        rms_norm(&self.x, &model.output_norm, c.rms_eps, &mut self.xb);
        self.acts.quantize(&self.xb);
        model.output_head().matvec(&self.acts, &mut self.logits)?;
        Ok(())
    }
}
