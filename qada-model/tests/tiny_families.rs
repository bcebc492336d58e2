//! Tiny synthetic models of every family (random f32 weights written to a GGUF file in
//! memory): the one transformer block gives the same logits whether a prompt is prefilled at
//! once or decoded token by token; a sliding-window layer sees exactly its last `W` tokens;
//! the tensors a family needs are required and checked against the metadata.

use proptest::prelude::*;
use qada_core::Dense;
use qada_kv::WindowConfig;
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

/// A tiny model of family `arch` with `layers` layers; `sliding` adds a sliding window of that
/// many tokens (gemma3) with the given per-layer pattern (true: sliding). `skip` names a tensor
/// left out, `bad_len` one written one value short.
fn tiny(
    arch: &str,
    layers: usize,
    sliding: Option<(usize, Vec<bool>)>,
    seed: u64,
    skip: &str,
    bad_len: &str,
) -> GgufFile {
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
        if name == skip {
            return;
        }
        n += 1;
        let len: u64 = dims.iter().product();
        let mut v = weights(len as usize, seed * 1000 + n, scale);
        v.iter_mut().for_each(|x| *x += offset);
        if name == bad_len {
            v.pop();
            w.tensor_f32(name, &[len - 1], &v);
        } else {
            w.tensor_f32(name, dims, &v);
        }
    };
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
        put(&mut w, &p("attn_q.weight"), &[e, q], 0.5, 0.0);
        put(&mut w, &p("attn_k.weight"), &[e, kv], 0.5, 0.0);
        put(&mut w, &p("attn_v.weight"), &[e, kv], 0.5, 0.0);
        put(&mut w, &p("attn_output.weight"), &[q, e], 0.5, 0.0);
        put(&mut w, &p("ffn_norm.weight"), &[e], 0.1, 1.0);
        put(&mut w, &p("ffn_gate.weight"), &[e, f], 0.5, 0.0);
        put(&mut w, &p("ffn_up.weight"), &[e, f], 0.5, 0.0);
        put(&mut w, &p("ffn_down.weight"), &[f, e], 0.5, 0.0);
        if arch == "qwen2" {
            put(&mut w, &p("attn_q.bias"), &[q], 0.3, 0.0);
            put(&mut w, &p("attn_k.bias"), &[kv], 0.3, 0.0);
            put(&mut w, &p("attn_v.bias"), &[kv], 0.3, 0.0);
        }
        if arch == "gemma3" {
            put(&mut w, &p("attn_q_norm.weight"), &[kv], 0.1, 1.0);
            put(&mut w, &p("attn_k_norm.weight"), &[kv], 0.1, 1.0);
            put(&mut w, &p("post_attention_norm.weight"), &[e], 0.1, 1.0);
            put(&mut w, &p("post_ffw_norm.weight"), &[e], 0.1, 1.0);
        }
    }
    GgufFile::parse(w.to_bytes()).unwrap()
}

fn load(f: &GgufFile) -> Model {
    Model::from_gguf(f, &LoadOptions::default()).unwrap()
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
        family in 0usize..3,
        seed in 1u64..1000,
        tokens in proptest::collection::vec(0u32..VOCAB as u32, 2..14),
        split_frac in 0.0f64..1.0,
    ) {
        let f = match family {
            0 => tiny("llama", 2, None, seed, "", ""),
            1 => tiny("qwen2", 2, None, seed, "", ""),
            _ => tiny("gemma3", 3, Some((3, vec![true, false, true])), seed, "", ""),
        };
        let m = load(&f);
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
        let m = load(&tiny("gemma3", 1, Some((window, vec![true])), seed, "", ""));
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
    let e = Model::from_gguf(
        &tiny(
            "gemma3",
            2,
            pattern.clone(),
            1,
            "blk.1.attn_k_norm.weight",
            "",
        ),
        &LoadOptions::default(),
    )
    .err()
    .unwrap();
    assert!(
        matches!(&e, ModelError::MissingTensor(t) if t == "blk.1.attn_k_norm.weight"),
        "{e}"
    );
    let e = Model::from_gguf(
        &tiny("gemma3", 2, pattern, 1, "", "blk.0.post_ffw_norm.weight"),
        &LoadOptions::default(),
    )
    .err()
    .unwrap();
    assert!(
        matches!(&e, ModelError::TensorShape { name, .. } if name == "blk.0.post_ffw_norm.weight"),
        "{e}"
    );
    // a llama file needs no QK-norm
    load(&tiny("llama", 1, None, 1, "", ""));
}
