//! Hyper-parameters read from GGUF metadata, keyed by the file's own architecture name, and
//! the per-layer description the transformer block follows.

use qada_kv::LayerSpan;
use qada_stats::ModelSignature;

use crate::family::Family;
use crate::gguf::{GgufFile, Value};
use crate::rope_scaling::{yarn_mscale, RopeScaling};
use crate::{ModelError, Result};

/// What one layer does differently from the others.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerSpec {
    /// Whole context, or the last `W` tokens (Gemma 3's local layers).
    pub span: LayerSpan,
    /// RoPE base of a sliding layer; `None`: the model's (global) base, which a load option
    /// may override.
    pub local_rope_base: Option<f64>,
    /// False on a layer without RoPE (SmolLM3's NoPE layers).
    pub rotary: bool,
}

impl LayerSpec {
    /// True for a layer whose queries see the whole context: the layers the criterion
    /// decides on.
    pub fn is_global(&self) -> bool {
        self.span == LayerSpan::Full
    }
}

/// Hyper-parameters of a decoder.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// Family: the row of [`crate::family::FAMILIES`] named by `general.architecture`.
    pub family: &'static Family,
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
    /// Head dimension `d`: `{arch}.attention.key_length`, else `n_embd / n_heads`.
    pub head_dim: usize,
    /// Dimensions rotated by RoPE (the first `rope_dim` of each head).
    pub rope_dim: usize,
    /// RoPE frequency base of the global layers.
    pub rope_base: f64,
    /// RoPE scaling of the global layers named by the metadata (`None`, `Linear` or `Yarn`;
    /// per-pair factors are tensors, which [`crate::Model`] reads).
    pub rope_scaling: RopeScaling,
    /// `{arch}.rope.scaling.original_context_length`: the context before extension.
    pub rope_original_context: Option<usize>,
    /// `{arch}.rope.scaling.attn_factor`: a factor on cos and sin (longrope).
    pub rope_attn_factor: Option<f64>,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// Longest context the model was trained for.
    pub context_length: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Factor on `q . k` before the softmax.
    pub attention_scale: f32,
    /// Factor on token embeddings before the first layer (1 for most families).
    pub embedding_scale: f32,
    /// `{arch}.attn_logit_softcapping`: scores become `cap tanh(s / cap)` (Gemma 2).
    pub attn_softcap: Option<f32>,
    /// `{arch}.final_logit_softcapping`: logits become `cap tanh(z / cap)` (Gemma 2).
    pub final_softcap: Option<f32>,
    /// One entry per layer.
    pub layers: Vec<LayerSpec>,
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

/// Metadata of one file under one family's key prefix.
struct Meta<'f> {
    f: &'f GgufFile,
    family: &'static Family,
}

impl Meta<'_> {
    fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.family.name)
    }
    fn has(&self, k: &str) -> bool {
        self.f.get(&self.key(k)).is_some()
    }
    /// A size in `1..=MAX_DIM`.
    fn dim(&self, k: &str) -> Result<usize> {
        let key = self.key(k);
        let v = self.f.get_u64(&key)?;
        if v == 0 || v > MAX_DIM {
            return Err(bad(key, v, format!("must be in 1..={MAX_DIM}")));
        }
        Ok(v as usize)
    }
    fn dim_or(&self, k: &str, default: usize) -> Result<usize> {
        Ok(self.dim_opt(k)?.unwrap_or(default))
    }
    /// [`Meta::dim`], or `None` when absent.
    fn dim_opt(&self, k: &str) -> Result<Option<usize>> {
        self.has(k).then(|| self.dim(k)).transpose()
    }
    /// [`Meta::number_or`] without a default: `None` when absent.
    fn number_opt(&self, k: &str, min: f64) -> Result<Option<f64>> {
        self.has(k).then(|| self.number_or(k, 0.0, min)).transpose()
    }
    /// A finite number above `min`, or `default` when absent.
    fn number_or(&self, k: &str, default: f64, min: f64) -> Result<f64> {
        if !self.has(k) {
            return Ok(default);
        }
        let key = self.key(k);
        let v = self.f.get_f64(&key)?;
        if !(v.is_finite() && v > min) {
            return Err(bad(key, v, format!("must be a finite number above {min}")));
        }
        Ok(v)
    }
}

impl ModelConfig {
    /// Read every hyper-parameter from the file.
    ///
    /// # Errors
    /// [`ModelError::UnsupportedArchitecture`] for a family not in
    /// [`crate::family::FAMILIES`]; [`ModelError::BadMetadata`] naming the key (both keys when
    /// two disagree) for a value no decoder can have, and for RoPE scaling this build does not
    /// implement; missing keys and wrong types as [`GgufFile`] reports them.
    pub fn from_gguf(f: &GgufFile) -> Result<Self> {
        let arch = f.get_str("general.architecture")?;
        let family = Family::by_name(arch).ok_or_else(|| ModelError::UnsupportedArchitecture {
            name: arch.into(),
            supported: Family::names(),
        })?;
        let m = Meta { f, family };
        let a = family.name;
        let n_layers = m.dim("block_count")?;
        let n_embd = m.dim("embedding_length")?;
        let n_heads = m.dim("attention.head_count")?;
        let n_kv_heads = m.dim_or("attention.head_count_kv", n_heads)?;
        if n_heads % n_kv_heads != 0 {
            return Err(bad(
                format!("{a}.attention.head_count and {a}.attention.head_count_kv"),
                format!("{n_heads} and {n_kv_heads}"),
                "the head count must be a multiple of the KV head count".into(),
            ));
        }
        let head_dim = if m.has("attention.key_length") {
            m.dim("attention.key_length")?
        } else {
            if n_embd % n_heads != 0 {
                return Err(bad(
                    format!("{a}.embedding_length and {a}.attention.head_count"),
                    format!("{n_embd} and {n_heads}"),
                    "without attention.key_length the width must be a multiple of the head \
                     count"
                        .into(),
                ));
            }
            n_embd / n_heads
        };
        if (n_heads * head_dim) as u64 > MAX_DIM {
            return Err(bad(
                format!("{a}.attention.head_count and the head dimension"),
                format!("{n_heads} x {head_dim}"),
                format!("query width must be at most {MAX_DIM}"),
            ));
        }
        let value_length = m.dim_or("attention.value_length", head_dim)?;
        if value_length != head_dim {
            return Err(bad(
                format!("{a}.attention.value_length"),
                value_length,
                format!("must equal the key length {head_dim} (qada caches keys and values of one width)"),
            ));
        }
        let rope_dim = m.dim_or("rope.dimension_count", head_dim)?;
        if rope_dim > head_dim || rope_dim % 2 != 0 {
            return Err(bad(
                format!("{a}.rope.dimension_count"),
                rope_dim,
                format!("must be even and at most the head dimension {head_dim}"),
            ));
        }
        let rope_base = m.number_or("rope.freq_base", 10_000.0, 1.0)?;
        let rope_original_context = m.dim_opt("rope.scaling.original_context_length")?;
        let rope_scaling = rope_scaling(&m, rope_original_context)?;
        let rope_attn_factor = m.number_opt("rope.scaling.attn_factor", 0.0)?;
        let softcap = |k: &str| Ok::<_, ModelError>(m.number_opt(k, 0.0)?.map(|c| c as f32));
        let (attn_softcap, final_softcap) = (
            softcap("attn_logit_softcapping")?,
            softcap("final_logit_softcapping")?,
        );
        let eps_key = m.key("attention.layer_norm_rms_epsilon");
        let rms_eps = f.get_f64(&eps_key)? as f32;
        if !(rms_eps.is_finite() && rms_eps > 0.0) {
            return Err(bad(
                eps_key,
                rms_eps,
                "must be a finite number above 0".into(),
            ));
        }
        let vocab_size = match m.has("vocab_size") {
            true => m.dim("vocab_size")?,
            false => f.get_array("tokenizer.ggml.tokens")?.len(),
        };
        let context_length = m.dim("context_length")?;
        let layers = layer_specs(&m, n_layers, context_length)?;
        let attention_scale = family
            .query_scale
            .factor(n_layers, head_dim, n_embd / n_heads);
        Ok(ModelConfig {
            family,
            n_layers,
            n_embd,
            n_ff: m.dim("feed_forward_length")?,
            n_heads,
            n_kv_heads,
            head_dim,
            rope_dim,
            rope_base,
            rope_scaling,
            rope_original_context,
            rope_attn_factor,
            rms_eps,
            context_length,
            vocab_size,
            attention_scale,
            embedding_scale: if family.scale_embedding {
                (n_embd as f32).sqrt()
            } else {
                1.0
            },
            attn_softcap,
            final_softcap,
            layers,
        })
    }

    /// Indices of the layers whose queries see the whole context.
    pub fn global_layers(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.n_layers).filter(|&l| self.layers[l].is_global())
    }

    /// Tokens a sliding layer sees (`{arch}.attention.sliding_window`), when the model has
    /// sliding layers.
    pub fn sliding_window(&self) -> Option<usize> {
        self.layers.iter().find_map(|l| l.span.window())
    }

    /// Every layer's span, as the cache takes them.
    pub fn spans(&self) -> Vec<LayerSpan> {
        self.layers.iter().map(|l| l.span).collect()
    }

    /// What a calibration file must match, with the RoPE base in use.
    pub fn signature(&self, rope_base: f64) -> ModelSignature {
        ModelSignature {
            architecture: self.family.name.into(),
            n_layers: self.n_layers as u32,
            n_kv_heads: self.n_kv_heads as u32,
            head_dim: self.head_dim as u32,
            rope_base,
        }
    }
}

/// `{arch}.rope.scaling.type` and its parameters: linear and YaRN are implemented; any other
/// type is refused, never ignored. (Longrope has no type key: its factors are tensors.)
fn rope_scaling(m: &Meta<'_>, original_context: Option<usize>) -> Result<RopeScaling> {
    let kind = match m.has("rope.scaling.type") {
        true => m.f.get_str(&m.key("rope.scaling.type"))?.to_string(),
        false if m.has("rope.scale_linear") => "linear".into(),
        false => "none".into(),
    };
    match kind.as_str() {
        "none" => Ok(RopeScaling::None),
        "linear" => {
            let key = if m.has("rope.scaling.factor") {
                "rope.scaling.factor"
            } else {
                "rope.scale_linear"
            };
            Ok(RopeScaling::Linear {
                factor: m.number_or(key, 1.0, 0.0)?,
            })
        }
        "yarn" => {
            let factor = m.number_or("rope.scaling.factor", 1.0, 0.0)?;
            let Some(original) = original_context else {
                return Err(ModelError::MissingKey(
                    m.key("rope.scaling.original_context_length"),
                ));
            };
            Ok(RopeScaling::Yarn {
                factor,
                original_context: original as f64,
                beta_fast: m.number_or("rope.scaling.yarn_beta_fast", 32.0, 0.0)?,
                beta_slow: m.number_or("rope.scaling.yarn_beta_slow", 1.0, 0.0)?,
                // times the file's rope.scaling.attn_factor, which the model applies to
                // every kind of scaling
                mscale: yarn_mscale(factor),
            })
        }
        other => Err(bad(
            m.key("rope.scaling.type"),
            format!("{other:?}"),
            "RoPE scaling other than \"linear\" and \"yarn\" is not implemented; running \
             without it would give wrong results past the original context"
                .into(),
        )),
    }
}

/// The per-layer description: spans from `{arch}.attention.sliding_window` (0: none) and the
/// family's pattern (or the file's `{arch}.attention.sliding_window_pattern`), RoPE bases of
/// the sliding layers, the family's NoPE layers.
fn layer_specs(m: &Meta<'_>, n_layers: usize, context_length: usize) -> Result<Vec<LayerSpec>> {
    let family = m.family;
    let rotary = |l: usize| !nth_layer(family.nope_every, l);
    let global = |l: usize| LayerSpec {
        span: LayerSpan::Full,
        local_rope_base: None,
        rotary: rotary(l),
    };
    let key = m.key("attention.sliding_window");
    let window = match m.has("attention.sliding_window") {
        true => m.f.get_u64(&key)?,
        false => 0,
    };
    if window == 0 {
        return Ok((0..n_layers).map(global).collect());
    }
    let Some(sliding) = family.sliding else {
        return Err(bad(
            key,
            window,
            format!(
                "the {} family has no sliding-window layers in this build",
                family.name
            ),
        ));
    };
    let window = m.dim("attention.sliding_window")?;
    if window > context_length {
        return Err(bad(
            key,
            window,
            format!("must be at most the context length {context_length}"),
        ));
    }
    let local_base = m
        .number_opt("rope.freq_base_swa", 1.0)?
        .or(sliding.local_rope_base);
    let pattern_key = m.key("attention.sliding_window_pattern");
    // sliding: every layer but the `n`-th ones (all of them without an `n`)
    let every = |n: Option<usize>| -> Vec<bool> {
        (0..n_layers)
            .map(|l| n.is_none_or(|_| !nth_layer(n, l)))
            .collect()
    };
    let sliding_layer: Vec<bool> = match m.f.get(&pattern_key) {
        None => every(sliding.global_every),
        Some(Value::Array(_, items)) => {
            if items.len() != n_layers {
                return Err(bad(
                    pattern_key,
                    format!("{} entries", items.len()),
                    format!("must have one entry per layer ({n_layers})"),
                ));
            }
            items
                .iter()
                .map(|v| match v {
                    Value::Bool(b) => Ok(*b),
                    other => Err(bad(
                        pattern_key.clone(),
                        format!("{other:?}"),
                        "entries must be booleans (true: sliding layer)".into(),
                    )),
                })
                .collect::<Result<_>>()?
        }
        Some(_) => every(Some(m.dim("attention.sliding_window_pattern")?)),
    };
    Ok(sliding_layer
        .into_iter()
        .enumerate()
        .map(|(l, s)| match s {
            true => LayerSpec {
                span: LayerSpan::Sliding(window),
                local_rope_base: local_base,
                rotary: rotary(l),
            },
            false => global(l),
        })
        .collect())
}

/// True for layer `l` when it is an `n`-th one (`(l + 1) % n == 0`); false for every layer
/// without an `n`.
fn nth_layer(n: Option<usize>, l: usize) -> bool {
    n.is_some_and(|n| (l + 1).is_multiple_of(n))
}
