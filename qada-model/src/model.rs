//! The weights of a decoder as GGUF stores them, for every family of [`crate::family`].
//!
//! Which tensors a layer has follows the family's row: QK-norm and post-norms are required
//! where the family has them; biases are taken wherever the file has them. The token
//! embedding doubles as the output head when `output.weight` is absent. The forward pass is
//! in `block.rs`.

use std::path::Path;

use qada_stats::ModelSignature;

use crate::config::ModelConfig;
use crate::gguf::GgufFile;
use crate::ops::Rope;
use crate::qlinear::QLinear;
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
    pub config: ModelConfig,
    /// The file's tokenizer.
    pub tokenizer: Tokenizer,
    /// `vocab x n_embd` token embeddings (rows looked up, and the output head when tied).
    pub embedding: QLinear,
    /// Transformer blocks.
    pub blocks: Vec<Block>,
    /// Final RMSNorm.
    pub output_norm: Vec<f32>,
    /// Output head; `None` when tied to the embedding.
    pub output: Option<QLinear>,
    /// RoPE base of the global layers in use (the file's, or an override).
    pub rope_base: f64,
    /// How activations enter quantized products.
    pub activations: crate::qlinear::ActPrecision,
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

fn vector(f: &GgufFile, name: &str, len: usize) -> Result<Vec<f32>> {
    let (dims, data) = f.tensor_f32(name)?;
    if data.len() != len || dims.iter().filter(|&&d| d != 1).count() > 1 {
        return Err(ModelError::TensorShape {
            name: name.into(),
            expected: vec![len as u64],
            found: dims,
        });
    }
    Ok(data)
}

fn matrix(
    f: &GgufFile,
    name: &str,
    rows: usize,
    cols: usize,
    fmt: WeightFormat,
    bias: Option<Vec<f32>>,
) -> Result<QLinear> {
    let info = f
        .tensor(name)
        .ok_or_else(|| ModelError::MissingTensor(name.into()))?;
    if info.dims != [cols as u64, rows as u64] {
        return Err(ModelError::TensorShape {
            name: name.into(),
            expected: vec![cols as u64, rows as u64],
            found: info.dims.clone(),
        });
    }
    if fmt == WeightFormat::F32 || info.ty == crate::quant::GgmlType::F32 {
        let (_, w) = f.tensor_f32(name)?;
        return QLinear::from_f32(rows, cols, w, bias).map_err(|e| ModelError::Invalid {
            what: format!("tensor {name:?}"),
            offset: f.data_offset + info.offset,
            reason: e.to_string(),
        });
    }
    if !info.ty.can_dequantize() {
        return Err(ModelError::UnsupportedType {
            name: name.into(),
            ty: info.ty.to_string(),
        });
    }
    // every value finite, as the f32 path checks, without an f32 copy of the tensor
    f.check_finite(name)?;
    QLinear::from_blocks(rows, cols, info.ty, f.tensor_bytes(info).to_vec(), bias).map_err(|e| {
        ModelError::Invalid {
            what: format!("tensor {name:?}"),
            offset: f.data_offset + info.offset,
            reason: e.to_string(),
        }
    })
}

fn linear(
    f: &GgufFile,
    name: &str,
    rows: usize,
    cols: usize,
    fmt: WeightFormat,
) -> Result<QLinear> {
    let bias = match f.tensor(&format!("{name}.bias")) {
        Some(_) => Some(vector(f, &format!("{name}.bias"), rows)?),
        None => None,
    };
    matrix(f, &format!("{name}.weight"), rows, cols, fmt, bias)
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
        let fmt = opts.weights;
        let embedding = matrix(f, "token_embd.weight", c.vocab_size, c.n_embd, fmt, None)?;
        let kv = c.n_kv_heads * c.head_dim;
        let fam = c.family;
        let mut blocks = Vec::with_capacity(c.n_layers);
        for l in 0..c.n_layers {
            let p = format!("blk.{l}");
            let norm = |name: &str, len: usize, has: bool| -> Result<Option<Vec<f32>>> {
                has.then(|| vector(f, &format!("{p}.{name}.weight"), len))
                    .transpose()
            };
            blocks.push(Block {
                q_norm: norm("attn_q_norm", c.head_dim, fam.qk_norm)?,
                k_norm: norm("attn_k_norm", c.head_dim, fam.qk_norm)?,
                post_attn_norm: norm("post_attention_norm", c.n_embd, fam.post_norms)?,
                post_ffn_norm: norm("post_ffw_norm", c.n_embd, fam.post_norms)?,
                attn_norm: vector(f, &format!("{p}.attn_norm.weight"), c.n_embd)?,
                q: linear(
                    f,
                    &format!("{p}.attn_q"),
                    c.n_heads * c.head_dim,
                    c.n_embd,
                    fmt,
                )?,
                k: linear(f, &format!("{p}.attn_k"), kv, c.n_embd, fmt)?,
                v: linear(f, &format!("{p}.attn_v"), kv, c.n_embd, fmt)?,
                o: linear(
                    f,
                    &format!("{p}.attn_output"),
                    c.n_embd,
                    c.n_heads * c.head_dim,
                    fmt,
                )?,
                ffn_norm: vector(f, &format!("{p}.ffn_norm.weight"), c.n_embd)?,
                gate: linear(f, &format!("{p}.ffn_gate"), c.n_ff, c.n_embd, fmt)?,
                up: linear(f, &format!("{p}.ffn_up"), c.n_ff, c.n_embd, fmt)?,
                down: linear(f, &format!("{p}.ffn_down"), c.n_embd, c.n_ff, fmt)?,
            });
        }
        let output_norm = vector(f, "output_norm.weight", c.n_embd)?;
        let output = match f.tensor("output.weight") {
            Some(_) => Some(linear(f, "output", c.vocab_size, c.n_embd, fmt)?),
            None => None,
        };
        let rope_base = opts.rope_base.unwrap_or(c.rope_base);
        if !(rope_base.is_finite() && rope_base > 1.0) {
            return Err(ModelError::Input(format!(
                "rope base {rope_base} must be a finite number above 1"
            )));
        }
        Ok(Model {
            config,
            tokenizer,
            embedding,
            blocks,
            output_norm,
            output,
            rope_base,
            activations: opts.activations,
        })
    }

    /// RoPE of layer `l`: a sliding layer's own base, else the global base in use with the
    /// file's linear scaling.
    pub fn rope(&self, l: usize) -> Rope {
        let c = &self.config;
        let local = c.layers.get(l).and_then(|s| s.local_rope_base);
        Rope {
            base: local.unwrap_or(self.rope_base),
            dim: c.rope_dim,
            factor: if local.is_some() {
                1.0
            } else {
                c.rope_linear_factor
            },
            style: c.family.rope_style,
        }
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
