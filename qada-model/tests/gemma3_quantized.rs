//! Gemma 3 270M with its weights in their GGUF blocks (Q5_0, Q8_0, Q4_K, Q6_K) against the
//! same model with f32 weights and f32 activations: the logits after the reference's first
//! prompt (prefill: f32 tiles with f32 activations, integer tiles with int8 activations, the
//! Q8_0 rows among them only on a CPU with AVX-VNNI) and along the first steps of its greedy
//! continuation (decoding's kernels).
//!
//! Stated bounds: every logit within 1e-2 of the f32 weights' with f32 activations (measured
//! 1.7e-5), within 2.0 with int8 activations (measured 1.07 on an AVX-VNNI host, 1.09 with
//! `QADA_NO_VNNI=1`; after the prompt, prefill's integer tiles alone, 0.57); the next token is
//! the same. The tests print what they measure.
//!
//! The file is fetched by `bash scripts/setup.sh --model gemma3-270m` (the test command does
//! it).

mod common;

use qada_model::ActPrecision;
use qada_model::{Model, WeightFormat};

const BOUND: f32 = 1e-2;
/// With int8 activations.
const INT8_BOUND: f32 = 2.0;
/// Decode steps compared after the prompt.
const STEPS: usize = 6;

fn load(weights: WeightFormat, activations: ActPrecision) -> Model {
    common::load_with(&common::fetched_model("gemma3-270m"), weights, activations)
}

#[test]
fn native_weights_and_both_activations_stay_within_their_bounds_of_f32_weights() {
    let r = common::shared_reference("gemma-3-270m.json");
    let p = &r["prompts"][0];
    let tokens = common::ids(&p["token_ids"]);
    let greedy = common::ids(&p["greedy"]["ids"]);
    let exact = load(WeightFormat::F32, ActPrecision::F32);
    for (activations, bound) in [(ActPrecision::F32, BOUND), (ActPrecision::Int8, INT8_BOUND)] {
        let native = load(WeightFormat::Native, activations);
        let ((next_exact, next_native), diffs) =
            common::step_diffs(&exact, &native, &tokens, &greedy, STEPS);
        assert_eq!(
            next_native, next_exact,
            "{activations:?}: next token of prompt {}",
            p["name"]
        );
        for (step, &err) in diffs.iter().enumerate() {
            eprintln!("{activations:?} step {step}: largest logit difference {err}");
            assert!(
                err < bound,
                "{activations:?} step {step}: logits differ by {err}"
            );
        }
        let worst = diffs.iter().fold(0.0f32, |a, &b| a.max(b));
        eprintln!("largest logit difference, native weights and {activations:?} activations vs f32: {worst}");
    }
}
