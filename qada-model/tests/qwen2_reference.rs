//! Qwen2.5-Coder-0.5B-Instruct (qwen2: biases on q/k/v, NeoX RoPE, a Q4_K_M mix of Q5_0, Q8_0,
//! Q6_K and Q4_K blocks, an untied output head) against the shared reference, HF transformers on
//! the same GGUF file with f32 weights: token ids of every tokenizer case and prompt, the residual
//! stream after the embedding and every layer, top-5 next tokens with their logits, and 24-token
//! greedy continuations.
//!
//! The file is fetched by `bash scripts/setup.sh --model qwen2.5-0.5b` (the test command does it).

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;

use qada_model::gguf::GgufFile;
use qada_model::{Model, Tokenizer};
use serde_json::Value;

/// Largest residual error relative to the row's largest magnitude (measured: see the test's
/// stderr; about 1e-6).
const RESIDUAL_TOL: f32 = 2e-3;
/// Largest logit error of the f32 path (measured: about 1e-3).
const LOGIT_TOL: f32 = 0.05;

fn model_path() -> PathBuf {
    common::fetched_model("qwen2.5-0.5b")
}

fn reference() -> &'static Value {
    static R: OnceLock<Value> = OnceLock::new();
    R.get_or_init(|| common::shared_reference("qwen2.5-coder-0.5b-instruct.json"))
}

fn model() -> &'static Model {
    static M: OnceLock<Model> = OnceLock::new();
    M.get_or_init(|| common::load_f32(&model_path()))
}

#[test]
fn hyper_parameters_are_read_from_the_file() {
    let c = &model().config();
    let a = &reference()["arch"];
    assert_eq!(c.family.name, "qwen2");
    let want = |k: &str| a[k].as_u64().unwrap() as usize;
    assert_eq!(
        (c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.n_embd),
        (
            want("n_layers"),
            want("n_heads"),
            want("n_kv_heads"),
            want("head_dim"),
            want("hidden_size")
        )
    );
    assert_eq!(c.vocab_size, want("vocab_size"));
    assert_eq!(c.rope_base, 1e6);
    assert!(
        !model().ties_output(),
        "Qwen2.5-0.5B has its own output head"
    );
}

#[test]
fn token_ids_equal_the_reference_for_every_case_and_prompt() {
    let f = GgufFile::open(&model_path()).unwrap();
    let tok = Tokenizer::from_gguf(&f).unwrap();
    common::check_token_ids(&tok, reference());
}

#[test]
fn residual_stream_matches_the_reference_after_every_layer() {
    let worst = common::check_residual_stream(model(), reference(), RESIDUAL_TOL);
    eprintln!("qwen2.5-0.5b: worst relative residual error {worst:e}");
}

#[test]
fn logits_top5_and_greedy_continuations_match_the_reference() {
    let worst = common::check_logits_and_greedy(model(), reference(), LOGIT_TOL);
    eprintln!("qwen2.5-0.5b: worst top-5 logit error {worst:e}");
}
