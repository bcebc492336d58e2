//! Qwen2.5-Coder-0.5B-Instruct with its weights in their GGUF blocks (Q4_K, Q6_K, Q5_0, Q8_0)
//! against the same model with f32 weights and f32 activations: the logits after the
//! reference's plain_sentence prompt and along the first steps of its greedy continuation. The
//! prompt's logits pass through the output head's kernel, every decode step through all of
//! them (decoding multiplies the blocks; prefill dequantizes them with f32 activations and
//! multiplies integer tiles with int8 activations).
//!
//! Stated bounds: every logit within 1e-2 of the f32 weights' with f32 activations (measured:
//! 1.3e-5), within 0.6 with int8 activations (llama.cpp's scheme, the K-quant rows against
//! activations quantized per 256 values in decoding, every row per 32 values in prefill;
//! measured: 0.32, 0.29 with f32 prefill);
//! the tests print them.
//!
//! The file is fetched by `bash scripts/setup.sh --model qwen2.5-0.5b`.

mod common;

use std::path::PathBuf;

use qada_model::ActPrecision;
use qada_model::{Model, WeightFormat};

const BOUND: f32 = 1e-2;
/// With int8 activations.
const INT8_BOUND: f32 = 0.6;
/// Decode steps compared after the prompt.
const STEPS: usize = 6;

fn model_path() -> PathBuf {
    common::fetched_model("qwen2.5-0.5b")
}

fn load(weights: WeightFormat, activations: ActPrecision) -> Model {
    common::load_with(&model_path(), weights, activations)
}

#[test]
fn native_weights_stay_within_1e_2_of_f32_weights() {
    compare(ActPrecision::F32, BOUND);
}

#[test]
fn int8_activations_stay_within_their_bound_of_f32_weights() {
    compare(ActPrecision::Int8, INT8_BOUND);
}

fn compare(activations: ActPrecision, bound: f32) {
    let r = common::shared_reference("qwen2.5-coder-0.5b-instruct.json");
    let p = &r["prompts"][0];
    assert_eq!(p["name"], "plain_sentence");
    let tokens = common::ids(&p["token_ids"]);
    let greedy = common::ids(&p["greedy"]["ids"]);
    let exact = load(WeightFormat::F32, ActPrecision::F32);
    let native = load(WeightFormat::Native, activations);
    let (_, diffs) = common::step_diffs(&exact, &native, &tokens, &greedy, STEPS);
    for (step, &err) in diffs.iter().enumerate() {
        eprintln!("step {step}: largest logit difference {err}");
        assert!(err < bound, "step {step}: logits differ by {err}");
    }
    let worst = diffs.iter().fold(0.0f32, |a, &b| a.max(b));
    eprintln!(
        "largest logit difference, native weights and {activations:?} activations vs f32: {worst}"
    );
}
