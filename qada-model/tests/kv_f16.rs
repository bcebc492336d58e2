//! The f16 K/V cache (the default of `generate` and `bench`, as llama.cpp's) against the f32
//! cache on the three families' reference prompts: the same prompt and the same teacher-forced
//! tokens (the f32 run's greedy choices), logits compared at every step.

mod common;

use qada_kv::KvDtype;

/// Largest logit difference allowed between the two caches (measured: see stderr).
const BOUND: f32 = 0.05;
const STEPS: usize = 24;

#[test]
fn the_f16_cache_stays_within_its_bound_on_every_family() {
    for (name, path, reference) in [
        ("smollm2-135m", common::model_path(), common::reference()),
        (
            "qwen2.5-0.5b",
            common::fetched_model("qwen2.5-0.5b"),
            common::shared_reference("qwen2.5-coder-0.5b-instruct.json"),
        ),
        (
            "gemma3-270m",
            common::fetched_model("gemma3-270m"),
            common::shared_reference("gemma-3-270m.json"),
        ),
    ] {
        let (diffs, flips) =
            common::cache_step_diffs(&path, &reference, KvDtype::F32, KvDtype::F16, STEPS);
        let worst = diffs.iter().copied().fold(0.0, f32::max);
        eprintln!("{name}: f16 against f32 cache: worst logit difference {worst:e}, {flips} argmax changes");
        assert!(worst < BOUND, "{name}: {worst}");
        assert_eq!(flips, 0, "{name}");
    }
}
