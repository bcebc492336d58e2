//! The passkey task (RULER-style needle in a haystack): a 5-digit pass key stated in one
//! sentence pair hidden at a depth of haystack text, asked for at the end in the chat template.
//! An answer succeeds when it contains the key.
//!
//! The prompt, in tokens: `prefix | hay[..at] | needle | hay[at..] | suffix`, where `prefix` is
//! the chat template up to the user message, `hay` the first `len - overhead` tokens of the
//! haystack, `at` the sentence start nearest at or before `depth * |hay|` (within
//! [`SENTENCE_SEARCH`] tokens), and `suffix` the question and the assistant turn's start.

use std::ops::Range;

use qada_model::{ModelError, Result, Session, Tokenizer};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::task::TaskPrompt;

/// Tokens generated for an answer (a 5-digit key and a little slack).
pub const ANSWER_TOKENS: usize = 8;

/// How far before the requested depth (in haystack tokens) the needle may move to start at a
/// sentence.
pub const SENTENCE_SEARCH: usize = 200;

/// Haystack tokens a prompt must keep beyond its fixed parts.
pub const MIN_HAYSTACK: usize = 16;

/// The keys: 5-digit numbers, uniform.
const KEYS: Range<u32> = 10_000..100_000;

/// Builds passkey prompts for one tokenizer and its chat template.
pub struct PasskeyTask<'t> {
    tok: &'t Tokenizer,
    /// The template before the user message, encoded.
    prefix: Vec<u32>,
    /// The template after the user message (the assistant turn's start).
    post: String,
}

/// One passkey prompt and what it hides.
#[derive(Clone, Debug, PartialEq)]
pub struct PasskeyPrompt {
    /// The whole prompt, `len` tokens.
    pub ids: Vec<u32>,
    /// The pass key.
    pub key: u32,
    /// The depth asked for, in `[0, 1]`.
    pub depth: f64,
    /// Where the needle's tokens are in `ids`.
    pub needle: Range<usize>,
    /// Where the haystack is in `ids`, needle included.
    pub haystack: Range<usize>,
}

impl PasskeyPrompt {
    /// The answer expected: the key's decimal digits.
    pub fn expected(&self) -> String {
        self.key.to_string()
    }

    /// The score of an answer, [`crate::metrics::recall`] of the key: 1 if the answer
    /// contains it, else 0.
    pub fn score(&self, answer: &str) -> f64 {
        crate::metrics::recall(answer, &[self.expected()])
    }

    /// The prompt as every task gives it to the evaluation loop.
    pub fn to_task(&self) -> TaskPrompt {
        TaskPrompt {
            task: "passkey",
            ids: self.ids.clone(),
            expected: vec![self.expected()],
            answer_tokens: ANSWER_TOKENS,
            depth: Some(self.depth),
            needles: vec![self.needle.clone()],
            haystack: self.haystack.clone(),
        }
    }

    /// The depth the needle got: haystack tokens before it over all haystack tokens.
    pub fn needle_depth(&self) -> f64 {
        let hay = self.haystack.len() - self.needle.len();
        (self.needle.start - self.haystack.start) as f64 / hay as f64
    }
}

impl<'t> PasskeyTask<'t> {
    /// The task for `tok`; an error if it has no chat template to ask the question in.
    pub fn new(tok: &'t Tokenizer) -> Result<Self> {
        let chat = tok.chat_template().ok_or_else(|| {
            ModelError::Input(
                "the passkey task asks its question in the chat template, and this model has none"
                    .into(),
            )
        })?;
        let rendered = chat.render_user("\u{1}", None)?;
        let (pre, post) = rendered.split_once('\u{1}').ok_or_else(|| {
            ModelError::Input("the chat template dropped the user message".into())
        })?;
        Ok(PasskeyTask {
            tok,
            prefix: tok.encode(pre)?,
            post: post.to_string(),
        })
    }

    /// The prompts of one seed: for each length, for each depth, a key drawn in that order
    /// from a generator seeded with `seed`, hidden in the tokens of `haystack`. The same
    /// arguments give the same prompts.
    pub fn trials(
        &self,
        haystack: &str,
        lengths: &[usize],
        depths: &[f64],
        seed: u64,
    ) -> Result<Vec<PasskeyPrompt>> {
        let mut rng = StdRng::seed_from_u64(seed);
        let hay = self.tok.encode_continuation(haystack)?;
        let mut out = Vec::with_capacity(lengths.len() * depths.len());
        for &len in lengths {
            for &depth in depths {
                let key: u32 = rng.gen_range(KEYS);
                out.push(self.prompt(&hay, len, depth, key)?);
            }
        }
        Ok(out)
    }

    /// A prompt of exactly `len` tokens hiding `key` at `depth` (0: start, 1: end) of the
    /// leading tokens of `haystack`.
    pub fn prompt(
        &self,
        haystack: &[u32],
        len: usize,
        depth: f64,
        key: u32,
    ) -> Result<PasskeyPrompt> {
        let tok = self.tok;
        if !(0.0..=1.0).contains(&depth) {
            return Err(ModelError::Input(format!(
                "passkey depth {depth} is outside [0, 1]"
            )));
        }
        let needle = tok.encode_continuation(&format!(
            " The pass key is {key}. Remember it. {key} is the pass key. "
        ))?;
        let suffix = tok.encode_continuation(&format!(
            "\n\nWhat is the pass key? Answer with the number only.{}The pass key is",
            self.post
        ))?;
        let overhead = self.prefix.len() + needle.len() + suffix.len();
        if len <= overhead + MIN_HAYSTACK {
            return Err(ModelError::Input(format!(
                "context length {len} is too short for the passkey prompt: its fixed parts take \
                 {overhead} tokens and the haystack needs more than {MIN_HAYSTACK}"
            )));
        }
        if haystack.len() < len {
            return Err(ModelError::Input(format!(
                "the haystack has {} tokens, a passkey prompt of length {len} needs at least {len}",
                haystack.len()
            )));
        }
        let hay = &haystack[..len - overhead];
        let target = (depth * hay.len() as f64) as usize;
        let boundary = |i: usize| {
            i == 0
                || tok
                    .token_bytes(hay[i - 1])
                    .is_some_and(|b| b.ends_with(b".") || b.ends_with(b"\n"))
        };
        let at = (target.saturating_sub(SENTENCE_SEARCH)..=target)
            .rev()
            .find(|&i| boundary(i))
            .unwrap_or(target);
        let mut ids = Vec::with_capacity(len);
        ids.extend_from_slice(&self.prefix);
        ids.extend_from_slice(&hay[..at]);
        ids.extend_from_slice(&needle);
        ids.extend_from_slice(&hay[at..]);
        ids.extend_from_slice(&suffix);
        let start = self.prefix.len();
        Ok(PasskeyPrompt {
            ids,
            key,
            depth,
            needle: start + at..start + at + needle.len(),
            haystack: start..start + hay.len() + needle.len(),
        })
    }
}

/// The answer of `session` as it stands: up to [`ANSWER_TOKENS`] greedy tokens
/// ([`super::task::answer`]).
pub fn answer(session: &mut Session<'_>) -> Result<String> {
    super::task::answer(session, ANSWER_TOKENS)
}
