//! The f16 K/V cache (the default of `generate` and `bench`, as llama.cpp's) against the f32
//! cache on the three families' reference prompts: the same prompt and the same teacher-forced
//! tokens (the f32 run's greedy choices), logits compared at every step.

mod common;

use qada_core::Dense;
use qada_kv::{KvDtype, WindowConfig};
use qada_model::{LoadOptions, Model, Session, SessionOptions};

/// Largest logit difference allowed between the two caches (measured: see stderr).
const BOUND: f32 = 0.05;
const STEPS: usize = 24;

fn session(m: &Model, dtype: KvDtype) -> Session<'_> {
    let mut o = SessionOptions::new(Box::new(Dense), WindowConfig::PAPER);
    o.kv_dtype = dtype;
    Session::new(m, o).unwrap()
}

/// Worst logit difference and steps whose argmax differs, over the reference prompts.
fn compare(path: &std::path::Path, reference: &serde_json::Value) -> (f32, usize) {
    let m = Model::load(path, &LoadOptions::default()).unwrap();
    let (mut worst, mut flips) = (0.0f32, 0);
    for p in reference["prompts"].as_array().unwrap() {
        let tokens = common::ids(&p["token_ids"]);
        let (mut a, mut b) = (session(&m, KvDtype::F32), session(&m, KvDtype::F16));
        let mut la = a.prefill(&tokens, &mut |_, _| {}).unwrap().to_vec();
        let mut lb = b.prefill(&tokens, &mut |_, _| {}).unwrap().to_vec();
        for _ in 0..STEPS {
            let d = la
                .iter()
                .zip(&lb)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0, f32::max);
            worst = worst.max(d);
            let next = common::argmax(&la);
            flips += usize::from(next != common::argmax(&lb));
            la = a.step(next).unwrap().to_vec();
            lb = b.step(next).unwrap().to_vec();
        }
    }
    (worst, flips)
}

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
        let (worst, flips) = compare(&path, &reference);
        eprintln!("{name}: f16 against f32 cache: worst logit difference {worst:e}, {flips} argmax changes");
        assert!(worst < BOUND, "{name}: {worst}");
        assert_eq!(flips, 0, "{name}");
    }
}
