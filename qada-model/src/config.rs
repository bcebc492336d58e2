//! Hyper-parameters read from GGUF metadata, keyed by the file's own architecture name.

use qada_stats::ModelSignature;

use crate::gguf::GgufFile;
use crate::{ModelError, Result};

/// Model families this build implements. The architecture is a value read from the file:
/// everything that differs between families is a field here, not a code path elsewhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Architecture {
    /// `llama` (Llama 2/3, SmolLM, Mistral-style): RoPE on interleaved pairs, no biases.
    Llama,
    /// `qwen2`: RoPE on the two halves (NeoX style), biases on Q, K, V.
    Qwen2,
}

/// How RoPE pairs the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Pairs `(2i, 2i + 1)`: GGUF llama files (the converter permutes Q and K to this).
    Interleaved,
    /// Pairs `(i, i + n/2)`: NeoX, Qwen2.
    Halves,
}

impl Architecture {
    /// Parse `general.architecture`.
    pub fn from_name(name: &str) -> Result<Self> {
        match name {
            "llama" => Ok(Architecture::Llama),
            "qwen2" => Ok(Architecture::Qwen2),
            other => Err(ModelError::UnsupportedArchitecture(other.into())),
        }
    }
    /// The name used as metadata key prefix.
    pub fn name(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Qwen2 => "qwen2",
        }
    }
    /// RoPE pairing.
    pub fn rope_style(self) -> RopeStyle {
        match self {
            Architecture::Llama => RopeStyle::Interleaved,
            Architecture::Qwen2 => RopeStyle::Halves,
        }
    }
}

/// Hyper-parameters of a decoder.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// Family.
    pub architecture: Architecture,
    /// Layers.
    pub n_layers: usize,
    /// Residual width.
    pub n_embd: usize,
    /// MLP hidden width.
    pub n_ff: usize,
    /// Query heads.
    pub n_heads: usize,
    /// KV heads (GQA groups).
    pub n_kv_heads: usize,
    /// Head dimension `d`.
    pub head_dim: usize,
    /// Dimensions rotated by RoPE (the first `rope_dim` of each head).
    pub rope_dim: usize,
    /// RoPE frequency base.
    pub rope_base: f64,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// Longest context the model was trained for.
    pub context_length: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
}

const MAX_DIM: u64 = 1 << 20;

/// A hyper-parameter `key` whose value `found` breaks the rule `must`.
fn bad(key: String, found: impl std::fmt::Display, must: String) -> ModelError {
    ModelError::BadMetadata {
        key,
        found: found.to_string(),
        reason: format!("{must} (the file is damaged or not a decoder model)"),
    }
}

impl ModelConfig {
    /// Read every hyper-parameter from the file.
    ///
    /// # Errors
    /// [`ModelError::BadMetadata`] naming the key (both keys when two disagree) for a value no
    /// decoder can have; missing keys and wrong types as [`GgufFile`] reports them.
    pub fn from_gguf(f: &GgufFile) -> Result<Self> {
        let architecture = Architecture::from_name(f.get_str("general.architecture")?)?;
        let a = architecture.name();
        let get = |k: &str| -> Result<usize> {
            let key = format!("{a}.{k}");
            let v = f.get_u64(&key)?;
            if v == 0 || v > MAX_DIM {
                return Err(bad(key, v, format!("must be in 1..={MAX_DIM}")));
            }
            Ok(v as usize)
        };
        let n_embd = get("embedding_length")?;
        let n_heads = get("attention.head_count")?;
        let n_kv_heads = match f.get(&format!("{a}.attention.head_count_kv")) {
            Some(_) => get("attention.head_count_kv")?,
            None => n_heads,
        };
        if n_embd % n_heads != 0 {
            return Err(bad(
                format!("{a}.embedding_length and {a}.attention.head_count"),
                format!("{n_embd} and {n_heads}"),
                "the width must be a multiple of the head count".into(),
            ));
        }
        if n_heads % n_kv_heads != 0 {
            return Err(bad(
                format!("{a}.attention.head_count and {a}.attention.head_count_kv"),
                format!("{n_heads} and {n_kv_heads}"),
                "the head count must be a multiple of the KV head count".into(),
            ));
        }
        let head_dim = n_embd / n_heads;
        let rope_dim = match f.get(&format!("{a}.rope.dimension_count")) {
            Some(_) => get("rope.dimension_count")?,
            None => head_dim,
        };
        if rope_dim > head_dim || rope_dim % 2 != 0 {
            return Err(bad(
                format!("{a}.rope.dimension_count"),
                rope_dim,
                format!("must be even and at most the head dimension {head_dim}"),
            ));
        }
        let rope_base = match f.get(&format!("{a}.rope.freq_base")) {
            Some(_) => f.get_f64(&format!("{a}.rope.freq_base"))?,
            None => 10_000.0,
        };
        if !(rope_base.is_finite() && rope_base > 1.0) {
            return Err(bad(
                format!("{a}.rope.freq_base"),
                rope_base,
                "must be a finite number above 1".into(),
            ));
        }
        let eps_key = format!("{a}.attention.layer_norm_rms_epsilon");
        let rms_eps = f.get_f64(&eps_key)? as f32;
        if !(rms_eps.is_finite() && rms_eps > 0.0) {
            return Err(bad(
                eps_key,
                rms_eps,
                "must be a finite number above 0".into(),
            ));
        }
        let vocab_size = match f.get(&format!("{a}.vocab_size")) {
            Some(_) => get("vocab_size")?,
            None => f.get_array("tokenizer.ggml.tokens")?.len(),
        };
        Ok(ModelConfig {
            architecture,
            n_layers: get("block_count")?,
            n_embd,
            n_ff: get("feed_forward_length")?,
            n_heads,
            n_kv_heads,
            head_dim,
            rope_dim,
            rope_base,
            rms_eps,
            context_length: get("context_length")?,
            vocab_size,
        })
    }

    /// What a calibration file must match, with the RoPE base in use.
    pub fn signature(&self, rope_base: f64) -> ModelSignature {
        ModelSignature {
            architecture: self.architecture.name().into(),
            n_layers: self.n_layers as u32,
            n_kv_heads: self.n_kv_heads as u32,
            head_dim: self.head_dim as u32,
            rope_base,
        }
    }
}
