//! Qwen2.5-Coder-0.5B-Instruct with its weights in their GGUF blocks (Q4_K, Q6_K, Q5_0, Q8_0)
//! against the same model with f32 weights, f32 activations both: the logits after the
//! reference's plain_sentence prompt and along the first steps of its greedy continuation. The
//! prompt's logits pass through the output head's kernel, every decode step through all of
//! them (decoding multiplies the blocks, prefill dequantizes them).
//!
//! Stated bound: every logit within 1e-2 of the f32 weights' (measured: 1.3e-5; the test
//! prints it).
//!
//! The file is fetched by `bash scripts/setup.sh --model qwen2.5-0.5b`.

mod common;

use std::path::PathBuf;

use qada_model::qlinear::ActPrecision;
use qada_model::{LoadOptions, Model, WeightFormat};

const BOUND: f32 = 1e-2;
/// Decode steps compared after the prompt.
const STEPS: usize = 6;

fn model_path() -> PathBuf {
    common::fetched_model("qwen2.5-0.5b")
}

fn load(weights: WeightFormat) -> Model {
    let opts = LoadOptions {
        weights,
        activations: ActPrecision::F32,
        ..Default::default()
    };
    Model::load(&model_path(), &opts).unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn native_weights_stay_within_1e_2_of_f32_weights() {
    let r = common::shared_reference("qwen2.5-coder-0.5b-instruct.json");
    let p = &r["prompts"][0];
    assert_eq!(p["name"], "plain_sentence");
    let tokens = common::ids(&p["token_ids"]);
    let greedy = common::ids(&p["greedy"]["ids"]);
    let (exact, native) = (load(WeightFormat::F32), load(WeightFormat::Native));
    let (mut se, mut sn) = (
        common::dense_session(&exact),
        common::dense_session(&native),
    );
    let mut le = se.prefill(&tokens, &mut |_, _| {}).unwrap().to_vec();
    let mut ln = sn.prefill(&tokens, &mut |_, _| {}).unwrap().to_vec();
    let mut worst = 0.0f32;
    for (step, &tok) in greedy.iter().take(STEPS).enumerate() {
        let err = max_diff(&le, &ln);
        eprintln!("step {step}: largest logit difference {err}");
        worst = worst.max(err);
        assert!(err < BOUND, "step {step}: logits differ by {err}");
        le = se.step(tok).unwrap().to_vec();
        ln = sn.step(tok).unwrap().to_vec();
    }
    let err = max_diff(&le, &ln);
    worst = worst.max(err);
    assert!(err < BOUND, "step {STEPS}: logits differ by {err}");
    eprintln!("largest logit difference, native vs f32 weights: {worst}");
}
