//! The loader's rule: a file whose metadata keys or tensors are not all understood is refused,
//! never run with part of its meaning ignored (llama.cpp would apply, for example, a Llama 3
//! `rope_freqs.weight` that a careless loader skips).
//!
//! Keys are checked against the lists below: what [`crate::config`] and the tokenizer read,
//! and what is known not to change the computation (names, licences, quantization notes).
//! Tensors are checked by [`crate::model`], which records every tensor it reads.

use crate::gguf::{GgufFile, Value};
use crate::{ModelError, Result};

/// Keys under `{arch}.` that this build reads.
const ARCH_KEYS: &[&str] = &[
    "context_length",
    "embedding_length",
    "block_count",
    "feed_forward_length",
    "vocab_size",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.layer_norm_rms_epsilon",
    "attention.sliding_window",
    "attention.sliding_window_pattern",
    "attn_logit_softcapping",
    "final_logit_softcapping",
    "rope.dimension_count",
    "rope.freq_base",
    "rope.freq_base_swa",
    "rope.scale_linear",
    "rope.scaling.type",
    "rope.scaling.factor",
    "rope.scaling.original_context_length",
    "rope.scaling.attn_factor",
    "rope.scaling.yarn_beta_fast",
    "rope.scaling.yarn_beta_slow",
    // whether the model was fine-tuned at the scaled context: informative only
    "rope.scaling.finetuned",
];

/// `tokenizer.ggml.` keys the tokenizer reads, or that name tokens it never inserts itself
/// (padding, fill-in-the-middle, classification).
const TOKENIZER_KEYS: &[&str] = &[
    "model",
    "pre",
    "tokens",
    "token_type",
    "token_type_count",
    "merges",
    "scores",
    "bos_token_id",
    "eos_token_id",
    "eot_token_id",
    "eom_token_id",
    "unknown_token_id",
    "padding_token_id",
    "seperator_token_id",
    "cls_token_id",
    "mask_token_id",
    "prefix_token_id",
    "suffix_token_id",
    "middle_token_id",
    "fim_pre_token_id",
    "fim_suf_token_id",
    "fim_mid_token_id",
    "fim_pad_token_id",
    "fim_rep_token_id",
    "fim_sep_token_id",
    "add_bos_token",
    "add_space_prefix",
];

/// `tokenizer.ggml.` flags this build understands only when false.
const FALSE_ONLY: &[(&str, &str)] = &[
    ("add_eos_token", "an EOS token appended to every prompt"),
    (
        "add_sep_token",
        "a separator token appended to every prompt",
    ),
];

/// Refuse the file if a metadata key may change the computation and this build does not read
/// it. `arch` is `general.architecture`.
///
/// # Errors
/// [`ModelError::NotUnderstood`] naming the first such key and what it would mean.
pub fn check_keys(f: &GgufFile, arch: &str) -> Result<()> {
    for (key, value) in f.metadata() {
        check_key(key, value, arch)?;
    }
    Ok(())
}

fn refuse(key: &str, reason: impl Into<String>) -> ModelError {
    ModelError::NotUnderstood {
        what: "metadata key",
        name: key.into(),
        reason: reason.into(),
    }
}

fn check_key(key: &str, value: &Value, arch: &str) -> Result<()> {
    let (space, rest) = key.split_once('.').unwrap_or((key, ""));
    if space == arch {
        return match ARCH_KEYS.contains(&rest) {
            true => Ok(()),
            false => Err(refuse(
                key,
                format!(
                    "a hyper-parameter of the {arch} architecture that qada does not implement"
                ),
            )),
        };
    }
    match space {
        // names, authors, licences, file type, alignment (read by the GGUF reader)
        "general" => Ok(()),
        // importance-matrix notes of the quantizer: they do not change the weights' meaning
        "quantize" => Ok(()),
        "split" => match (rest, value.as_u64()) {
            ("count", Some(n)) if n > 1 => Err(refuse(
                key,
                format!(
                    "the file is one of {n} shards; merge them first (`llama-gguf-split \
                     --merge FIRST-SHARD OUT.gguf`)"
                ),
            )),
            _ => Ok(()),
        },
        "tokenizer" => check_tokenizer_key(key, rest, value),
        _ => Err(refuse(
            key,
            format!(
                "keys under \"{space}.\" belong to no part of a {arch} decoder this build runs \
                 (an adapter, a vision tower or another architecture)"
            ),
        )),
    }
}

fn check_tokenizer_key(key: &str, rest: &str, value: &Value) -> Result<()> {
    // the chat template(s): rendered or recognized by the tokenizer; a second copy of the
    // vocabulary in HF's format
    if rest == "chat_template" || rest.starts_with("chat_template.") || rest == "huggingface.json" {
        return Ok(());
    }
    let Some(name) = rest.strip_prefix("ggml.") else {
        return Err(refuse(key, "a tokenizer setting outside tokenizer.ggml"));
    };
    if TOKENIZER_KEYS.contains(&name) {
        return Ok(());
    }
    if let Some((_, meaning)) = FALSE_ONLY.iter().find(|(k, _)| *k == name) {
        return match value.as_bool() {
            Some(false) => Ok(()),
            _ => Err(refuse(key, format!("{meaning} is not implemented"))),
        };
    }
    Err(refuse(
        key,
        "a tokenizer setting this build does not implement (token ids would differ)",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(key: &str, value: Value) -> Result<()> {
        check_key(key, &value, "llama")
    }

    #[test]
    fn known_keys_pass_and_unknown_ones_are_named() {
        assert!(check("llama.rope.freq_base", Value::F32(1e4)).is_ok());
        assert!(check("general.name", Value::String("x".into())).is_ok());
        assert!(check("quantize.imatrix.file", Value::String("x".into())).is_ok());
        assert!(check("tokenizer.chat_template", Value::String("x".into())).is_ok());
        assert!(check("tokenizer.ggml.add_eos_token", Value::Bool(false)).is_ok());
        assert!(check("split.count", Value::U16(1)).is_ok());
        for (key, value, says) in [
            ("llama.expert_count", Value::U32(8), "does not implement"),
            (
                "qwen2.rope.freq_base",
                Value::F32(1e4),
                "another architecture",
            ),
            ("clip.vision.image_size", Value::U32(224), "vision tower"),
            ("tokenizer.ggml.add_eos_token", Value::Bool(true), "EOS"),
            (
                "tokenizer.ggml.precompiled_charsmap",
                Value::U8(0),
                "token ids",
            ),
            ("split.count", Value::U16(3), "llama-gguf-split"),
        ] {
            let e = check(key, value).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains(says), "{key}: {e}");
        }
    }
}
