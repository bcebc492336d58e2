//! What every generated task hands the evaluation loop: the prompt's tokens, the strings a
//! correct answer contains, and how many tokens an answer may take. The score is RULER's
//! `string_match_all`, [`crate::metrics::recall`]: the share of the expected strings the
//! answer contains.

use std::ops::Range;

use qada_model::{Result, Sampler, SamplingParams, Session, StreamDecoder};

/// One prompt of any task, ready to prefill.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskPrompt {
    /// The task as `qada eval --task` names it (`passkey`, `niah-single`, `vt`, ...).
    pub task: &'static str,
    /// The whole prompt, chat template included.
    pub ids: Vec<u32>,
    /// The strings a correct answer contains, each counted once.
    pub expected: Vec<String>,
    /// Tokens generated for the answer.
    pub answer_tokens: usize,
    /// The depth asked for, in `[0, 1]`, for tasks that hide something at a depth.
    pub depth: Option<f64>,
    /// Where in `ids` the facts the answer is read from sit (needles, chain links); empty for
    /// tasks whose answer is spread over the whole context (word counting).
    pub needles: Vec<Range<usize>>,
    /// Where the context (haystack, list or text) is in `ids`, needles included.
    pub haystack: Range<usize>,
}

impl TaskPrompt {
    /// The score of an answer: the share of [`TaskPrompt::expected`] it contains, ignoring
    /// case, in `[0, 1]`.
    pub fn score(&self, answer: &str) -> f64 {
        crate::metrics::recall(answer, &self.expected)
    }

    /// Prompt length in tokens.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True for an empty prompt (never built by a task).
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// The answer of `session` as it stands (after a prefill or a restore): up to `max_tokens`
/// greedy tokens, stopping at end of sequence, decoded to text. Every token is stepped, so the
/// session's accounting covers the whole answer.
pub fn answer(session: &mut Session<'_>, max_tokens: usize) -> Result<String> {
    let model = session.model_handle();
    let tok = &model.tokenizer();
    let mut sampler = Sampler::new(SamplingParams::default())?;
    let mut next = sampler.sample(session.logits())?;
    let mut dec = StreamDecoder::new();
    let mut text = String::new();
    for _ in 0..max_tokens {
        if Some(next) == tok.eos() {
            break;
        }
        text.push_str(&dec.push(tok, next));
        next = sampler.sample(session.step(next)?)?;
    }
    text.push_str(&dec.finish());
    Ok(text)
}
