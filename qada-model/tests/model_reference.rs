//! The f32 reference path against the shared reference (HF transformers on the same GGUF):
//! residual stream, last-position logits, top-5 next tokens and 24-token greedy continuations.

mod common;

use std::sync::OnceLock;

use qada_model::ops::rms_norm;
use qada_model::{LoadOptions, Model, WeightFormat};

fn model() -> &'static Model {
    static M: OnceLock<Model> = OnceLock::new();
    M.get_or_init(|| {
        let opts = LoadOptions {
            weights: WeightFormat::F32,
            ..Default::default()
        };
        Model::load(&common::model_path(), &opts).unwrap()
    })
}

#[test]
fn hyper_parameters_are_read_from_the_file() {
    let c = &model().config();
    assert_eq!(
        (c.n_layers, c.n_embd, c.n_heads, c.n_kv_heads, c.head_dim),
        (30, 576, 9, 3, 64)
    );
    assert_eq!(
        (c.n_ff, c.context_length, c.vocab_size),
        (1536, 8192, 49152)
    );
    assert_eq!(c.rope_base, 1e5);
    assert!(
        model().ties_output(),
        "SmolLM2 ties the output head to the embedding"
    );
}

#[test]
fn residual_stream_matches_the_reference_after_every_layer() {
    let m = model();
    let r = common::reference();
    let tokens = common::ids(&r["prompts"][0]["token_ids"]);
    let rows = r["plain_sentence_residual_stream_last_position"]["rows"]
        .as_array()
        .unwrap();
    let mut s = common::dense_session(m);
    let trace = s.prefill_trace(&tokens).unwrap();
    assert_eq!(trace.len(), 31);
    let mut worst = 0.0f32;
    for (i, reference) in rows.iter().enumerate() {
        let reference: Vec<f32> = reference
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        let ours = if i == 30 {
            let mut y = vec![0.0; 576];
            rms_norm(&trace[30], m.output_norm(), m.config().rms_eps, &mut y);
            y
        } else {
            trace[i].clone()
        };
        let err = common::max_relative_error(&ours, &reference);
        worst = worst.max(err);
        assert!(
            err < 2e-3,
            "row {i}: max error {err} relative to the row's largest value"
        );
    }
    eprintln!("worst relative residual error {worst:e}");
}

#[test]
fn logits_and_top5_match_the_reference_for_every_prompt() {
    let m = model();
    let r = common::reference();
    let first64: Vec<f32> = r["plain_sentence_last_logits_first_64"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect();
    for p in r["prompts"].as_array().unwrap() {
        let tokens = common::ids(&p["token_ids"]);
        let mut s = common::dense_session(m);
        let logits = s.prefill(&tokens, &mut |_, _| {}).unwrap().to_vec();
        let ids = common::ids(&p["top5_next_token"]["ids"]);
        assert_eq!(common::top_k(&logits, 5), ids, "prompt {}", p["name"]);
        for (id, l) in ids
            .iter()
            .zip(p["top5_next_token"]["logits"].as_array().unwrap())
        {
            let l = l.as_f64().unwrap() as f32;
            let ours = logits[*id as usize];
            assert!(
                (ours - l).abs() < 0.05,
                "prompt {} token {id}: {ours} vs {l}",
                p["name"]
            );
        }
        if p["name"] == "plain_sentence" {
            let worst = logits[..64]
                .iter()
                .zip(&first64)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(worst < 0.05, "first 64 logits differ by {worst}");
        }
    }
}

#[test]
fn greedy_continuations_match_the_reference() {
    let m = model();
    let r = common::reference();
    for p in r["prompts"].as_array().unwrap() {
        let tokens = common::ids(&p["token_ids"]);
        let expected = common::ids(&p["greedy"]["ids"]);
        let mut s = common::dense_session(m);
        let mut next = common::argmax(s.prefill(&tokens, &mut |_, _| {}).unwrap());
        let mut got = vec![next];
        while got.len() < expected.len() {
            next = common::argmax(s.step(next).unwrap());
            got.push(next);
        }
        assert_eq!(got, expected, "prompt {}", p["name"]);
    }
}
