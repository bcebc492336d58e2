//! The fast paths against the exact one on held-out text: int8 activations (against f32, both
//! on the file's own quantized weights) and the f16 and q8 K/V caches (against f32), per model.
//!
//! The reference-prompt tests (`quantized_path`, `qwen2_quantized`, `gemma3_quantized`,
//! `kv_f16`, `kv_q8`) bound the largest logit difference, which one activation near a rounding
//! boundary sets. What a user reads is the distribution, so this test teacher-forces a speech of
//! the evaluation half (1900 on) and measures at each of 128 positions after a 512-token prefill:
//! `KL(P_exact || P_fast)` in f64, top-1 agreement, and the mean change in the NLL of the text's
//! own next token (the log of the perplexity ratio).
//!
//! Stated bounds, every model:
//! - int8 activations: mean KL below 0.01 nats a token, top-1 agreement at least 0.9, mean NLL
//!   change within 0.02 (perplexity within 2 %);
//! - f16 cache: mean KL below 1e-4, top-1 agreement at least 0.99;
//! - q8 cache: mean KL below 0.05, top-1 agreement at least 0.9.
//!
//! The test prints what it measures.

mod common;

use qada_eval::metrics::{kl_divergence, log_softmax, nll, top1_agreement};
use qada_kv::{KvDtype, WindowConfig};
use qada_model::ActPrecision;
use qada_model::{Model, Session, SessionOptions, WeightFormat};

/// Tokens prefilled before the comparison starts (prefill's integer tiles are in it).
const PREFILL: usize = 512;
/// Teacher-forced positions compared after the prefill (decoding's integer kernels).
const STEPS: usize = 128;

/// A path's bounds: mean KL, least top-1 agreement, largest |mean NLL change|.
struct Bounds {
    kl: f64,
    top1: f64,
    nll_change: f64,
}

const INT8: Bounds = Bounds {
    kl: 0.01,
    top1: 0.9,
    nll_change: 0.02,
};
const F16_CACHE: Bounds = Bounds {
    kl: 1e-4,
    top1: 0.99,
    nll_change: 0.02,
};
const Q8_CACHE: Bounds = Bounds {
    kl: 0.05,
    top1: 0.9,
    nll_change: 0.1,
};

/// The first speech of the evaluation half long enough for the comparison, as tokens.
fn held_out_tokens(m: &Model) -> Vec<u32> {
    for f in common::held_out_speeches() {
        let text = std::fs::read_to_string(&f).unwrap();
        let mut tokens = m.tokenizer().encode(&text).unwrap();
        if tokens.len() > PREFILL + STEPS {
            tokens.truncate(PREFILL + STEPS + 1);
            return tokens;
        }
    }
    panic!("no speech from 1900 on has {} tokens", PREFILL + STEPS);
}

/// What a fast path differs from the reference by over the compared positions.
#[derive(Debug, Default)]
struct Drift {
    /// Mean `KL(P_a || P_b)`, nats a token.
    kl: f64,
    /// Largest per-position KL.
    kl_max: f64,
    /// Share of positions whose argmax agrees.
    top1: f64,
    /// Mean `NLL_b - NLL_a` of the text's next token: the log of the perplexity ratio.
    nll_change: f64,
}

/// Teacher-force the same held-out text through a reference session and the `fast` ones in
/// step (the reference runs once for all of them); the drift of each fast one from it.
fn drifts(mut reference: Session<'_>, mut fast: Vec<Session<'_>>, tokens: &[u32]) -> Vec<Drift> {
    let prompt = &tokens[..PREFILL];
    let mut la = reference.prefill(prompt, &mut |_, _| {}).unwrap().to_vec();
    let mut lb: Vec<Vec<f32>> = fast
        .iter_mut()
        .map(|s| s.prefill(prompt, &mut |_, _| {}).unwrap().to_vec())
        .collect();
    let mut d: Vec<Drift> = fast.iter().map(|_| Drift::default()).collect();
    for i in 0..STEPS {
        let next = tokens[PREFILL + i];
        let pa = log_softmax(&la);
        for (d, lb) in d.iter_mut().zip(&lb) {
            let pb = log_softmax(lb);
            let kl = kl_divergence(&pa, &pb).max(0.0);
            d.kl += kl;
            d.kl_max = d.kl_max.max(kl);
            d.top1 += f64::from(u8::from(top1_agreement(&pa, &pb)));
            d.nll_change += nll(&pb, next as usize).unwrap() - nll(&pa, next as usize).unwrap();
        }
        if i + 1 < STEPS {
            la = reference.step(next).unwrap().to_vec();
            for (s, lb) in fast.iter_mut().zip(&mut lb) {
                *lb = s.step(next).unwrap().to_vec();
            }
        }
    }
    let n = STEPS as f64;
    for d in &mut d {
        d.kl /= n;
        d.top1 /= n;
        d.nll_change /= n;
    }
    d
}

/// A dense session of `m` with its K/V cache in `dtype`.
fn session(m: &Model, dtype: KvDtype) -> Session<'_> {
    let mut o = SessionOptions::new(Box::new(qada_core::Dense), WindowConfig::PAPER);
    o.kv_dtype = dtype;
    Session::new(m, o).unwrap()
}

fn check(name: &str, path: &std::path::Path) {
    let exact = common::load_with(path, WeightFormat::Native, ActPrecision::F32);
    let fast = common::load_with(path, WeightFormat::Native, ActPrecision::Int8);
    let tokens = held_out_tokens(&exact);
    let paths = vec![
        session(&fast, KvDtype::F32),
        session(&exact, KvDtype::F16),
        session(&exact, KvDtype::Q8),
    ];
    let [int8, f16, q8]: [Drift; 3] = drifts(session(&exact, KvDtype::F32), paths, &tokens)
        .try_into()
        .unwrap();
    eprintln!(
        "{name}, {STEPS} held-out tokens after {PREFILL}, against f32 activations and an f32 \
         cache:\n  int8 activations: {int8:?}\n  f16 cache: {f16:?}\n  q8 cache: {q8:?}"
    );
    for (what, d, b) in [
        ("int8 activations", int8, INT8),
        ("f16 cache", f16, F16_CACHE),
        ("q8 cache", q8, Q8_CACHE),
    ] {
        assert!(d.kl < b.kl, "{name}, {what}: mean KL {}", d.kl);
        assert!(
            d.top1 >= b.top1,
            "{name}, {what}: top-1 agreement {}",
            d.top1
        );
        assert!(
            d.nll_change.abs() < b.nll_change,
            "{name}, {what}: mean NLL change {}",
            d.nll_change
        );
    }
}

#[test]
fn smollm2_fast_paths_keep_the_distribution() {
    check("smollm2-135m", &common::model_path());
}

#[test]
fn qwen2_fast_paths_keep_the_distribution() {
    check("qwen2.5-0.5b", &common::fetched_model("qwen2.5-0.5b"));
}

#[test]
fn gemma3_fast_paths_keep_the_distribution() {
    check("gemma3-270m", &common::fetched_model("gemma3-270m"));
}
