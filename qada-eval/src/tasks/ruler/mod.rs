//! RULER's synthetic tasks (NVIDIA RULER, `scripts/data/synthetic`), regenerated offline from a
//! seed over haystack text the caller passes (the evaluation half of the speech corpus):
//!
//! - `niah-single`, `niah-multikey`, `niah-multivalue`, `niah-multiquery` (`niah.rs`): needles
//!   "One of the special magic {type} for {key} is: {value}." hidden in the haystack;
//! - `vt` (`vt.rs`): a chain of variable assignments hidden in the haystack, every variable
//!   bound to the value asked for;
//! - `cwe` and `fwe` (`words.rs`): the most common words of a numbered list, the most frequent
//!   coded words of a Zipf-distributed text.
//!
//! Every prompt is exactly `len` tokens: `prefix | intro | context | question | answer prefix`,
//! where `prefix` is the chat template up to the user message, the question ends the user
//! message and the answer prefix follows the assistant turn's start (as RULER's
//! `answer_prefix`). The context takes whatever the fixed parts leave. Scoring is RULER's
//! `string_match_all` ([`TaskPrompt::score`]); [`solve`] reads the answer back from the
//! prompt's text alone.

mod niah;
mod solve;
mod values;
mod vt;
mod words;

pub use solve::solve;

use std::ops::Range;

use qada_model::{ModelError, Result, Tokenizer};
use rand::rngs::StdRng;
use rand::SeedableRng;

use super::passkey::SENTENCE_SEARCH;
use super::task::TaskPrompt;

/// Context tokens a prompt must keep beyond its needles.
pub const MIN_HAYSTACK: usize = 16;

/// One of RULER's synthetic tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RulerTask {
    /// One needle; its value is a 7-digit number, a word pair or a UUID, by `seed % 3`.
    NiahSingle,
    /// The needle asked for among 3 distractor needles with other keys.
    NiahMultikey,
    /// One key with 4 values in 4 needles, all asked for.
    NiahMultivalue,
    /// 4 keys with one value each, all asked for at once.
    NiahMultiquery,
    /// Variable tracking: every variable of a 5-link chain bound to the value asked for.
    Vt,
    /// Common-words extraction: the 10 most common words of a numbered list.
    Cwe,
    /// Frequent-words extraction: the 3 most frequent coded words of a Zipf-distributed text.
    Fwe,
}

impl RulerTask {
    /// Every task, in RULER's order.
    pub const ALL: [RulerTask; 7] = [
        RulerTask::NiahSingle,
        RulerTask::NiahMultikey,
        RulerTask::NiahMultivalue,
        RulerTask::NiahMultiquery,
        RulerTask::Vt,
        RulerTask::Cwe,
        RulerTask::Fwe,
    ];

    /// The task's name, as `qada eval --task` spells it.
    pub fn name(self) -> &'static str {
        match self {
            RulerTask::NiahSingle => "niah-single",
            RulerTask::NiahMultikey => "niah-multikey",
            RulerTask::NiahMultivalue => "niah-multivalue",
            RulerTask::NiahMultiquery => "niah-multiquery",
            RulerTask::Vt => "vt",
            RulerTask::Cwe => "cwe",
            RulerTask::Fwe => "fwe",
        }
    }

    /// The task named `s` ([`RulerTask::name`]).
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == s)
    }
}

/// Builds RULER prompts for one tokenizer and its chat template.
pub struct RulerPrompts<'t> {
    tok: &'t Tokenizer,
    /// The template before the user message, encoded.
    prefix: Vec<u32>,
    /// The template after the user message (the assistant turn's start).
    post: String,
}

/// A prompt but for its context: the user message before and after the context (the
/// question), the answer's start, the tokens an answer gets at least and the depth asked for.
struct Frame {
    task: RulerTask,
    intro: String,
    question: String,
    answer_prefix: String,
    answer_tokens: usize,
    depth: Option<f64>,
}

/// A context built to a token budget, with the ranges (in it) of the statements an answer
/// is read from.
struct Context {
    ids: Vec<u32>,
    needles: Vec<Range<usize>>,
}

impl<'t> RulerPrompts<'t> {
    /// The prompts for `tok`; an error if it has no chat template to ask the questions in.
    pub fn new(tok: &'t Tokenizer) -> Result<Self> {
        let chat = tok.chat_template().ok_or_else(|| {
            ModelError::Input(
                "the RULER tasks ask their questions in the chat template, and this model has none"
                    .into(),
            )
        })?;
        let rendered = chat.render_user("\u{1}", None)?;
        let (pre, post) = rendered.split_once('\u{1}').ok_or_else(|| {
            ModelError::Input("the chat template dropped the user message".into())
        })?;
        Ok(RulerPrompts {
            tok,
            prefix: tok.encode(pre)?,
            post: post.to_string(),
        })
    }

    /// One prompt of exactly `len` tokens for `task`, its context built from `haystack`
    /// (running prose: its leading tokens for the needle tasks and `vt`, its vocabulary for
    /// `cwe`). `depth` in `[0, 1]` places the first needle (`niah-*`) or the chain's first link
    /// (`vt`); `cwe` and `fwe` ignore it. The same arguments give the same prompt.
    pub fn prompt(
        &self,
        task: RulerTask,
        haystack: &str,
        len: usize,
        depth: f64,
        seed: u64,
    ) -> Result<TaskPrompt> {
        if !(0.0..=1.0).contains(&depth) {
            return Err(ModelError::Input(format!(
                "{} depth {depth} is outside [0, 1]",
                task.name()
            )));
        }
        // one stream per task, so that tasks of one seed draw unrelated keys and words
        let stream = 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(task as u64 + 1);
        let mut rng = StdRng::seed_from_u64(seed ^ stream);
        let p = match task {
            RulerTask::NiahSingle
            | RulerTask::NiahMultikey
            | RulerTask::NiahMultivalue
            | RulerTask::NiahMultiquery => {
                niah::prompt(self, task, haystack, len, depth, seed, &mut rng)?
            }
            RulerTask::Vt => vt::prompt(self, haystack, len, depth, &mut rng)?,
            RulerTask::Cwe => words::cwe(self, haystack, len, &mut rng)?,
            RulerTask::Fwe => words::fwe(self, len, &mut rng)?,
        };
        debug_assert_eq!(p.ids.len(), len);
        Ok(p)
    }

    /// The whole prompt of `len` tokens around the context `build` makes for the budget it is
    /// given (it must fill the budget exactly). An answer gets the frame's tokens, or those of
    /// `expected` and 8 more if that is more.
    fn compose(
        &self,
        len: usize,
        frame: Frame,
        expected: Vec<String>,
        build: impl FnOnce(usize) -> Result<Context>,
    ) -> Result<TaskPrompt> {
        let (tok, task) = (self.tok, frame.task);
        let intro = tok.encode_continuation(&frame.intro)?;
        let tail = tok.encode_continuation(&format!(
            "\n{}{}{}",
            frame.question, self.post, frame.answer_prefix
        ))?;
        let overhead = self.prefix.len() + intro.len() + tail.len();
        if len < overhead + MIN_HAYSTACK {
            return Err(ModelError::Input(format!(
                "context length {len} is too short for a {} prompt: its fixed parts take \
                 {overhead} tokens and the context needs at least {MIN_HAYSTACK} more",
                task.name()
            )));
        }
        let context = build(len - overhead)?;
        debug_assert_eq!(context.ids.len(), len - overhead);
        let start = self.prefix.len() + intro.len();
        let mut ids = Vec::with_capacity(len);
        ids.extend_from_slice(&self.prefix);
        ids.extend_from_slice(&intro);
        ids.extend_from_slice(&context.ids);
        ids.extend_from_slice(&tail);
        let answer = tok.encode_continuation(&format!(" {}", expected.join(", ")))?;
        Ok(TaskPrompt {
            task: task.name(),
            ids,
            answer_tokens: frame.answer_tokens.max(answer.len() + 8),
            expected,
            depth: frame.depth,
            needles: context
                .needles
                .iter()
                .map(|r| start + r.start..start + r.end)
                .collect(),
            haystack: start..start + context.ids.len(),
        })
    }

    /// The tokens of haystack text, written after a space (` To the Senate ...`) so that a
    /// statement inserted before its first token reads as a sentence of its own.
    fn haystack_tokens(&self, haystack: &str) -> Result<Vec<u32>> {
        self.tok
            .encode_continuation(&format!(" {}", haystack.trim_start()))
    }

    /// A context of exactly `budget` tokens: the leading tokens of `hay` with each statement
    /// inserted at the sentence start nearest at or before its depth (within
    /// [`SENTENCE_SEARCH`] tokens; ties keep the order given). A sentence start is a token
    /// beginning with a space after a token ending with a period (or the first token, when
    /// it begins with a space). The ranges are in the order of `statements`.
    fn weave(
        &self,
        task: RulerTask,
        hay: &[u32],
        budget: usize,
        statements: &[(f64, Vec<u32>)],
    ) -> Result<Context> {
        let inserted: usize = statements.iter().map(|(_, s)| s.len()).sum();
        if budget < inserted + MIN_HAYSTACK {
            return Err(ModelError::Input(format!(
                "the {} prompt's context has {budget} tokens, too few for its statements \
                 ({inserted} tokens) and {MIN_HAYSTACK} tokens of haystack: ask for a longer \
                 context",
                task.name()
            )));
        }
        let n = budget - inserted;
        if hay.len() < n {
            return Err(ModelError::Input(format!(
                "the haystack has {} tokens, the {} prompt needs {n}: pass more text",
                hay.len(),
                task.name()
            )));
        }
        let hay = &hay[..n];
        let starts = |i: usize| {
            self.tok
                .token_bytes(hay[i])
                .is_some_and(|b| b.starts_with(b" "))
        };
        let ends = |i: usize| {
            self.tok
                .token_bytes(hay[i])
                .is_some_and(|b| b.ends_with(b"."))
        };
        // a statement ` One ... .` sits between `end.` and ` Next`
        let boundary = |i: usize| i < n && starts(i) && (i == 0 || ends(i - 1));
        let mut at: Vec<(usize, usize)> = statements
            .iter()
            .enumerate()
            .map(|(k, &(depth, _))| {
                let target = ((depth * n as f64) as usize).min(n);
                let pos = (target.saturating_sub(SENTENCE_SEARCH)..=target)
                    .rev()
                    .find(|&i| boundary(i))
                    .unwrap_or(target);
                (pos, k)
            })
            .collect();
        at.sort();
        let mut ids = Vec::with_capacity(budget);
        let mut needles = vec![0..0; statements.len()];
        let mut from = 0;
        for (pos, k) in at {
            ids.extend_from_slice(&hay[from..pos]);
            from = pos;
            let s = &statements[k].1;
            needles[k] = ids.len()..ids.len() + s.len();
            ids.extend_from_slice(s);
        }
        ids.extend_from_slice(&hay[from..]);
        Ok(Context { ids, needles })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_names_round_trip_and_are_distinct() {
        for t in RulerTask::ALL {
            assert_eq!(RulerTask::from_name(t.name()), Some(t));
        }
        let mut names: Vec<_> = RulerTask::ALL.iter().map(|t| t.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 7);
        assert_eq!(RulerTask::from_name("passkey"), None);
    }
}
