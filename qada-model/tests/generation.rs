//! Generation on the real model: determinism and the context limit.

mod common;

use std::sync::OnceLock;

use qada_core::Approx;
use qada_kv::{MomentsMode, WindowConfig};
use qada_model::{
    generate, GenerateConfig, LoadOptions, Model, SamplingParams, Session, SessionOptions,
    StopReason,
};

fn model() -> &'static Model {
    static M: OnceLock<Model> = OnceLock::new();
    M.get_or_init(|| Model::load(&common::model_path(), &LoadOptions::default()).unwrap())
}

fn session(capacity: Option<usize>) -> Session<'static> {
    let opts = SessionOptions {
        criterion: Box::new(Approx::new(0.6).unwrap()),
        window: WindowConfig::new(4, 16).unwrap(),
        moments: MomentsMode::Update,
        capacity,
        kv_dtype: Default::default(),
    };
    Session::new(model(), opts).unwrap()
}

fn cfg(n: usize, seed: u64) -> GenerateConfig {
    GenerateConfig {
        max_new_tokens: n,
        stop_at_eos: false,
        stop_strings: vec![],
        sampling: SamplingParams {
            temperature: 0.9,
            top_k: 40,
            top_p: 0.95,
            seed,
        },
    }
}

#[test]
fn the_same_seed_gives_the_same_tokens_and_another_seed_other_tokens() {
    let prompt = model()
        .tokenizer()
        .encode("Once upon a time, in a small village by the sea,")
        .unwrap();
    let run = |seed| {
        generate(
            &mut session(None),
            &prompt,
            &cfg(24, seed),
            &mut |_| {},
            &mut |_, _| {},
        )
        .unwrap()
    };
    let (a, b, c) = (run(7), run(7), run(8));
    assert_eq!(a.generated_ids, b.generated_ids);
    assert_eq!(a.text, b.text);
    assert_ne!(a.generated_ids, c.generated_ids);
}

#[test]
fn generation_stops_at_the_context_limit() {
    let prompt = model()
        .tokenizer()
        .encode("The capital of France is")
        .unwrap();
    let capacity = prompt.len() + 10;
    let g = generate(
        &mut session(Some(capacity)),
        &prompt,
        &cfg(100, 1),
        &mut |_| {},
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!(g.stop, StopReason::ContextFull);
    // the last sampled token is returned without being fed back: capacity - prompt + 1
    assert_eq!(g.generated_ids.len(), capacity - prompt.len() + 1);
    // a prompt as long as the capacity is refused up front
    let long: Vec<u32> = prompt.iter().cycle().take(capacity + 1).copied().collect();
    let err = generate(
        &mut session(Some(capacity)),
        &long,
        &cfg(1, 1),
        &mut |_| {},
        &mut |_, _| {},
    )
    .unwrap_err();
    assert!(err.to_string().contains("context full"), "{err}");
}

#[test]
fn a_prompt_of_only_special_tokens_generates() {
    let prompt = model()
        .tokenizer()
        .encode("<|im_start|><|im_end|>")
        .unwrap();
    assert_eq!(prompt, vec![1, 2]);
    let g = generate(
        &mut session(None),
        &prompt,
        &cfg(4, 0),
        &mut |_| {},
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!(g.generated_ids.len(), 4);
}

#[test]
fn on_text_can_interrupt_generation_after_the_token_it_saw() {
    let prompt = model()
        .tokenizer()
        .encode("Once upon a time, in a small village by the sea,")
        .unwrap();
    let mut calls = 0;
    let g = qada_model::generate_until(
        &mut session(None),
        &prompt,
        &cfg(20, 3),
        &mut |_| {
            calls += 1;
            if calls == 5 {
                std::ops::ControlFlow::Break(())
            } else {
                std::ops::ControlFlow::Continue(())
            }
        },
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!(g.stop, StopReason::Interrupted);
    assert_eq!(g.generated_ids.len(), 5);
    // the tokens so far are those of an uninterrupted run
    let full = generate(
        &mut session(None),
        &prompt,
        &cfg(20, 3),
        &mut |_| {},
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!(g.generated_ids, full.generated_ids[..5]);
}

#[test]
fn a_prompt_run_in_parts_of_whole_blocks_gives_the_logits_of_one_prefill() {
    use qada_model::PREFILL_BLOCK;
    // more than two blocks of text, so the parts are a block, a block and a rest
    let text = "The lighthouse keeper counted the ships that passed each night. ".repeat(120);
    let prompt = model().tokenizer().encode(&text).unwrap();
    assert!(prompt.len() > 2 * PREFILL_BLOCK + 10, "{}", prompt.len());
    let mut whole = session(None);
    let want = whole.prefill(&prompt, &mut |_, _| {}).unwrap().to_vec();

    let mut parts = session(None);
    parts
        .extend(&prompt[..PREFILL_BLOCK], &mut |_, _| {})
        .unwrap();
    let first_block = parts.checkpoint();
    parts
        .extend(&prompt[PREFILL_BLOCK..2 * PREFILL_BLOCK], &mut |_, _| {})
        .unwrap();
    let got = parts
        .prefill(&prompt[2 * PREFILL_BLOCK..], &mut |_, _| {})
        .unwrap()
        .to_vec();
    assert_eq!(
        got, want,
        "parts of whole blocks compute what one prefill does"
    );
    // the same in one call: `between` sees every whole block but the last part, and may stop
    // the prompt at one
    use std::ops::ControlFlow;
    let mut seen = Vec::new();
    let mut in_parts = session(None);
    let flow = in_parts
        .prefill_in_parts(&prompt, |s| {
            seen.push(s.len());
            ControlFlow::<()>::Continue(())
        })
        .unwrap();
    assert_eq!(flow, ControlFlow::Continue(&want[..]));
    let blocks: Vec<usize> = (1..=(prompt.len() - 1) / PREFILL_BLOCK)
        .map(|k| k * PREFILL_BLOCK)
        .collect();
    assert_eq!(seen, blocks);
    let mut stopped = session(None);
    let flow = stopped
        .prefill_in_parts(&prompt, |_| ControlFlow::Break(7))
        .unwrap();
    assert_eq!(flow, ControlFlow::Break(7));
    assert_eq!(stopped.len(), PREFILL_BLOCK);

    // decoding ends prefill: a later part is refused
    parts.step(prompt[0]).unwrap();
    assert!(parts.extend(&prompt[..1], &mut |_, _| {}).is_err());

    // back to the first block, then the rest as one part: the same logits again, and the
    // same greedy continuation as the whole prompt's
    parts.restore(&first_block).unwrap();
    assert_eq!(parts.len(), PREFILL_BLOCK);
    let again = parts
        .prefill(&prompt[PREFILL_BLOCK..], &mut |_, _| {})
        .unwrap()
        .to_vec();
    assert_eq!(again, want);
    let greedy = GenerateConfig {
        sampling: SamplingParams::default(),
        ..cfg(12, 0)
    };
    let a = qada_model::generate_after_prefill(&mut parts, &prompt, 0.0, &greedy, &mut |_| {
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
    let b = qada_model::generate_after_prefill(&mut whole, &prompt, 0.0, &greedy, &mut |_| {
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(a.generated_ids, b.generated_ids);
}

/// A session made from an `Arc<Model>` holds its own share: it outlives every other handle,
/// moves to another thread, and computes what a session borrowing the model computes.
#[test]
fn a_session_holding_an_arc_outlives_the_callers_handle_and_decodes_the_same() {
    let opts = || SessionOptions::new(Box::new(Approx::new(0.6).unwrap()), WindowConfig::PAPER);
    let shared =
        std::sync::Arc::new(Model::load(&common::model_path(), &LoadOptions::default()).unwrap());
    let weak = std::sync::Arc::downgrade(&shared);
    let prompt = shared
        .tokenizer()
        .encode("The sea was calm that night")
        .unwrap();
    let mut owned: Session<'static> = Session::new(shared, opts()).unwrap();
    // the caller's handle is gone; the session's share keeps the model
    assert!(weak.upgrade().is_some());
    let from_thread = std::thread::spawn(move || {
        owned.prefill(&prompt, &mut |_, _| {}).unwrap();
        let logits = owned.step(42).unwrap().to_vec();
        (logits, owned.model_handle())
    });
    let (logits, handle) = from_thread.join().unwrap();
    let mut borrowed = Session::new(&*handle, opts()).unwrap();
    let prompt = handle
        .tokenizer()
        .encode("The sea was calm that night")
        .unwrap();
    borrowed.prefill(&prompt, &mut |_, _| {}).unwrap();
    assert_eq!(borrowed.step(42).unwrap(), &logits[..]);
    drop(borrowed);
    drop(handle);
    // the last share dropped with the session's handle: the model is freed
    assert!(weak.upgrade().is_none());
}
