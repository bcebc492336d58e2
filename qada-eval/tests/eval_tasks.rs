//! The evaluation tasks (`qada_eval::tasks`) on the real model's tokenizer and weights.

mod common;

use std::sync::OnceLock;

use qada_core::{Dense, Window};
use qada_eval::tasks::passkey::{self, SENTENCE_SEARCH};
use qada_eval::{FidelityReference, FidelityTotals, PasskeyTask};
use qada_kv::WindowConfig;
use qada_model::{LoadOptions, Model, ModelError, Session, SessionOptions};

fn model() -> &'static Model {
    static M: OnceLock<Model> = OnceLock::new();
    M.get_or_init(|| Model::load(&common::model_path(), &LoadOptions::default()).unwrap())
}

/// Haystack text without digits, a sentence every dozen tokens or so.
fn haystack(sentences: usize) -> String {
    const SUBJECTS: &[&str] = &["The river", "A farmer", "The old bridge", "Our council"];
    const VERBS: &[&str] = &["watched", "remembered", "crossed", "spoke of"];
    const OBJECTS: &[&str] = &[
        "the long winter",
        "a quiet harbor",
        "the northern hills",
        "many small towns",
        "the spring market",
    ];
    (0..sentences)
        .map(|i| {
            format!(
                "{} {} {} and {}. ",
                SUBJECTS[i % SUBJECTS.len()],
                VERBS[(i / 4) % VERBS.len()],
                OBJECTS[(i / 3) % OBJECTS.len()],
                OBJECTS[(i / 7 + 1) % OBJECTS.len()]
            )
        })
        .collect()
}

fn needle_text(key: u32) -> String {
    format!(" The pass key is {key}. Remember it. {key} is the pass key. ")
}

#[test]
fn the_needle_sits_at_the_requested_depth_at_a_sentence_start() {
    let tok = &model().tokenizer();
    let task = PasskeyTask::new(tok).unwrap();
    let hay = tok.encode(&haystack(400)).unwrap();
    for len in [200, 600, 1500] {
        for depth in [0.0, 0.1, 0.37, 0.5, 0.9, 1.0] {
            let p = task.prompt(&hay, len, depth, 52_917).unwrap();
            assert_eq!(p.ids.len(), len, "length {len}");
            assert_eq!(
                &p.ids[p.needle.clone()],
                &tok.encode(&needle_text(52_917)).unwrap()[..]
            );
            assert!(p.haystack.start <= p.needle.start && p.needle.end <= p.haystack.end);
            // the haystack around the needle is the haystack's leading tokens, unbroken
            let mut around = p.ids[p.haystack.start..p.needle.start].to_vec();
            around.extend_from_slice(&p.ids[p.needle.end..p.haystack.end]);
            assert_eq!(around, hay[..around.len()]);
            // at or before the depth, within one sentence (these are under 20 tokens)
            let hay_len = p.haystack.len() - p.needle.len();
            let target = (depth * hay_len as f64) as usize;
            let at = p.needle.start - p.haystack.start;
            assert!(
                at <= target && target - at < 20.min(SENTENCE_SEARCH),
                "len {len} depth {depth}: needle at {at}, target {target}"
            );
            assert!((p.needle_depth() - depth).abs() <= 20.0 / hay_len as f64);
            let before = tok.decode(&p.ids[..p.needle.start]);
            assert!(
                at == 0 || before.ends_with('.'),
                "len {len} depth {depth}: the needle does not start a sentence: {:?}",
                &before[before.len().saturating_sub(40)..]
            );
        }
    }
}

#[test]
fn the_expected_answer_is_derivable_from_the_prompt_alone() {
    let tok = &model().tokenizer();
    let task = PasskeyTask::new(tok).unwrap();
    let prompts = task
        .trials(&haystack(300), &[300, 900], &[0.2, 0.8], 11)
        .unwrap();
    assert_eq!(prompts.len(), 4);
    for p in &prompts {
        let text = tok.decode(&p.ids);
        // the only digits in the prompt are the key, stated twice in the needle
        let numbers: Vec<&str> = text
            .split(|c: char| !c.is_ascii_digit())
            .filter(|s| !s.is_empty())
            .collect();
        assert_eq!(numbers, [p.expected().as_str(); 2], "{text}");
        assert!(text.contains(&format!("The pass key is {}.", p.expected())));
        assert!(text.ends_with("assistant\nThe pass key is"), "{text}");
        assert!(text.contains("What is the pass key? Answer with the number only."));
        assert!((10_000..100_000).contains(&p.key));
        assert_eq!(p.score(&format!(" {}.", p.key)), 1.0);
        assert_eq!(p.score(&format!(" {}.", p.key / 10)), 0.0);
    }
}

#[test]
fn the_same_seed_gives_the_same_prompts_and_another_seed_other_keys() {
    let tok = &model().tokenizer();
    let task = PasskeyTask::new(tok).unwrap();
    let hay = haystack(200);
    let (lengths, depths) = ([256, 512], [0.1, 0.5, 0.9]);
    let a = task.trials(&hay, &lengths, &depths, 1000).unwrap();
    let b = task.trials(&hay, &lengths, &depths, 1000).unwrap();
    assert_eq!(a, b);
    let c = task.trials(&hay, &lengths, &depths, 1001).unwrap();
    let keys = |v: &[qada_eval::PasskeyPrompt]| v.iter().map(|p| p.key).collect::<Vec<_>>();
    assert_ne!(keys(&a), keys(&c));
    assert!(a.iter().zip(&c).all(|(x, y)| x.ids != y.ids));
    // within one seed the keys vary from trial to trial
    let mut distinct = keys(&a);
    distinct.dedup();
    assert!(distinct.len() > 1, "{:?}", keys(&a));
}

#[test]
fn prompts_that_cannot_be_built_are_input_errors() {
    let tok = &model().tokenizer();
    let task = PasskeyTask::new(tok).unwrap();
    let hay = tok.encode(&haystack(50)).unwrap();
    let short = task.prompt(&hay, 60, 0.5, 12_345);
    assert!(matches!(short, Err(ModelError::Input(ref m)) if m.contains("too short")));
    let thin = task.prompt(&hay, hay.len() + 1, 0.5, 12_345);
    assert!(matches!(thin, Err(ModelError::Input(ref m)) if m.contains("haystack")));
    let deep = task.prompt(&hay, 200, 1.5, 12_345);
    assert!(matches!(deep, Err(ModelError::Input(_))));
}

#[test]
fn dense_decoding_finds_a_passkey_in_a_short_prompt() {
    let m = model();
    let task = PasskeyTask::new(m.tokenizer()).unwrap();
    let prompt = &task.trials(&haystack(100), &[400], &[0.5], 3).unwrap()[0];
    let mut session = Session::new(
        m,
        SessionOptions::new(Box::new(Dense), WindowConfig::new(16, 128).unwrap()),
    )
    .unwrap();
    let cp = qada_eval::tasks::dense_prefill(&mut session, &prompt.ids).unwrap();
    let answer = passkey::answer(&mut session).unwrap();
    assert!(session.len() <= 400 + passkey::ANSWER_TOKENS);
    assert_eq!(
        prompt.score(&answer),
        1.0,
        "answer {answer:?}, key {}",
        prompt.key
    );
    // from the checkpoint the same answer again
    session.restore(&cp).unwrap();
    assert_eq!(passkey::answer(&mut session).unwrap(), answer);
}

fn text_ids(n: usize) -> Vec<u32> {
    let ids = model().tokenizer().encode(&haystack(n / 8)).unwrap();
    assert!(ids.len() > n, "{} tokens", ids.len());
    ids
}

#[test]
fn dense_against_itself_has_zero_divergence_and_full_agreement() {
    let m = model();
    let ids = text_ids(400);
    let mut session = Session::new(
        m,
        SessionOptions::new(Box::new(Dense), WindowConfig::new(16, 128).unwrap()),
    )
    .unwrap();
    let reference = FidelityReference::new(&mut session, &ids, 300, 6).unwrap();
    assert_eq!(reference.steps(), 6);
    session.restore(reference.checkpoint()).unwrap();
    let steps = reference.compare(&mut session).unwrap();
    assert_eq!(steps.len(), 6);
    let mut totals = FidelityTotals::default();
    for s in &steps {
        assert!(s.nll > 0.0 && s.nll.is_finite());
        assert!(s.delta_nll.abs() < 1e-9, "{s:?}");
        assert!(s.kl < 1e-9, "{s:?}");
        assert!(s.top1_agreement);
        totals.add(s);
    }
    let means = totals.means();
    assert_eq!(totals.steps, 6);
    assert_eq!(means.top1_agreement, 1.0);
    let mean_nll = steps.iter().map(|s| s.nll).sum::<f64>() / 6.0;
    assert!((means.nll - mean_nll).abs() < 1e-12);
}

#[test]
fn a_window_alone_diverges_from_dense_and_a_session_must_be_restored_first() {
    let m = model();
    let ids = text_ids(400);
    let mut session = Session::new(
        m,
        SessionOptions::new(Box::new(Dense), WindowConfig::new(4, 16).unwrap()),
    )
    .unwrap();
    let reference = FidelityReference::new(&mut session, &ids, 300, 6).unwrap();
    // the session stands 6 steps past the checkpoint: refused
    assert!(matches!(
        reference.compare(&mut session),
        Err(ModelError::Input(_))
    ));
    session.restore(reference.checkpoint()).unwrap();
    session.set_criterion(Box::new(Window)).unwrap();
    let steps = reference.compare(&mut session).unwrap();
    let kl: f64 = steps.iter().map(|s| s.kl).sum();
    assert!(
        kl > 1e-3,
        "a 16-token window over 300 tokens matches dense: KL {kl}"
    );
    assert!(steps.iter().all(|s| s.kl >= 0.0 && s.nll.is_finite()));
    // too little text for the steps asked
    assert!(matches!(
        FidelityReference::new(&mut session, &ids[..305], 300, 6),
        Err(ModelError::Input(_))
    ));
}
