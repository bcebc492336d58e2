//! The tokenizer a GGUF file describes (`tokenizer.ggml.*`), built with the `tokenizers` crate.
//!
//! `tokenizer.ggml.model` picks how the vocabulary is read:
//! - `gpt2`: byte-level BPE with the file's merges and pre-tokenizer (`gpt2.rs`);
//! - `llama`: SentencePiece BPE rebuilt from pieces, scores and types (`spm.rs`), its merges
//!   derived from the scores (`merges.rs`, which finds the splits of a piece with
//!   `piece_index.rs`).
//!
//! Both give a `Vocabulary`; what they share is read here: BOS, EOS and unknown ids, whether to
//! add a BOS, and the chat template (`chat.rs`). [`Tokenizer::encode`] is the one place a BOS is
//! added, when `tokenizer.ggml.add_bos_token` says so: chat templates render without it, and
//! [`Tokenizer::decode`] drops that BOS again, so that `decode(encode(x)) == x`.

pub(crate) mod chat;
mod gpt2;
mod merges;
mod piece_index;
mod spm;
mod stream;

pub use chat::{ChatFormat, ChatMessage, ChatTemplate, TemplateOrigin};
pub use stream::StreamDecoder;

use tokenizers::Tokenizer as HfTokenizer;

use crate::family::Family;

use crate::gguf::GgufFile;
use crate::{ModelError, Result};

/// What a vocabulary reader hands back: the `tokenizers` pipeline and what decoding needs.
pub(super) struct Vocabulary {
    /// Added tokens, normalizer, pre-tokenizer and BPE model.
    inner: HfTokenizer,
    /// Bytes of every token (special tokens: their text).
    token_bytes: Vec<Vec<u8>>,
    /// Control tokens, recognized wherever they appear in text.
    special: Vec<bool>,
    /// The pre-tokenizer name from the file (`tokenizer.ggml.pre`).
    pre: String,
    /// Bytes that have a token of their own (byte-level BPE needs one for every byte; some
    /// vocabularies, SmolLM2's among them, lack a few, and such bytes are dropped by encoding;
    /// SentencePiece's byte fallback has all 256).
    byte_has_token: [bool; 256],
}

/// A tokenizer read from a GGUF file.
pub struct Tokenizer {
    vocab: Vocabulary,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    chat: Option<ChatTemplate>,
    /// Why the file's template cannot be rendered, when it cannot.
    chat_problem: Option<String>,
    /// Tokens that end a generation: EOS, the file's EOT, and the special end-of-turn tokens.
    end_of_generation: Vec<u32>,
}

/// Special tokens that end a turn in the chat formats of the families this build runs
/// (llama.cpp stops on the same texts).
const END_OF_TURN: [&str; 4] = ["<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|endoftext|>"];

fn err(e: impl std::fmt::Display) -> ModelError {
    ModelError::Tokenizer(e.to_string())
}

/// The token id at `key`, if the file has one; an id past the vocabulary is an error.
fn token_id(f: &GgufFile, key: &str, n_tokens: usize) -> Result<Option<u32>> {
    if f.get(key).is_none() {
        return Ok(None);
    }
    let v = f.get_u64(key)?;
    if v >= n_tokens as u64 {
        return Err(ModelError::BadMetadata {
            key: key.into(),
            found: v.to_string(),
            reason: format!(
                "past the vocabulary of {n_tokens} tokens (tokenizer.ggml.tokens): the file is \
                 inconsistent"
            ),
        });
    }
    Ok(Some(v as u32))
}

impl Tokenizer {
    /// Build the tokenizer the file describes.
    pub fn from_gguf(f: &GgufFile) -> Result<Self> {
        let model = f.get_str("tokenizer.ggml.model")?;
        let vocab = match model {
            "gpt2" => gpt2::build(f)?,
            "llama" => spm::build(f)?,
            other => {
                return Err(err(format!(
                    "tokenizer model {other:?} is not supported (byte-level BPE \"gpt2\", \
                     SentencePiece BPE \"llama\")"
                )))
            }
        };
        let n = vocab.token_bytes.len();
        let bos = token_id(f, "tokenizer.ggml.bos_token_id", n)?;
        let eos = token_id(f, "tokenizer.ggml.eos_token_id", n)?;
        token_id(f, "tokenizer.ggml.unknown_token_id", n)?;
        let add_bos = f
            .get("tokenizer.ggml.add_bos_token")
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        if add_bos && bos.is_none() {
            return Err(ModelError::BadMetadata {
                key: "tokenizer.ggml.add_bos_token and tokenizer.ggml.bos_token_id".into(),
                found: "true and absent".into(),
                reason: "a BOS token must be added but the file names none".into(),
            });
        }
        let text_of = |id: Option<u32>| {
            id.map(|i| String::from_utf8_lossy(&vocab.token_bytes[i as usize]).into_owned())
                .unwrap_or_default()
        };
        let (bos_text, eos_text) = (text_of(bos), text_of(eos));
        let chat = match f.get("tokenizer.chat_template") {
            Some(_) => Some(ChatTemplate::new(
                f.get_str("tokenizer.chat_template")?,
                TemplateOrigin::File,
                &bos_text,
                &eos_text,
                add_bos,
            )),
            // the only place the tokenizer reads the architecture: its family's template
            None => f
                .get("general.architecture")
                .and_then(|v| v.as_str())
                .and_then(|a| {
                    let format = Family::by_name(a)?.chat?;
                    Some(ChatTemplate::family_default(
                        a, format, &bos_text, &eos_text, add_bos,
                    ))
                }),
        };
        // a template minijinja cannot compile leaves the model usable without one
        let (chat, chat_problem) = match chat {
            None => (None, None),
            Some(Ok(t)) => (Some(t), None),
            Some(Err(e)) => (None, Some(e.to_string())),
        };
        let eot = token_id(f, "tokenizer.ggml.eot_token_id", n)?;
        let mut end_of_generation: Vec<u32> = eos.into_iter().chain(eot).collect();
        for (id, bytes) in vocab.token_bytes.iter().enumerate() {
            if vocab.special[id] && END_OF_TURN.iter().any(|t| t.as_bytes() == bytes.as_slice()) {
                end_of_generation.push(id as u32);
            }
        }
        end_of_generation.sort_unstable();
        end_of_generation.dedup();
        Ok(Tokenizer {
            vocab,
            bos,
            eos,
            add_bos,
            chat,
            chat_problem,
            end_of_generation,
        })
    }

    /// Token ids of `text`; special tokens written in the text are recognized. A BOS token is
    /// prepended when the file asks for it (`tokenizer.ggml.add_bos_token`).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.vocab.inner.encode(text, false).map_err(err)?;
        let mut ids = Vec::with_capacity(enc.len() + 1);
        if self.add_bos {
            if let Some(b) = self.bos {
                ids.push(b);
            }
        }
        ids.extend_from_slice(enc.get_ids());
        Ok(ids)
    }

    /// Token ids of `text` that continues a sequence begun by [`Tokenizer::encode`]: the same
    /// ids, never a BOS.
    pub fn encode_continuation(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.vocab.inner.encode(text, false).map_err(err)?;
        Ok(enc.get_ids().to_vec())
    }

    /// True when [`Tokenizer::encode`] prepends a BOS token.
    pub fn adds_bos(&self) -> bool {
        self.add_bos && self.bos.is_some()
    }

    /// The bytes of `text` that no token can represent: [`Tokenizer::encode`] drops them (as the
    /// model's own tokenizer does), so callers can say so. Returns `(byte offset, byte)`.
    pub fn unrepresentable(&self, text: &str) -> Vec<(usize, u8)> {
        text.bytes()
            .enumerate()
            .filter(|&(_, b)| !self.vocab.byte_has_token[b as usize])
            .collect()
    }

    /// The bytes a token stands for (the text of a special token).
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        self.vocab
            .token_bytes
            .get(id as usize)
            .map(|b| b.as_slice())
    }

    /// The token's string as stored in the file (byte-level characters, or SentencePiece
    /// pieces with U+2581 for a space).
    pub fn token_str(&self, id: u32) -> Option<String> {
        self.vocab.inner.id_to_token(id)
    }

    /// True for control tokens (and SentencePiece's unknown token), which text can spell.
    pub fn is_special(&self, id: u32) -> bool {
        self.vocab
            .special
            .get(id as usize)
            .copied()
            .unwrap_or(false)
    }

    /// Text of a sequence of ids (invalid UTF-8 replaced), special tokens included, except a
    /// leading BOS when [`Tokenizer::encode`] adds one: `decode(encode(x)) == x`.
    pub fn decode(&self, ids: &[u32]) -> String {
        let ids = match ids.split_first() {
            Some((&first, rest)) if self.adds_bos() && Some(first) == self.bos => rest,
            _ => ids,
        };
        let mut bytes = Vec::new();
        for &id in ids {
            if let Some(b) = self.token_bytes(id) {
                bytes.extend_from_slice(b);
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.vocab.token_bytes.len()
    }

    /// Beginning-of-sequence token.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// End-of-sequence token.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// Tokens that end a generation: EOS, `tokenizer.ggml.eot_token_id`, and the special
    /// end-of-turn tokens of the chat formats (`<end_of_turn>`, `<|im_end|>`, `<|eot_id|>`,
    /// `<|endoftext|>`), sorted.
    pub fn end_of_generation(&self) -> &[u32] {
        &self.end_of_generation
    }

    /// The pre-tokenizer name from the file.
    pub fn pre_tokenizer(&self) -> &str {
        &self.vocab.pre
    }

    /// The chat template: the file's, when this build understands it, or else, for a file
    /// without one, its family's published template ([`ChatTemplate::origin`] says which).
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.chat.as_ref()
    }

    /// Why the file's chat template cannot be used, when it has one that does not compile.
    pub fn chat_template_problem(&self) -> Option<&str> {
        self.chat_problem.as_deref()
    }
}
