//! Every architecture of `../shared/reference/synthetic/` against what HF transformers
//! computes from the same weights: tiny random-weight models converted by llama.cpp's own
//! converter, one per feature (Llama 3 `rope_freqs`, Qwen3 QK-norm, Phi-3 fused matrices and
//! partial RoPE, Phi-3 longrope, Gemma 2 soft-capping and alternating windows, Qwen2 YaRN,
//! SmolLM3 NoPE layers, Mistral converted to `llama`). The README beside the files says what
//! each exercises.
//!
//! For every prompt: token ids identical; the residual stream at the last position after the
//! embedding, every layer and the final norm, relative to the row's largest magnitude; the
//! top-10 logits at the last position; the top-5 at every position of the short prompt (run
//! token by token through the decoding path); 24 greedy tokens identical except after a step
//! whose HF margin is below the logit tolerance, which is reported.
//!
//! Two files hold a second HF result that is what the GGUF means, and qada matches that one:
//! `mistral-swa` (`hf_gguf_equivalent`: the converter writes no window for `llama`, so the file
//! is full attention) and `phi3-longrope`'s short prompt (`hf_with_long_factors`: a session of
//! the file's 128 positions is past the original 32, where llama.cpp and qada use the long
//! factors for the whole sequence; HF switches per forward pass). Those prompts have no
//! residual stream of their own and are checked on logits and greedy tokens.

mod common;

use std::path::PathBuf;

use qada_model::gguf::GgufFile;
use qada_model::{LoadOptions, Model, Session, SessionOptions, Tokenizer, WeightFormat};
use serde_json::Value;

/// Largest residual error relative to the row's largest magnitude (measured: see stderr).
const RESIDUAL_TOL: f32 = 1e-4;
/// Largest logit error (measured: see stderr).
const LOGIT_TOL: f32 = 1e-3;

fn dir() -> PathBuf {
    common::repo_root().join("../shared/reference/synthetic")
}

fn load(name: &str) -> (Model, Value) {
    let r: Value = serde_json::from_str(
        &std::fs::read_to_string(dir().join(format!("{name}.json")))
            .unwrap_or_else(|e| panic!("{name}.json: {e} (shared/ must sit beside the repo)")),
    )
    .unwrap();
    let opts = LoadOptions {
        weights: WeightFormat::F32,
        ..Default::default()
    };
    let m = Model::load(&dir().join(format!("{name}.gguf")), &opts)
        .unwrap_or_else(|e| panic!("{name}.gguf: {e}"));
    (m, r)
}

/// A dense session of 256 positions: the long prompt and its greedy tokens (174) pass the
/// 128-position context of `qwen2-yarn` and `phi3-longrope`, as in HF's run.
fn session(m: &Model) -> Session<'_> {
    let mut o = SessionOptions::new(Box::new(qada_core::Dense), qada_kv::WindowConfig::PAPER);
    o.capacity = Some(256);
    Session::new(m, o).unwrap()
}

/// What the GGUF file means for this prompt (see the module doc).
fn expected(p: &Value) -> &Value {
    for variant in ["hf_gguf_equivalent", "hf_with_long_factors"] {
        if p.get(variant).is_some() {
            return &p[variant];
        }
    }
    p
}

/// Worst errors seen: residual (relative) and logit.
#[derive(Default, Debug)]
struct Worst {
    /// `None` where no prompt has a residual stream to compare (mistral-swa).
    residual: Option<f32>,
    logit: f32,
}

fn check_top(logits: &[f32], want: &Value, what: &str, worst: &mut Worst) {
    let ids = common::ids(&want["ids"]);
    let values = common::floats(&want["logits"]);
    for (i, (&id, &v)) in ids.iter().zip(&values).enumerate() {
        let err = (logits[id as usize] - v).abs();
        worst.logit = worst.logit.max(err);
        assert!(
            err < LOGIT_TOL,
            "{what}: token {id}: {} vs {v}",
            logits[id as usize]
        );
        // the order holds wherever HF's own gap exceeds the tolerance
        if let Some(&next) = values.get(i + 1) {
            if v - next > 2.0 * LOGIT_TOL {
                let got = &common::top_k(logits, i + 1);
                assert_eq!(got[..i + 1], ids[..i + 1], "{what}: top {}", i + 1);
            }
        }
    }
}

fn check_residual(m: &Model, tokens: &[u32], r: &Value, worst: &mut Worst) {
    let mut s = session(m);
    let trace = s.prefill_trace(tokens).unwrap();
    let n = m.config().n_layers;
    let layers = r["layers"].as_array().unwrap();
    assert_eq!(layers.len(), n);
    let mut rows: Vec<(String, Vec<f32>, Vec<f32>)> = vec![(
        "embed".into(),
        trace[0].clone(),
        common::floats(&r["embed"]),
    )];
    for (l, want) in layers.iter().enumerate() {
        rows.push((
            format!("layer {l}"),
            trace[l + 1].clone(),
            common::floats(want),
        ));
    }
    let mut normed = vec![0.0; m.config().n_embd];
    qada_model::ops::rms_norm(&trace[n], m.output_norm(), m.config().rms_eps, &mut normed);
    rows.push((
        "final norm".into(),
        normed,
        common::floats(&r["final_norm"]),
    ));
    for (what, ours, want) in rows {
        let err = common::max_relative_error(&ours, &want);
        worst.residual = Some(worst.residual.unwrap_or(0.0).max(err));
        assert!(err < RESIDUAL_TOL, "{what}: relative error {err}");
    }
}

/// The whole comparison for one file; returns the worst errors and the greedy steps that
/// differ within HF's margin.
fn check_file(name: &str) {
    let (m, r) = load(name);
    let f = GgufFile::open(&dir().join(format!("{name}.gguf"))).unwrap();
    let tok = Tokenizer::from_gguf(&f).unwrap();
    let mut worst = Worst::default();
    for p in r["prompts"].as_array().unwrap() {
        let pname = p["name"].as_str().unwrap();
        let tokens = common::ids(&p["ids"]);
        assert_eq!(
            tok.encode(p["text"].as_str().unwrap()).unwrap(),
            tokens,
            "{name} {pname}: token ids"
        );
        let want = expected(p);
        if std::ptr::eq(want, p) {
            check_residual(&m, &tokens, &p["residual"], &mut worst);
        }
        // every position, token by token through the decoding path
        if let Some(at) = want.get("logits_at") {
            let mut s = session(&m);
            let mut logits = s.prefill(&tokens[..1], &mut |_, _| {}).unwrap().to_vec();
            for (i, entry) in at.as_array().unwrap().iter().enumerate() {
                assert_eq!(entry["pos"].as_u64(), Some(i as u64));
                check_top(
                    &logits,
                    entry,
                    &format!("{name} {pname} pos {i}"),
                    &mut worst,
                );
                if i + 1 < tokens.len() {
                    logits = s.step(tokens[i + 1]).unwrap().to_vec();
                }
            }
        }
        let mut s = session(&m);
        let mut logits = s.prefill(&tokens, &mut |_, _| {}).unwrap().to_vec();
        check_top(
            &logits,
            &want["last_logits_top10"],
            &format!("{name} {pname} last"),
            &mut worst,
        );
        let greedy = common::ids(&want["greedy"]["ids"]);
        let margins = common::floats(&want["greedy"]["margins"]);
        for (i, &id) in greedy.iter().enumerate() {
            let next = common::argmax(&logits);
            if next != id {
                assert!(
                    margins[i] < LOGIT_TOL,
                    "{name} {pname}: greedy step {i} chose {next}, HF {id} with margin {}",
                    margins[i]
                );
                eprintln!(
                    "{name} {pname}: greedy step {i} differs within HF's margin {}",
                    margins[i]
                );
                break;
            }
            logits = s.step(id).unwrap().to_vec();
        }
    }
    let residual = worst
        .residual
        .map_or("none compared".into(), |r| format!("{r:.1e}"));
    eprintln!(
        "{name}: worst relative residual error {residual}, worst logit error {:.1e}",
        worst.logit
    );
}

macro_rules! families {
    ($($test:ident => $file:literal),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                check_file($file);
            }
        )*

        /// Every file beside the references is tested here (a new one must be added above).
        #[test]
        fn every_synthetic_file_has_a_test() {
            let mut listed = vec![$($file),*];
            listed.sort_unstable();
            let mut found: Vec<String> = std::fs::read_dir(dir())
                .unwrap()
                .flatten()
                .filter_map(|e| {
                    e.file_name().to_str()?.strip_suffix(".gguf").map(String::from)
                })
                .collect();
            found.sort_unstable();
            assert_eq!(found, listed);
        }
    };
}

families! {
    llama3_rope_freqs => "llama3-rope",
    qwen3_qk_norm => "qwen3",
    phi3_fused_matrices_partial_rope => "phi3",
    phi3_longrope => "phi3-longrope",
    gemma2_softcap_alternating_windows => "gemma2",
    qwen2_yarn => "qwen2-yarn",
    smollm3_nope_layers => "smollm3",
    mistral_converted_to_llama_is_full_attention => "mistral-swa",
}
