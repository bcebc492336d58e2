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
use qada_model::ops::rms_norm;
use qada_model::{LoadOptions, Model, Tokenizer, WeightFormat};
use serde_json::Value;

/// Largest residual error relative to the row's largest magnitude (measured: see the test's
/// stderr; about 1e-6).
const RESIDUAL_TOL: f32 = 2e-3;
/// Largest logit error of the f32 path (measured: about 1e-3).
const LOGIT_TOL: f32 = 0.05;

fn model_path() -> PathBuf {
    let p = common::repo_root().join("models/qwen2.5-0.5b/Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf");
    assert!(
        p.exists(),
        "{} is missing: run `bash scripts/setup.sh --model qwen2.5-0.5b` first",
        p.display()
    );
    p
}

fn reference() -> &'static Value {
    static R: OnceLock<Value> = OnceLock::new();
    R.get_or_init(|| common::shared_reference("qwen2.5-coder-0.5b-instruct.json"))
}

fn model() -> &'static Model {
    static M: OnceLock<Model> = OnceLock::new();
    M.get_or_init(|| {
        let opts = LoadOptions {
            weights: WeightFormat::F32,
            ..Default::default()
        };
        Model::load(&model_path(), &opts).unwrap()
    })
}

#[test]
fn hyper_parameters_are_read_from_the_file() {
    let c = &model().config;
    let a = &reference()["arch"];
    assert_eq!(c.family.name(), "qwen2");
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
        model().output.is_some(),
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
    let m = model();
    let r = reference();
    let tokens = common::ids(&r["prompts"][0]["token_ids"]);
    let rows = r["plain_sentence_residual_stream_last_position"]["rows"]
        .as_array()
        .unwrap();
    let n_layers = m.config.n_layers;
    assert_eq!(rows.len(), n_layers + 1);
    let mut s = common::dense_session(m);
    let trace = s.prefill_trace(&tokens).unwrap();
    assert_eq!(trace.len(), n_layers + 1);
    let mut worst = 0.0f32;
    for (i, reference) in rows.iter().enumerate() {
        let reference = common::floats(reference);
        // The last row is after the final RMSNorm.
        let ours = if i == n_layers {
            let mut y = vec![0.0; m.config.n_embd];
            rms_norm(&trace[i], &m.output_norm, m.config.rms_eps, &mut y);
            y
        } else {
            trace[i].clone()
        };
        let scale = reference
            .iter()
            .fold(0.0f32, |a, v| a.max(v.abs()))
            .max(1.0);
        let err = ours
            .iter()
            .zip(&reference)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max)
            / scale;
        worst = worst.max(err);
        assert!(
            err < RESIDUAL_TOL,
            "row {i}: max error {err} relative to {scale}"
        );
    }
    eprintln!("qwen2.5-0.5b: worst relative residual error {worst:e}");
}

#[test]
fn logits_top5_and_greedy_continuations_match_the_reference() {
    let m = model();
    let r = reference();
    let first64 = common::floats(&r["plain_sentence_last_logits_first_64"]);
    let mut worst_logit = 0.0f32;
    for p in r["prompts"].as_array().unwrap() {
        let name = &p["name"];
        let tokens = common::ids(&p["token_ids"]);
        let mut s = common::dense_session(m);
        let logits = s.prefill(&tokens, &mut |_, _| {}).unwrap().to_vec();
        let ids = common::ids(&p["top5_next_token"]["ids"]);
        assert_eq!(common::top_k(&logits, 5), ids, "prompt {name}");
        for (id, l) in ids
            .iter()
            .zip(common::floats(&p["top5_next_token"]["logits"]))
        {
            let err = (logits[*id as usize] - l).abs();
            worst_logit = worst_logit.max(err);
            assert!(err < LOGIT_TOL, "prompt {name} token {id}: error {err}");
        }
        if p["name"] == "plain_sentence" {
            for (a, b) in logits[..64].iter().zip(&first64) {
                // the reference is rounded to 5 decimals
                assert!((a - b).abs() < LOGIT_TOL, "first 64 logits: {a} vs {b}");
            }
        }
        // Greedy: identical, up to a step whose reference margin between the first two tokens
        // is within our logit error (there either token is a faithful answer).
        let expected = common::ids(&p["greedy"]["ids"]);
        let steps = p["greedy"]["steps"].as_array().unwrap();
        let mut next = common::argmax(&logits);
        for (i, &want) in expected.iter().enumerate() {
            if next != want {
                let margin = steps[i]["margin_to_2nd"].as_f64().unwrap() as f32;
                assert!(
                    margin < 2.0 * LOGIT_TOL,
                    "prompt {name}: step {i} chose {next}, the reference {want} with margin {margin}"
                );
                eprintln!("prompt {name}: diverged at step {i} within margin {margin}");
                break;
            }
            if i + 1 < expected.len() {
                next = common::argmax(s.step(next).unwrap());
            }
        }
    }
    eprintln!("qwen2.5-0.5b: worst top-5 logit error {worst_logit:e}");
}
