//! Model families as values: everything that differs between Llama, Qwen2/3, Phi-3, SmolLM3
//! and Gemma 2/3 is a field of [`Family`], and [`FAMILIES`] is the one table that lists them.
//! What a file states itself (biases, fused matrices, RoPE scaling, soft-capping) is read from
//! the file, not from the row.
//!
//! Adding a family is adding a row to [`FAMILIES`] (and, only for a behaviour no family has
//! yet, a variant of one of the enums below): the loader, the transformer block and the
//! tokenizer read the row, they do not match on names.
//!
//! The tokenizer reads only [`Family::chat`] from here; its vocabulary comes from the file.
//!
//! Where a GGUF file is silent about a value, the row holds the family's published default
//! and says where it comes from.

use crate::tokenizer::chat::ChatFormat;

/// How RoPE pairs the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Pairs `(2i, 2i + 1)`: GGUF llama files (the converter permutes Q and K to this).
    Interleaved,
    /// Pairs `(i, i + n/2)`: NeoX, Qwen2, Gemma.
    Halves,
}

/// The gated feed-forward activation: `act(W_gate x) * (W_up x)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// `silu(g) = g / (1 + e^-g)` (SwiGLU).
    SiLU,
    /// `gelu_tanh(g) = g/2 (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))` (GeGLU, Gemma).
    GeluTanh,
}

/// The factor on `q . k` before the softmax.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryScale {
    /// `1 / sqrt(d)`, `d` the head dimension (`key_length`).
    InvSqrtHeadDim,
    /// Gemma 2 and 3's `query_pre_attn_scalar^-1/2`, which GGUF does not store: the published
    /// configurations set the scalar to the head dimension, except the largest model of each
    /// generation, which uses `n_embd / n_heads` and is the only one with `layers` layers
    /// (Gemma 2 27B: 46, Gemma 3 27B: 62; llama.cpp keys on the same fact).
    HeadDimExceptAt {
        /// The layer count of the model that uses `n_embd / n_heads`.
        layers: usize,
    },
}

impl QueryScale {
    /// The factor for a model of `n_layers` layers, head dimension `head_dim`, `n_embd / n_heads`
    /// = `width_per_head`.
    pub fn factor(self, n_layers: usize, head_dim: usize, width_per_head: usize) -> f32 {
        let d = match self {
            QueryScale::HeadDimExceptAt { layers } if n_layers == layers => width_per_head,
            _ => head_dim,
        };
        1.0 / (d as f32).sqrt()
    }
}

/// Which layers attend to a sliding window when the file sets
/// `{arch}.attention.sliding_window`, and how their RoPE differs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlidingLayers {
    /// Every `n`-th layer (`(l + 1) % n == 0`) attends to the whole context and the others to
    /// the window; `None`: every layer slides (Mistral). Used when the file has no
    /// `{arch}.attention.sliding_window_pattern`.
    pub global_every: Option<usize>,
    /// RoPE base of the sliding layers when the file has no `{arch}.rope.freq_base_swa`;
    /// `None`: the file's `{arch}.rope.freq_base`, without its scaling.
    pub local_rope_base: Option<f64>,
}

/// One transformer family: a value, read from `general.architecture`.
#[derive(Debug, PartialEq)]
pub struct Family {
    /// `general.architecture` and the metadata key prefix.
    pub name: &'static str,
    /// RoPE pairing.
    pub rope_style: RopeStyle,
    /// Gated feed-forward activation.
    pub activation: Activation,
    /// Per-head RMSNorm of queries and keys before RoPE (`attn_q_norm`, `attn_k_norm`).
    pub qk_norm: bool,
    /// RMSNorm of the attention output and of the feed-forward output before each is added to
    /// the residual stream (`post_attention_norm`, `post_ffw_norm`).
    pub post_norms: bool,
    /// Token embeddings multiplied by `sqrt(n_embd)` before the first layer.
    pub scale_embedding: bool,
    /// Attention score scale.
    pub query_scale: QueryScale,
    /// Sliding-window layers, when the family has them.
    pub sliding: Option<SlidingLayers>,
    /// Every `n`-th layer (`(l + 1) % n == 0`) has no RoPE (SmolLM3's NoPE layers: HF's
    /// `no_rope_layer_interval`, which GGUF does not store and llama.cpp also fixes at 4).
    pub nope_every: Option<usize>,
    /// The family's published chat layout, for files that carry no template.
    pub chat: Option<ChatFormat>,
}

/// Llama 2/3, SmolLM, Mistral: interleaved RoPE, SwiGLU, no extra norms; a sliding window,
/// where the file sets one, on every layer (Mistral 7B v0.1).
pub const LLAMA: Family = Family {
    name: "llama",
    rope_style: RopeStyle::Interleaved,
    activation: Activation::SiLU,
    qk_norm: false,
    post_norms: false,
    scale_embedding: false,
    query_scale: QueryScale::InvSqrtHeadDim,
    sliding: Some(SlidingLayers {
        global_every: None,
        local_rope_base: None,
    }),
    nope_every: None,
    chat: None,
};

/// Qwen2 / Qwen2.5: NeoX RoPE and biases on Q, K, V (read from the file's `.bias` tensors).
pub const QWEN2: Family = Family {
    name: "qwen2",
    rope_style: RopeStyle::Halves,
    sliding: None,
    ..LLAMA
};

/// Qwen3: Qwen2 with QK-norm and without the Q, K, V biases.
pub const QWEN3: Family = Family {
    name: "qwen3",
    qk_norm: true,
    ..QWEN2
};

/// Phi-3 / Phi-4-mini: NeoX RoPE over part of each head (`rope.dimension_count`), Q, K, V in
/// one `attn_qkv` and gate and up in one `ffn_up` (the loader splits them), longrope factors
/// where the file has them; a window on every layer where the file sets one above 0.
pub const PHI3: Family = Family {
    name: "phi3",
    rope_style: RopeStyle::Halves,
    ..LLAMA
};

/// SmolLM3: Llama with no RoPE on every fourth layer.
pub const SMOLLM3: Family = Family {
    name: "smollm3",
    sliding: None,
    nope_every: Some(4),
    ..LLAMA
};

/// Gemma 2: Gemma 3 without QK-norm, sliding and global layers alternating (both with the
/// file's RoPE base), scores and logits soft-capped (the file's `attn_logit_softcapping` and
/// `final_logit_softcapping`).
pub const GEMMA2: Family = Family {
    name: "gemma2",
    qk_norm: false,
    query_scale: QueryScale::HeadDimExceptAt { layers: 46 },
    sliding: Some(SlidingLayers {
        global_every: Some(2),
        local_rope_base: None,
    }),
    ..GEMMA3
};

/// Gemma 3 (text): QK-norm, post-norms, GeGLU, scaled embeddings, 5 sliding layers to each
/// global one, Gemma's `<start_of_turn>` chat turns (its GGUF files carry no template). `global_every` and `local_rope_base` are the published configuration's
/// `sliding_window_pattern = 6` and `rope_local_base_freq = 10000` (the GGUF files converted
/// by llama.cpp store neither).
pub const GEMMA3: Family = Family {
    name: "gemma3",
    rope_style: RopeStyle::Halves,
    activation: Activation::GeluTanh,
    qk_norm: true,
    post_norms: true,
    scale_embedding: true,
    query_scale: QueryScale::HeadDimExceptAt { layers: 62 },
    sliding: Some(SlidingLayers {
        global_every: Some(6),
        local_rope_base: Some(10_000.0),
    }),
    nope_every: None,
    chat: Some(ChatFormat::Gemma),
};

/// Every family this build runs.
pub const FAMILIES: [&Family; 7] = [&LLAMA, &QWEN2, &QWEN3, &PHI3, &SMOLLM3, &GEMMA2, &GEMMA3];

impl Family {
    /// The row for `general.architecture`, or `None`.
    pub fn by_name(name: &str) -> Option<&'static Family> {
        FAMILIES.iter().copied().find(|f| f.name == name)
    }

    /// Names of every family, for error messages.
    pub fn names() -> String {
        FAMILIES.map(|f| f.name).join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_found_by_its_name_and_names_are_unique() {
        for f in FAMILIES {
            assert_eq!(Family::by_name(f.name), Some(f));
        }
        assert_eq!(Family::by_name("mamba"), None);
        assert_eq!(
            Family::names(),
            "llama, qwen2, qwen3, phi3, smollm3, gemma2, gemma3"
        );
    }
}
