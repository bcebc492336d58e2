//! What model a calibration file belongs to.

use crate::codec::{Decoder, Encoder};
use crate::{Result, StatsError};

/// The facts about a model that decide whether a calibration file fits it.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelSignature {
    /// `general.architecture` of the GGUF file, e.g. `llama`.
    pub architecture: String,
    /// Number of transformer layers.
    pub n_layers: u32,
    /// Number of key/value heads per layer.
    pub n_kv_heads: u32,
    /// Length of one key (head dimension).
    pub head_dim: u32,
    /// RoPE frequency base actually used (keys depend on it).
    pub rope_base: f64,
}

impl ModelSignature {
    /// Return an error naming the first field in which `self` (read from a file) differs from
    /// `expected` (the model in use).
    pub fn check_matches(&self, expected: &ModelSignature) -> Result<()> {
        let mismatch = |field: &'static str, found: String, expected: String| {
            Err(StatsError::ModelMismatch {
                field,
                found,
                expected,
            })
        };
        if self.architecture != expected.architecture {
            return mismatch(
                "architecture",
                self.architecture.clone(),
                expected.architecture.clone(),
            );
        }
        if self.n_layers != expected.n_layers {
            return mismatch(
                "layer count",
                self.n_layers.to_string(),
                expected.n_layers.to_string(),
            );
        }
        if self.n_kv_heads != expected.n_kv_heads {
            return mismatch(
                "KV head count",
                self.n_kv_heads.to_string(),
                expected.n_kv_heads.to_string(),
            );
        }
        if self.head_dim != expected.head_dim {
            return mismatch(
                "head dimension",
                self.head_dim.to_string(),
                expected.head_dim.to_string(),
            );
        }
        if self.rope_base.to_bits() != expected.rope_base.to_bits() {
            return mismatch(
                "rope base",
                self.rope_base.to_string(),
                expected.rope_base.to_string(),
            );
        }
        Ok(())
    }

    /// Append to an encoder.
    pub fn encode(&self, enc: &mut Encoder) {
        enc.str(&self.architecture);
        enc.u32(self.n_layers);
        enc.u32(self.n_kv_heads);
        enc.u32(self.head_dim);
        enc.f64(self.rope_base);
    }

    /// Read back what [`ModelSignature::encode`] wrote.
    pub fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(ModelSignature {
            architecture: dec.str("architecture", 256)?,
            n_layers: dec.u32("layer count")?,
            n_kv_heads: dec.u32("KV head count")?,
            head_dim: dec.u32("head dimension")?,
            rope_base: dec.f64("rope base")?,
        })
    }
}
