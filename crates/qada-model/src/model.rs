//! The Llama-family transformer as GGUF stores it, with f32 weights.
//!
//! Per layer: `x += Wo attn(rope(Wq n(x)), rope(Wk n(x)), Wv n(x))`, then
//! `x += Wd (silu(Wg n(x)) * Wu n(x))`, with `n` the layer's RMSNorm. The token embedding
//! doubles as the output head when `output.weight` is absent.

use std::path::Path;

use qada_stats::ModelSignature;

use crate::config::ModelConfig;
use crate::gguf::GgufFile;
use crate::tokenizer::Tokenizer;
use crate::{ModelError, Result};

/// A dense layer `y = W x (+ b)`, `W` row-major `rows x cols`.
#[derive(Clone, Debug)]
pub struct Linear {
    /// Output size.
    pub rows: usize,
    /// Input size.
    pub cols: usize,
    /// Weights, row-major.
    pub w: Vec<f32>,
    /// Optional bias (Qwen2's Q, K, V).
    pub bias: Option<Vec<f32>>,
}

/// Weights of one transformer block.
#[derive(Clone, Debug)]
pub struct Block {
    pub attn_norm: Vec<f32>,
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
    pub ffn_norm: Vec<f32>,
    pub gate: Linear,
    pub up: Linear,
    pub down: Linear,
}

/// A loaded model: configuration, tokenizer and weights.
pub struct Model {
    /// Hyper-parameters from the file.
    pub config: ModelConfig,
    /// The file's tokenizer.
    pub tokenizer: Tokenizer,
    /// `vocab x n_embd` token embeddings.
    pub embedding: Vec<f32>,
    /// Transformer blocks.
    pub blocks: Vec<Block>,
    /// Final RMSNorm.
    pub output_norm: Vec<f32>,
    /// Output head; `None` when tied to the embedding.
    pub output: Option<Linear>,
    /// RoPE base in use (the file's, or an override).
    pub rope_base: f64,
}

/// Options for loading.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// Replace the file's RoPE base (the paper raises it to stretch the context).
    pub rope_base: Option<f64>,
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

fn linear(f: &GgufFile, name: &str, rows: usize, cols: usize) -> Result<Linear> {
    let (dims, w) = f.tensor_f32(&format!("{name}.weight"))?;
    if dims != [cols as u64, rows as u64] {
        return Err(ModelError::TensorShape {
            name: format!("{name}.weight"),
            expected: vec![cols as u64, rows as u64],
            found: dims,
        });
    }
    let bias = match f.tensor(&format!("{name}.bias")) {
        Some(_) => Some(vector(f, &format!("{name}.bias"), rows)?),
        None => None,
    };
    Ok(Linear {
        rows,
        cols,
        w,
        bias,
    })
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
            return Err(ModelError::Invalid {
                what: "vocabulary".into(),
                offset: 0,
                reason: format!(
                    "the tokenizer has {} tokens, the model {}",
                    tokenizer.vocab_size(),
                    c.vocab_size
                ),
            });
        }
        let (embd_dims, embedding) = f.tensor_f32("token_embd.weight")?;
        if embd_dims != [c.n_embd as u64, c.vocab_size as u64] {
            return Err(ModelError::TensorShape {
                name: "token_embd.weight".into(),
                expected: vec![c.n_embd as u64, c.vocab_size as u64],
                found: embd_dims,
            });
        }
        let kv = c.n_kv_heads * c.head_dim;
        let mut blocks = Vec::with_capacity(c.n_layers);
        for l in 0..c.n_layers {
            let p = format!("blk.{l}");
            blocks.push(Block {
                attn_norm: vector(f, &format!("{p}.attn_norm.weight"), c.n_embd)?,
                q: linear(f, &format!("{p}.attn_q"), c.n_heads * c.head_dim, c.n_embd)?,
                k: linear(f, &format!("{p}.attn_k"), kv, c.n_embd)?,
                v: linear(f, &format!("{p}.attn_v"), kv, c.n_embd)?,
                o: linear(
                    f,
                    &format!("{p}.attn_output"),
                    c.n_embd,
                    c.n_heads * c.head_dim,
                )?,
                ffn_norm: vector(f, &format!("{p}.ffn_norm.weight"), c.n_embd)?,
                gate: linear(f, &format!("{p}.ffn_gate"), c.n_ff, c.n_embd)?,
                up: linear(f, &format!("{p}.ffn_up"), c.n_ff, c.n_embd)?,
                down: linear(f, &format!("{p}.ffn_down"), c.n_embd, c.n_ff)?,
            });
        }
        let output_norm = vector(f, "output_norm.weight", c.n_embd)?;
        let output = match f.tensor("output.weight") {
            Some(_) => Some(linear(f, "output", c.vocab_size, c.n_embd)?),
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
        })
    }

    /// What calibration files made for this model must match.
    pub fn signature(&self) -> ModelSignature {
        self.config.signature(self.rope_base)
    }

    /// The output head as a matrix: `output.weight`, or the embedding when tied.
    pub fn output_matrix(&self) -> (&[f32], usize, usize) {
        match &self.output {
            Some(o) => (&o.w, o.rows, o.cols),
            None => (&self.embedding, self.config.vocab_size, self.config.n_embd),
        }
    }

    /// Embedding row of a token.
    pub fn embed(&self, token: u32, out: &mut [f32]) -> Result<()> {
        let e = self.config.n_embd;
        let t = token as usize;
        if t >= self.config.vocab_size {
            return Err(ModelError::Input(format!(
                "token id {token} is past the vocabulary of {}",
                self.config.vocab_size
            )));
        }
        out.copy_from_slice(&self.embedding[t * e..(t + 1) * e]);
        Ok(())
    }
}
