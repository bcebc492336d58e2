//! Tiny synthetic models of every family of [`FAMILIES`] (random f32 weights written to a GGUF
//! file in memory, the tensors each row asks for, split or fused): the one transformer block
//! gives the same logits whether a prompt is prefilled at once or decoded token by token; a
//! sliding-window layer sees exactly its last `W` tokens; the tensors a family needs are
//! required and checked against the metadata; a tensor or key the loader does not read is
//! refused by name.

use proptest::prelude::*;
use qada_core::Dense;
use qada_kv::WindowConfig;
use qada_model::family::{Family, FAMILIES, GEMMA3, LLAMA, QWEN2, QWEN3};
use qada_model::gguf::writer::GgufWriter;
use qada_model::gguf::{GgufFile, Value, ValueType};
use qada_model::{LoadOptions, Model, ModelError, Session, SessionOptions};

const VOCAB: usize = 16;
const EMBD: usize = 8;
const FF: usize = 12;
const HEADS: usize = 2;
const HEAD_DIM: usize = 4;

/// Deterministic pseudo-random weights in [-scale, scale].
fn weights(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// How a tiny file departs from a well-formed one.
#[derive(Clone, Copy, PartialEq)]
enum Edit<'a> {
    None,
    /// This tensor is left out.
    Skip(&'a str),
    /// This tensor is written one value short.
    Short(&'a str),
    /// An extra tensor of this name is written (3 values: not a RoPE factor per pair).
    Extra(&'a str),
}

/// A tiny model of `family` with `layers` layers, the tensors its row asks for; `sliding` adds
/// a sliding window of that many tokens with the given per-layer pattern (true: sliding). Odd
/// seeds fuse Q, K, V into `attn_qkv` and gate and up into `ffn_up` (Phi-3's layout); seeds
/// divisible by 3 add Q, K, V biases, seeds divisible by 5 soft caps on scores and logits.
fn tiny(
    family: &Family,
    layers: usize,
    sliding: Option<(usize, Vec<bool>)>,
    seed: u64,
    edit: Edit<'_>,
) -> GgufFile {
    let arch = family.name;
    let key = |k: &str| format!("{arch}.{k}");
    let mut w = GgufWriter::new();
    w.meta("general.architecture", Value::String(arch.into()))
        .meta(&key("block_count"), Value::U32(layers as u32))
        .meta(&key("context_length"), Value::U32(64))
        .meta(&key("embedding_length"), Value::U32(EMBD as u32))
        .meta(&key("feed_forward_length"), Value::U32(FF as u32))
        .meta(&key("attention.head_count"), Value::U32(HEADS as u32))
        .meta(&key("attention.head_count_kv"), Value::U32(1))
        .meta(&key("attention.key_length"), Value::U32(HEAD_DIM as u32))
        .meta(&key("attention.layer_norm_rms_epsilon"), Value::F32(1e-6))
        .meta("tokenizer.ggml.model", Value::String("gpt2".into()))
        .meta(
            "tokenizer.ggml.tokens",
            Value::Array(
                ValueType::String,
                (0..VOCAB)
                    .map(|i| Value::String(((b'a' + i as u8) as char).to_string()))
                    .collect(),
            ),
        )
        .meta(
            "tokenizer.ggml.merges",
            Value::Array(ValueType::String, vec![]),
        );
    if seed.is_multiple_of(5) {
        // Gemma 2's soft caps, read for any family
        w.meta(&key("attn_logit_softcapping"), Value::F32(0.8));
        w.meta(&key("final_logit_softcapping"), Value::F32(2.0));
    }
    if let Some((window, pattern)) = &sliding {
        w.meta(&key("attention.sliding_window"), Value::U32(*window as u32));
        w.meta(
            &key("attention.sliding_window_pattern"),
            Value::Array(
                ValueType::Bool,
                pattern.iter().map(|&b| Value::Bool(b)).collect(),
            ),
        );
    }
    let mut n = 0u64;
    let mut put = |w: &mut GgufWriter, name: &str, dims: &[u64], scale: f32, offset: f32| {
        if edit == Edit::Skip(name) {
            return;
        }
        n += 1;
        let len: u64 = dims.iter().product();
        let mut v = weights(len as usize, seed * 1000 + n, scale);
        v.iter_mut().for_each(|x| *x += offset);
        if edit == Edit::Short(name) {
            v.pop();
            w.tensor_f32(name, &[len - 1], &v);
        } else {
            w.tensor_f32(name, dims, &v);
        }
    };
    let (fused, biases) = (!seed.is_multiple_of(2), seed.is_multiple_of(3));
    let (e, f, q, kv) = (
        EMBD as u64,
        FF as u64,
        (HEADS * HEAD_DIM) as u64,
        HEAD_DIM as u64,
    );
    put(&mut w, "token_embd.weight", &[e, VOCAB as u64], 1.0, 0.0);
    put(&mut w, "output_norm.weight", &[e], 0.1, 1.0);
    for l in 0..layers {
        let p = |t: &str| format!("blk.{l}.{t}");
        put(&mut w, &p("attn_norm.weight"), &[e], 0.1, 1.0);
        if fused {
            put(&mut w, &p("attn_qkv.weight"), &[e, q + 2 * kv], 0.5, 0.0);
        } else {
            put(&mut w, &p("attn_q.weight"), &[e, q], 0.5, 0.0);
            put(&mut w, &p("attn_k.weight"), &[e, kv], 0.5, 0.0);
            put(&mut w, &p("attn_v.weight"), &[e, kv], 0.5, 0.0);
        }
        put(&mut w, &p("attn_output.weight"), &[q, e], 0.5, 0.0);
        put(&mut w, &p("ffn_norm.weight"), &[e], 0.1, 1.0);
        if fused {
            put(&mut w, &p("ffn_up.weight"), &[e, 2 * f], 0.5, 0.0);
        } else {
            put(&mut w, &p("ffn_gate.weight"), &[e, f], 0.5, 0.0);
            put(&mut w, &p("ffn_up.weight"), &[e, f], 0.5, 0.0);
        }
        put(&mut w, &p("ffn_down.weight"), &[f, e], 0.5, 0.0);
        if biases && fused {
            put(&mut w, &p("attn_qkv.bias"), &[q + 2 * kv], 0.3, 0.0);
        } else if biases {
            put(&mut w, &p("attn_q.bias"), &[q], 0.3, 0.0);
            put(&mut w, &p("attn_k.bias"), &[kv], 0.3, 0.0);
            put(&mut w, &p("attn_v.bias"), &[kv], 0.3, 0.0);
        }
        if family.qk_norm {
            put(&mut w, &p("attn_q_norm.weight"), &[kv], 0.1, 1.0);
            put(&mut w, &p("attn_k_norm.weight"), &[kv], 0.1, 1.0);
        }
        if family.post_norms {
            put(&mut w, &p("post_attention_norm.weight"), &[e], 0.1, 1.0);
            put(&mut w, &p("post_ffw_norm.weight"), &[e], 0.1, 1.0);
        }
    }
    if let Edit::Extra(name) = edit {
        put(&mut w, name, &[3], 1.0, 0.0);
    }
    GgufFile::parse(w.to_bytes()).unwrap()
}

fn load(f: &GgufFile) -> Model {
    Model::from_gguf(f, &LoadOptions::default()).unwrap()
}

/// The error loading `f` gives (the test fails if it loads).
fn refused(f: &GgufFile) -> ModelError {
    Model::from_gguf(f, &LoadOptions::default())
        .err()
        .expect("the file must be refused")
}

fn session(m: &Model) -> Session<'_> {
    let window = WindowConfig::new(1, 2).unwrap();
    Session::new(m, SessionOptions::new(Box::new(Dense), window)).unwrap()
}

/// Logits after `tokens`, prefilling the first `split` and decoding the rest.
fn logits(m: &Model, tokens: &[u32], split: usize) -> Vec<f32> {
    let mut s = session(m);
    let mut out = s
        .prefill(&tokens[..split], &mut |_, _| {})
        .unwrap()
        .to_vec();
    for &t in &tokens[split..] {
        out = s.step(t).unwrap().to_vec();
    }
    out
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Prefill (a block of rows through `matmul_rows`, the causal and sliding masks of
    /// prefill) and decoding (one row through `matvec`, the cache's window) are one block.
    #[test]
    fn prefill_and_decoding_give_the_same_logits_in_every_family(
        family in 0usize..FAMILIES.len(),
        seed in 1u64..1000,
        tokens in proptest::collection::vec(0u32..VOCAB as u32, 2..14),
        split_frac in 0.0f64..1.0,
    ) {
        let family = FAMILIES[family];
        let sliding = family.sliding.map(|_| (3, vec![true, false, true, false]));
        let m = load(&tiny(family, 4, sliding, seed, Edit::None));
        let split = 1 + ((tokens.len() - 1) as f64 * split_frac) as usize;
        let once = logits(&m, &tokens, tokens.len());
        let stepped = logits(&m, &tokens, split);
        prop_assert!(max_diff(&once, &stepped) < 1e-4, "{}", max_diff(&once, &stepped));
    }

    /// A model of one sliding layer of window `W`: the last position's logits depend only on
    /// the last `W` tokens (RoPE scores depend on relative positions only), so replacing any
    /// earlier token changes nothing, while replacing the `W`-th last does change them.
    #[test]
    fn a_sliding_layer_sees_exactly_its_last_w_tokens(
        seed in 1u64..1000,
        window in 1usize..5,
        tokens in proptest::collection::vec(0u32..VOCAB as u32, 7..12),
        decode in any::<bool>(),
    ) {
        let m = load(&tiny(&GEMMA3, 1, Some((window, vec![true])), seed, Edit::None));
        let n = tokens.len();
        let split = if decode { 1 } else { n };
        let base = logits(&m, &tokens, split);
        let mut far = tokens.clone();
        for t in far.iter_mut().take(n - window) {
            *t = (*t + 5) % VOCAB as u32;
        }
        prop_assert!(max_diff(&base, &logits(&m, &far, split)) < 1e-5);
        let mut near = tokens.clone();
        near[n - window] = (near[n - window] + 5) % VOCAB as u32;
        prop_assert!(max_diff(&base, &logits(&m, &near, split)) > 1e-6);
    }
}

#[test]
fn the_tensors_a_family_needs_are_required_and_shaped() {
    let pattern = Some((3, vec![true, false]));
    let e = refused(&tiny(
        &GEMMA3,
        2,
        pattern.clone(),
        2,
        Edit::Skip("blk.1.attn_k_norm.weight"),
    ));
    assert!(
        matches!(&e, ModelError::MissingTensor(t) if t == "blk.1.attn_k_norm.weight"),
        "{e}"
    );
    let e = refused(&tiny(
        &GEMMA3,
        2,
        pattern,
        2,
        Edit::Short("blk.0.post_ffw_norm.weight"),
    ));
    assert!(
        matches!(&e, ModelError::TensorShape { name, .. } if name == "blk.0.post_ffw_norm.weight"),
        "{e}"
    );
    // a llama file needs no QK-norm
    load(&tiny(&LLAMA, 1, None, 1, Edit::None));
}

/// A tensor the loader does not read is refused by name, never skipped: a Llama 3 file's
/// `rope_freqs.weight` changes every RoPE angle, a QK-norm in a family without one changes
/// every score.
#[test]
fn a_tensor_the_loader_does_not_read_is_refused_by_name() {
    for (family, extra) in [
        (&LLAMA, "blk.0.attn_q_norm.weight"),
        (&QWEN2, "blk.0.post_attention_norm.weight"),
        (&GEMMA3, "blk.0.lora_a.weight"),
        (&LLAMA, "rope_factors_long.weight"),
    ] {
        let e = refused(&tiny(family, 1, None, 2, Edit::Extra(extra)));
        assert!(e.to_string().contains(extra), "{}: {e}", family.name);
    }
    // a rope_freqs that is not one factor per rotary pair names its shape
    let e = refused(&tiny(&LLAMA, 1, None, 2, Edit::Extra("rope_freqs.weight")));
    assert!(
        matches!(&e, ModelError::TensorShape { name, .. } if name == "rope_freqs.weight"),
        "{e}"
    );
}

/// A metadata key that may change the computation and that this build does not read is
/// refused by name.
#[test]
fn a_key_the_loader_does_not_read_is_refused_by_name() {
    let mut w = GgufWriter::new();
    let f = tiny(&QWEN3, 1, None, 2, Edit::None);
    for (k, v) in f.metadata() {
        w.meta(k, v.clone());
    }
    w.meta("qwen3.expert_count", Value::U32(8));
    for t in f.tensors() {
        let (dims, data) = f.tensor_f32(&t.name).unwrap();
        w.tensor_f32(&t.name, &dims, &data);
    }
    let e = refused(&GgufFile::parse(w.to_bytes()).unwrap());
    assert!(
        matches!(&e, ModelError::NotUnderstood { name, .. } if name == "qwen3.expert_count"),
        "{e}"
    );
}
