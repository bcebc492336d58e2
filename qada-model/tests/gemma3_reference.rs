//! Gemma 3 270M (gemma3: head dimension 256 from `key_length`, QK-norm, post-norms, GeGLU,
//! embeddings scaled by sqrt(640), five sliding-window layers of 512 tokens to each global
//! one, a SentencePiece vocabulary, a tied output head) against the shared reference, HF
//! transformers on the same GGUF file with f32 weights: token ids of every tokenizer case and
//! prompt, the residual stream after the embedding and every layer, top-5 next tokens with
//! their logits, and 24-token greedy continuations. Past the reference's short prompts, a
//! prompt longer than two sliding windows and two prefill blocks is decoded two ways (one
//! prefill; a short prefill and then token by token), which must agree.
//!
//! The file is fetched by `bash scripts/setup.sh --model gemma3-270m` (the test command does
//! it).

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;

use qada_kv::LayerSpan;
use qada_model::gguf::GgufFile;
use qada_model::{LoadOptions, Model, Tokenizer};
use qada_model::{Rope, RopeScaling};
use serde_json::Value;

/// Largest residual error relative to the row's largest magnitude (measured 1.2e-6; see the
/// test's stderr).
const RESIDUAL_TOL: f32 = 1e-4;
/// Largest top-5 logit error of the f32 path (measured 5.0e-5).
const LOGIT_TOL: f32 = 2e-3;

fn model_path() -> PathBuf {
    common::fetched_model("gemma3-270m")
}

fn reference() -> &'static Value {
    static R: OnceLock<Value> = OnceLock::new();
    R.get_or_init(|| common::shared_reference("gemma-3-270m.json"))
}

fn model() -> &'static Model {
    static M: OnceLock<Model> = OnceLock::new();
    M.get_or_init(|| common::load_f32(&model_path()))
}

#[test]
fn hyper_parameters_are_read_from_the_file_and_the_published_configuration() {
    let m = model();
    let c = m.config();
    let a = &reference()["arch"];
    assert_eq!(c.family.name, "gemma3");
    let want = |k: &str| a[k].as_u64().unwrap() as usize;
    assert_eq!(
        (c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.n_embd),
        (
            want("n_layers"),
            want("n_heads"),
            want("n_kv_heads"),
            want("head_dim"),
            want("hidden_size")
        )
    );
    assert_eq!(c.vocab_size, want("vocab_size"));
    assert_eq!(c.sliding_window(), Some(want("sliding_window")));
    for (l, kind) in a["layer_types"].as_array().unwrap().iter().enumerate() {
        let global = kind == "full_attention";
        assert_eq!(c.layers[l].is_global(), global, "layer {l}");
        let rope = m.rope(l, c.context_length).unwrap();
        let theta = &a["rope_parameters"][kind.as_str().unwrap()]["rope_theta"];
        let plain = Rope::new(
            theta.as_f64().unwrap(),
            c.rope_dim,
            rope.style,
            &RopeScaling::None,
        );
        assert_eq!(rope, &plain, "layer {l}");
        if !global {
            assert_eq!(c.layers[l].span, LayerSpan::Sliding(512));
        }
    }
    assert_eq!(
        c.attention_scale,
        a["attention_scale"].as_f64().unwrap() as f32
    );
    assert_eq!(c.embedding_scale, a["embed_scale"].as_f64().unwrap() as f32);
    assert!(m.ties_output(), "Gemma 3 ties its output head");
}

#[test]
fn token_ids_equal_the_reference_for_every_case_and_prompt() {
    let f = GgufFile::open(&model_path()).unwrap();
    let tok = Tokenizer::from_gguf(&f).unwrap();
    common::check_token_ids(&tok, reference());
}

#[test]
fn residual_stream_matches_the_reference_after_every_layer() {
    let worst = common::check_residual_stream(model(), reference(), RESIDUAL_TOL);
    eprintln!("gemma3-270m: worst relative residual error {worst:e}");
}

#[test]
fn logits_top5_and_greedy_continuations_match_the_reference() {
    let worst = common::check_logits_and_greedy(model(), reference(), LOGIT_TOL);
    eprintln!("gemma3-270m: worst top-5 logit error {worst:e}");
}

/// Sliding windows across prefill blocks and across decoding steps: the logits after a
/// 1,200-token prompt prefilled at once (three blocks) equal those after prefilling its first
/// 600 tokens and decoding the rest one by one (the sliding layers compact their rows on the
/// way, past 1,024), and the sliding layers hold a bounded number of rows. Native weights:
/// both paths run the same blocks.
#[test]
fn a_long_prompt_gives_the_same_logits_prefilled_or_decoded() {
    let m = &Model::load(&model_path(), &LoadOptions::default()).unwrap();
    // a speech of the evaluation half (1900 on), as `qada eval` reads them
    let files = common::held_out_speeches();
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let mut tokens = m.tokenizer().encode(&text).unwrap();
    tokens.truncate(1200);
    assert_eq!(tokens.len(), 1200);
    let mut once = common::dense_session(m);
    let a = once.prefill(&tokens, &mut |_, _| {}).unwrap().to_vec();
    let mut stepped = common::dense_session(m);
    stepped.prefill(&tokens[..600], &mut |_, _| {}).unwrap();
    for &t in &tokens[600..tokens.len() - 1] {
        stepped.step(t).unwrap();
    }
    let b = stepped.step(tokens[tokens.len() - 1]).unwrap().to_vec();
    let err = common::max_relative_error(&a, &b);
    eprintln!("gemma3-270m: prefilled vs decoded logits after 1200 tokens: {err:e}");
    assert!(err < 1e-3, "relative logit difference {err}");
    assert_eq!(common::argmax(&a), common::argmax(&b));
    for s in [&once, &stepped] {
        let cache = s.cache();
        for l in 0..m.config().n_layers {
            let v = cache.head(l, 0).unwrap();
            let kept = v.len() - v.first_position();
            match m.config().layers[l].span {
                LayerSpan::Sliding(w) => assert!(kept <= 2 * w, "layer {l}: {kept} rows kept"),
                LayerSpan::Full => assert_eq!(kept, 1200),
            }
        }
    }
}
