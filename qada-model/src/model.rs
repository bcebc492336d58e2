//! The weights of a decoder as GGUF stores them, for every family of [`crate::family`].
//!
//! Which tensors a layer has follows the family's row: QK-norm and post-norms are required
//! where the family has them; biases are taken wherever the file has them. The token
//! embedding doubles as the output head when `output.weight` is absent. The forward pass is
//! in `block.rs`.

use std::cell::RefCell;
use std::collections::HashSet;
use std::path::Path;

use qada_stats::ModelSignature;

use crate::config::ModelConfig;
use crate::gguf::{GgufFile, TensorInfo};
use crate::qlinear::QLinear;
use crate::quant::GgmlType;
use crate::rope::{Rope, RopeFactors, RopeSet};
use crate::tokenizer::Tokenizer;
use crate::{ModelError, Result};

/// Weights of one transformer block (read by the session; not part of the API).
#[derive(Clone, Debug)]
pub struct Block {
    pub(crate) attn_norm: Vec<f32>,
    pub(crate) q: QLinear,
    pub(crate) k: QLinear,
    pub(crate) v: QLinear,
    pub(crate) o: QLinear,
    pub(crate) ffn_norm: Vec<f32>,
    pub(crate) gate: QLinear,
    pub(crate) up: QLinear,
    pub(crate) down: QLinear,
    /// Per-head RMSNorm of queries (`head_dim` weights), QK-norm families only.
    pub(crate) q_norm: Option<Vec<f32>>,
    /// Per-head RMSNorm of keys.
    pub(crate) k_norm: Option<Vec<f32>>,
    /// RMSNorm of the attention output before the residual add (post-norm families).
    pub(crate) post_attn_norm: Option<Vec<f32>>,
    /// RMSNorm of the feed-forward output before the residual add.
    pub(crate) post_ffn_norm: Option<Vec<f32>>,
}

/// A loaded model: configuration, tokenizer and weights.
pub struct Model {
    /// Hyper-parameters from the file.
    pub(crate) config: ModelConfig,
    /// The file's tokenizer.
    pub(crate) tokenizer: Tokenizer,
    /// `vocab x n_embd` token embeddings (rows looked up, and the output head when tied).
    pub(crate) embedding: QLinear,
    /// Transformer blocks.
    pub(crate) blocks: Vec<Block>,
    /// Final RMSNorm.
    pub(crate) output_norm: Vec<f32>,
    /// Output head; `None` when tied to the embedding.
    pub(crate) output: Option<QLinear>,
    /// RoPE base of the global layers in use (the file's, or an override).
    pub(crate) rope_base: f64,
    /// The RoPE of every kind of layer.
    pub(crate) ropes: RopeSet,
    /// How activations enter quantized products.
    pub(crate) activations: crate::qlinear::ActPrecision,
}

/// How weight matrices are kept in memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WeightFormat {
    /// As stored in the file (Q4_1, Q8_0, ...): multiplied by quantized kernels. Fast.
    #[default]
    Native,
    /// Dequantized to f32 at load: the exact reference path.
    F32,
}

impl WeightFormat {
    /// `native` or `f32`.
    pub fn name(self) -> &'static str {
        match self {
            WeightFormat::Native => "native",
            WeightFormat::F32 => "f32",
        }
    }
}

impl std::fmt::Display for WeightFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for WeightFormat {
    type Err = ModelError;
    /// The format [`WeightFormat::name`] names.
    fn from_str(s: &str) -> Result<Self> {
        [WeightFormat::Native, WeightFormat::F32]
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| {
                ModelError::Input(format!("unknown weight format {s:?}: use native or f32"))
            })
    }
}

/// Options for loading.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// Replace the file's RoPE base (the paper raises it to stretch the context).
    pub rope_base: Option<f64>,
    /// How weight matrices are kept.
    pub weights: WeightFormat,
    /// How activations enter quantized products.
    pub activations: crate::qlinear::ActPrecision,
}

/// The file's tensors, with a record of every one the loader reads: what is left unread at
/// the end is refused ([`Tensors::check_all_read`]).
struct Tensors<'f> {
    f: &'f GgufFile,
    read: RefCell<HashSet<String>>,
}

impl<'f> Tensors<'f> {
    fn new(f: &'f GgufFile) -> Self {
        Tensors {
            f,
            read: RefCell::new(HashSet::new()),
        }
    }

    fn has(&self, name: &str) -> bool {
        self.f.tensor(name).is_some()
    }

    /// The tensor's entry, recorded as read.
    fn info(&self, name: &str) -> Result<&'f TensorInfo> {
        let info = self
            .f
            .tensor(name)
            .ok_or_else(|| ModelError::MissingTensor(name.into()))?;
        self.read.borrow_mut().insert(name.into());
        Ok(info)
    }

    /// Refuse the file if it holds a tensor the loader did not read.
    fn check_all_read(&self, arch: &str) -> Result<()> {
        let read = self.read.borrow();
        match self.f.tensors().iter().find(|t| !read.contains(&t.name)) {
            None => Ok(()),
            Some(t) => Err(ModelError::NotUnderstood {
                what: "tensor",
                name: t.name.clone(),
                reason: format!(
                    "no part of a {arch} model that this build runs reads it (an adapter, an \
                     extra head or a feature not implemented)"
                ),
            }),
        }
    }

    /// A 1-D tensor of `len` values.
    fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>> {
        let info = self.info(name)?;
        let (dims, data) = self.f.tensor_f32(name)?;
        if data.len() != len || dims.iter().filter(|&&d| d != 1).count() > 1 {
            return Err(ModelError::TensorShape {
                name: name.into(),
                expected: vec![len as u64],
                found: info.dims.clone(),
            });
        }
        Ok(data)
    }

    /// `name.weight` (with `name.bias` where the file has one), `cols` wide, cut into
    /// matrices of `parts` rows each, in order: one part for a plain matrix, several for a
    /// fused one (Phi-3's `attn_qkv`, its gate and up in `ffn_up`).
    fn linears(
        &self,
        name: &str,
        parts: &[usize],
        cols: usize,
        fmt: WeightFormat,
    ) -> Result<Vec<QLinear>> {
        let rows: usize = parts.iter().sum();
        let bias_name = format!("{name}.bias");
        let bias = match self.has(&bias_name) {
            true => Some(self.vector(&bias_name, rows)?),
            false => None,
        };
        self.matrices(&format!("{name}.weight"), parts, cols, fmt, bias)
    }

    /// `name.weight` as one `rows x cols` matrix, with its bias where the file has one.
    fn linear(&self, name: &str, rows: usize, cols: usize, fmt: WeightFormat) -> Result<QLinear> {
        Ok(self.linears(name, &[rows], cols, fmt)?.remove(0))
    }

    /// The tensor `name`, `cols` wide, cut into matrices of `parts` rows each with their rows
    /// of `bias`.
    fn matrices(
        &self,
        name: &str,
        parts: &[usize],
        cols: usize,
        fmt: WeightFormat,
        bias: Option<Vec<f32>>,
    ) -> Result<Vec<QLinear>> {
        let rows: usize = parts.iter().sum();
        let name = name.to_string();
        let info = self.info(&name)?;
        if info.dims != [cols as u64, rows as u64] {
            return Err(ModelError::TensorShape {
                name,
                expected: vec![cols as u64, rows as u64],
                found: info.dims.clone(),
            });
        }
        let invalid = |e: ModelError| ModelError::Invalid {
            what: format!("tensor {name:?}"),
            offset: self.f.data_offset + info.offset,
            reason: e.to_string(),
        };
        let bias_of = |r0: usize, n: usize| bias.as_ref().map(|b| b[r0..r0 + n].to_vec());
        let mut out = Vec::with_capacity(parts.len());
        let mut r0 = 0;
        if fmt == WeightFormat::F32 || info.ty == GgmlType::F32 {
            let (_, w) = self.f.tensor_f32(&name)?;
            for &n in parts {
                let rows_w = w[r0 * cols..(r0 + n) * cols].to_vec();
                out.push(QLinear::from_f32(n, cols, rows_w, bias_of(r0, n)).map_err(invalid)?);
                r0 += n;
            }
            return Ok(out);
        }
        if !info.ty.can_dequantize() {
            return Err(ModelError::UnsupportedType {
                name,
                ty: info.ty.to_string(),
            });
        }
        // every value finite, as the f32 path checks, without an f32 copy of the tensor
        self.f.check_finite(&name)?;
        let bytes = self.f.tensor_bytes(info);
        // rows are whole blocks (QLinear checks `cols`), so a row is `len / rows` bytes
        let row_bytes = bytes.len() / rows;
        for &n in parts {
            let part = bytes[r0 * row_bytes..(r0 + n) * row_bytes].to_vec();
            out.push(
                QLinear::from_blocks(n, cols, info.ty, part, bias_of(r0, n)).map_err(invalid)?,
            );
            r0 += n;
        }
        Ok(out)
    }

    /// Per-pair RoPE factors of a tensor, when the file has it.
    fn rope_factors(&self, name: &str, pairs: usize) -> Result<Option<Vec<f64>>> {
        if !self.has(name) {
            return Ok(None);
        }
        let v = self.vector(name, pairs)?;
        if let Some(bad) = v.iter().find(|x| !(x.is_finite() && **x > 0.0)) {
            return Err(ModelError::Invalid {
                what: format!("tensor {name:?}"),
                offset: self.f.data_offset + self.info(name)?.offset,
                reason: format!("a RoPE factor must be a positive number, found {bad}"),
            });
        }
        Ok(Some(v.into_iter().map(f64::from).collect()))
    }
}

/// The RoPE of every kind of layer: the file's per-pair factor tensors, combined with the
/// metadata by [`RopeSet::new`].
fn ropes(t: &Tensors<'_>, c: &ModelConfig, base: f64) -> Result<RopeSet> {
    let pairs = c.rope_dim / 2;
    let factors = RopeFactors {
        freqs: t.rope_factors("rope_freqs.weight", pairs)?,
        short: t.rope_factors("rope_factors_short.weight", pairs)?,
        long: t.rope_factors("rope_factors_long.weight", pairs)?,
    };
    RopeSet::new(c, base, factors)
}

impl Model {
    /// Load a GGUF file.
    pub fn load(path: &Path, opts: &LoadOptions) -> Result<Self> {
        let f = GgufFile::open(path)?;
        Self::from_gguf(&f, opts)
    }

    /// Build the model from a parsed file.
    pub fn from_gguf(f: &GgufFile, opts: &LoadOptions) -> Result<Self> {
        let config = ModelConfig::from_gguf(f)?;
        let tokenizer = Tokenizer::from_gguf(f)?;
        let c = &config;
        if tokenizer.vocab_size() != c.vocab_size {
            return Err(ModelError::BadMetadata {
                key: format!("{}.vocab_size and tokenizer.ggml.tokens", c.family.name),
                found: format!("{} and {} tokens", c.vocab_size, tokenizer.vocab_size()),
                reason: "the model and its tokenizer must have the same vocabulary (the file is damaged)"
                    .into(),
            });
        }
        crate::strict::check_keys(f, c.family.name)?;
        let t = Tensors::new(f);
        let fmt = opts.weights;
        // rows looked up, never a product with a bias: a `token_embd.bias` is left unread
        // and refused
        let embedding = t
            .matrices("token_embd.weight", &[c.vocab_size], c.n_embd, fmt, None)?
            .remove(0);
        let (qd, kv) = (c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim);
        let fam = c.family;
        let mut blocks = Vec::with_capacity(c.n_layers);
        for l in 0..c.n_layers {
            let p = format!("blk.{l}");
            let norm = |name: &str, len: usize, has: bool| -> Result<Option<Vec<f32>>> {
                has.then(|| t.vector(&format!("{p}.{name}.weight"), len))
                    .transpose()
            };
            let name = |n: &str| format!("{p}.{n}");
            // Q, K, V and gate, up: separate, or fused in one tensor (Phi-3)
            let [q, k, v]: [QLinear; 3] = match t.has(&name("attn_qkv.weight")) {
                true => t.linears(&name("attn_qkv"), &[qd, kv, kv], c.n_embd, fmt)?,
                false => vec![
                    t.linear(&name("attn_q"), qd, c.n_embd, fmt)?,
                    t.linear(&name("attn_k"), kv, c.n_embd, fmt)?,
                    t.linear(&name("attn_v"), kv, c.n_embd, fmt)?,
                ],
            }
            .try_into()
            .expect("three parts");
            let [gate, up]: [QLinear; 2] = match t.has(&name("ffn_gate.weight")) {
                true => vec![
                    t.linear(&name("ffn_gate"), c.n_ff, c.n_embd, fmt)?,
                    t.linear(&name("ffn_up"), c.n_ff, c.n_embd, fmt)?,
                ],
                false => t.linears(&name("ffn_up"), &[c.n_ff, c.n_ff], c.n_embd, fmt)?,
            }
            .try_into()
            .expect("two parts");
            blocks.push(Block {
                q_norm: norm("attn_q_norm", c.head_dim, fam.qk_norm)?,
                k_norm: norm("attn_k_norm", c.head_dim, fam.qk_norm)?,
                post_attn_norm: norm("post_attention_norm", c.n_embd, fam.post_norms)?,
                post_ffn_norm: norm("post_ffw_norm", c.n_embd, fam.post_norms)?,
                attn_norm: t.vector(&name("attn_norm.weight"), c.n_embd)?,
                q,
                k,
                v,
                o: t.linear(&name("attn_output"), c.n_embd, qd, fmt)?,
                ffn_norm: t.vector(&name("ffn_norm.weight"), c.n_embd)?,
                gate,
                up,
                down: t.linear(&name("ffn_down"), c.n_embd, c.n_ff, fmt)?,
            });
        }
        let output_norm = t.vector("output_norm.weight", c.n_embd)?;
        let output = match t.has("output.weight") {
            true => Some(t.linear("output", c.vocab_size, c.n_embd, fmt)?),
            false => None,
        };
        let rope_base = opts.rope_base.unwrap_or(c.rope_base);
        if !(rope_base.is_finite() && rope_base > 1.0) {
            return Err(ModelError::Input(format!(
                "rope base {rope_base} must be a finite number above 1"
            )));
        }
        let ropes = ropes(&t, c, rope_base)?;
        t.check_all_read(fam.name)?;
        Ok(Model {
            config,
            tokenizer,
            embedding,
            blocks,
            output_norm,
            output,
            rope_base,
            ropes,
            activations: opts.activations,
        })
    }

    /// Hyper-parameters from the file.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Run with a context of `n` positions, at most the `n_ctx` the file was trained for.
    pub fn limit_context(&mut self, n: usize) -> Result<()> {
        let file = self.config.context_length;
        if n == 0 || n > file {
            return Err(ModelError::Input(format!(
                "a context of {n} positions: must be in 1..={file}, the context the file was \
                 trained for"
            )));
        }
        self.config.context_length = n;
        Ok(())
    }

    /// The file's tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// How activations enter quantized products.
    pub fn activations(&self) -> crate::qlinear::ActPrecision {
        self.activations
    }

    /// The final RMSNorm's weights (applied to the last layer's output before the head).
    pub fn output_norm(&self) -> &[f32] {
        &self.output_norm
    }

    /// Whether the output head is the token embedding (tied), as Gemma's is.
    pub fn ties_output(&self) -> bool {
        self.output.is_none()
    }

    /// RoPE base of the global layers in use (the file's, or an override).
    pub fn rope_base(&self) -> f64 {
        self.rope_base
    }

    /// RoPE of layer `l` in a session of `context` positions (`None` on a NoPE layer).
    pub fn rope(&self, l: usize, context: usize) -> Option<&Rope> {
        self.ropes.for_layer(self.config.layers.get(l)?, context)
    }

    /// What calibration files made for this model must match.
    pub fn signature(&self) -> ModelSignature {
        self.config.signature(self.rope_base)
    }

    /// The output head: `output.weight`, or the embedding when tied.
    pub fn output_head(&self) -> &QLinear {
        self.output.as_ref().unwrap_or(&self.embedding)
    }

    /// Bytes of weights one decoding step reads (every matrix once, plus one embedding row).
    pub fn weight_bytes_per_token(&self) -> usize {
        let blocks: usize = self
            .blocks
            .iter()
            .map(|b| {
                [&b.q, &b.k, &b.v, &b.o, &b.gate, &b.up, &b.down]
                    .iter()
                    .map(|l| l.weight_bytes())
                    .sum::<usize>()
            })
            .sum();
        blocks
            + self.output_head().weight_bytes()
            + self.embedding.weight_bytes() / self.config.vocab_size
    }

    /// Embedding row of a token, times the family's embedding scale.
    pub fn embed(&self, token: u32, out: &mut [f32]) -> Result<()> {
        let t = token as usize;
        if t >= self.config.vocab_size {
            return Err(ModelError::Input(format!(
                "token id {token} is past the vocabulary of {}",
                self.config.vocab_size
            )));
        }
        self.embedding.row_f32(t, out)?;
        let s = self.config.embedding_scale;
        if s != 1.0 {
            out.iter_mut().for_each(|v| *v *= s);
        }
        Ok(())
    }
}
