//! The tokenizer a GGUF file describes (`tokenizer.ggml.*`), built with the `tokenizers` crate.
//!
//! Byte-level BPE (`tokenizer.ggml.model = "gpt2"`) with the pre-tokenizer the file names in
//! `tokenizer.ggml.pre`:
//! - `smollm`: digits split one by one, then the GPT-2 pattern;
//! - `gpt2` (or absent): the GPT-2 pattern;
//! - `llama-bpe`: the Llama 3 pattern (numbers in groups of up to three);
//! - `qwen2`: the Qwen2 pattern (digits one by one).
//!
//! Control tokens (`<|im_start|>` ...) are special: recognized wherever they appear in text.

use std::collections::HashMap;

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::tokenizer::SplitDelimiterBehavior;
use tokenizers::{AddedToken, Tokenizer as HfTokenizer};

use crate::gguf::GgufFile;
use crate::{ModelError, Result};

const LLAMA3_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// GGUF token types.
const TOKEN_CONTROL: i64 = 3;
const TOKEN_USER_DEFINED: i64 = 4;

/// A tokenizer read from a GGUF file.
pub struct Tokenizer {
    inner: HfTokenizer,
    /// Bytes of every token (special tokens: their text).
    token_bytes: Vec<Vec<u8>>,
    special: Vec<bool>,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    chat: Option<ChatTemplate>,
    pre: String,
    /// Bytes that have a token of their own (byte-level BPE needs one for every byte; some
    /// vocabularies, SmolLM2's among them, lack a few, and such bytes are dropped by encoding).
    byte_has_token: [bool; 256],
}

/// The GPT-2 byte-to-character table: printable bytes map to themselves, the rest to
/// characters from U+0100 on.
fn byte_chars() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..256u32 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        table[b as usize] = if printable {
            char::from_u32(b).expect("latin-1")
        } else {
            n += 1;
            char::from_u32(255 + n).expect("in range")
        };
    }
    table
}

fn err(e: impl std::fmt::Display) -> ModelError {
    ModelError::Tokenizer(e.to_string())
}

impl Tokenizer {
    /// Build the tokenizer the file describes.
    pub fn from_gguf(f: &GgufFile) -> Result<Self> {
        let model = f.get_str("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(err(format!(
                "tokenizer model {model:?} is not supported (only byte-level BPE, \"gpt2\")"
            )));
        }
        let pre = match f.get("tokenizer.ggml.pre") {
            None => "gpt2".to_string(),
            Some(_) => f.get_str("tokenizer.ggml.pre")?.to_string(),
        };
        let pre_tokenizer: PreTokenizerWrapper = match pre.as_str() {
            "smollm" => Sequence::new(vec![
                Digits::new(true).into(),
                ByteLevel::new(false, true, true).into(),
            ])
            .into(),
            "gpt2" | "default" => ByteLevel::new(false, true, true).into(),
            "llama-bpe" | "llama3" => Sequence::new(vec![
                Split::new(
                    SplitPattern::Regex(LLAMA3_PATTERN.into()),
                    SplitDelimiterBehavior::Isolated,
                    false,
                )
                .map_err(err)?
                .into(),
                ByteLevel::new(false, true, false).into(),
            ])
            .into(),
            "qwen2" => Sequence::new(vec![
                Split::new(
                    SplitPattern::Regex(QWEN2_PATTERN.into()),
                    SplitDelimiterBehavior::Isolated,
                    false,
                )
                .map_err(err)?
                .into(),
                ByteLevel::new(false, true, false).into(),
            ])
            .into(),
            other => {
                return Err(err(format!(
                    "pre-tokenizer {other:?} is not supported (smollm, gpt2, llama-bpe, qwen2); \
                     guessing would give wrong token ids"
                )))
            }
        };

        let tokens = f.get_array("tokenizer.ggml.tokens")?;
        let types = match f.get("tokenizer.ggml.token_type") {
            Some(_) => f.get_array("tokenizer.ggml.token_type")?.to_vec(),
            None => Vec::new(),
        };
        let merges_v = f.get_array("tokenizer.ggml.merges")?;
        let mut vocab = HashMap::with_capacity(tokens.len());
        let mut specials = Vec::new();
        let mut user = Vec::new();
        let mut special = vec![false; tokens.len()];
        let chars = byte_chars();
        let mut char_byte = HashMap::new();
        for (b, c) in chars.iter().enumerate() {
            char_byte.insert(*c, b as u8);
        }
        let mut token_bytes = Vec::with_capacity(tokens.len());
        for (i, t) in tokens.iter().enumerate() {
            let s = t
                .as_str()
                .ok_or_else(|| err(format!("token {i} is not a string")))?;
            let ty = types.get(i).and_then(|v| match v {
                crate::gguf::Value::I32(x) => Some(*x as i64),
                other => other.as_u64().map(|x| x as i64),
            });
            vocab.insert(s.to_string(), i as u32);
            if ty == Some(TOKEN_CONTROL) {
                specials.push(AddedToken::from(s.to_string(), true));
                special[i] = true;
                token_bytes.push(s.as_bytes().to_vec());
            } else {
                if ty == Some(TOKEN_USER_DEFINED) {
                    user.push(AddedToken::from(s.to_string(), false));
                }
                let mut bytes = Vec::with_capacity(s.len());
                for ch in s.chars() {
                    match char_byte.get(&ch) {
                        Some(&b) => bytes.push(b),
                        None => {
                            let mut buf = [0u8; 4];
                            bytes.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                        }
                    }
                }
                token_bytes.push(bytes);
            }
        }
        let mut byte_has_token = [false; 256];
        for (b, c) in chars.iter().enumerate() {
            byte_has_token[b] = vocab.contains_key(&c.to_string());
        }
        let mut merges = Vec::with_capacity(merges_v.len());
        for (i, m) in merges_v.iter().enumerate() {
            let s = m
                .as_str()
                .ok_or_else(|| err(format!("merge {i} is not a string")))?;
            let (a, b) = s.split_once(' ').ok_or_else(|| {
                err(format!(
                    "merge {i} ({s:?}) is not two tokens separated by a space"
                ))
            })?;
            merges.push((a.to_string(), b.to_string()));
        }
        let bpe = BPE::builder()
            .vocab_and_merges(
                vocab
                    .into_iter()
                    .collect::<tokenizers::models::bpe::Vocab>(),
                merges,
            )
            .build()
            .map_err(err)?;
        let mut inner = HfTokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(pre_tokenizer));
        inner.with_decoder(Some(ByteLevelDecoder::default()));
        inner.add_special_tokens(&specials);
        inner.add_tokens(&user);

        let id = |k: &str| -> Result<Option<u32>> {
            match f.get(k) {
                None => Ok(None),
                Some(_) => {
                    let v = f.get_u64(k)?;
                    if v as usize >= tokens.len() {
                        return Err(err(format!(
                            "{k} = {v} is past the vocabulary of {}",
                            tokens.len()
                        )));
                    }
                    Ok(Some(v as u32))
                }
            }
        };
        let chat = match f.get("tokenizer.chat_template") {
            Some(v) => v.as_str().and_then(ChatTemplate::recognize),
            None => None,
        };
        Ok(Tokenizer {
            inner,
            token_bytes,
            special,
            bos: id("tokenizer.ggml.bos_token_id")?,
            eos: id("tokenizer.ggml.eos_token_id")?,
            add_bos: f
                .get("tokenizer.ggml.add_bos_token")
                .and_then(|v| v.as_bool())
                .unwrap_or(false),
            chat,
            pre,
            byte_has_token,
        })
    }

    /// Token ids of `text`; special tokens written in the text are recognized. A BOS token is
    /// prepended when the file asks for it (`tokenizer.ggml.add_bos_token`).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.inner.encode(text, false).map_err(err)?;
        let mut ids = Vec::with_capacity(enc.len() + 1);
        if self.add_bos {
            if let Some(b) = self.bos {
                ids.push(b);
            }
        }
        ids.extend_from_slice(enc.get_ids());
        Ok(ids)
    }

    /// The bytes of `text` that no token can represent: [`Tokenizer::encode`] drops them (as the
    /// model's own tokenizer does), so callers can say so. Returns `(byte offset, byte)`.
    pub fn unrepresentable(&self, text: &str) -> Vec<(usize, u8)> {
        text.bytes()
            .enumerate()
            .filter(|&(_, b)| !self.byte_has_token[b as usize])
            .collect()
    }

    /// The bytes a token stands for (the text of a special token).
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        self.token_bytes.get(id as usize).map(|b| b.as_slice())
    }

    /// The token's string as stored in the file (byte-level characters).
    pub fn token_str(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// True for control tokens.
    pub fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }

    /// Text of a sequence of ids (invalid UTF-8 replaced), special tokens included.
    pub fn decode(&self, ids: &[u32]) -> String {
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
        self.token_bytes.len()
    }

    /// Beginning-of-sequence token.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// End-of-sequence token.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// The pre-tokenizer name from the file.
    pub fn pre_tokenizer(&self) -> &str {
        &self.pre
    }

    /// The chat template, when the file has one this build understands.
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.chat.as_ref()
    }
}

/// Turns token ids into text as they come, never splitting a UTF-8 character.
#[derive(Default)]
pub struct StreamDecoder {
    pending: Vec<u8>,
}

impl StreamDecoder {
    /// An empty decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a token; returns the text that is now complete (possibly empty).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> String {
        if let Some(b) = tok.token_bytes(id) {
            self.pending.extend_from_slice(b);
        }
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(
                        std::str::from_utf8(&self.pending[..valid]).expect("valid prefix"),
                    );
                    match e.error_len() {
                        // an incomplete character at the end: wait for more bytes
                        None => {
                            self.pending.drain(..valid);
                            break;
                        }
                        // bytes that can never become valid: replace them and go on
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + n);
                        }
                    }
                }
            }
        }
        out
    }

    /// Whatever is left at the end of the stream (an incomplete character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }
}

/// A ChatML chat template (`<|im_start|>role\ncontent<|im_end|>\n`) and its default system
/// prompt, recognized from the file's Jinja template.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatTemplate {
    /// The system prompt the template inserts when the conversation has none.
    pub default_system: Option<String>,
}

impl ChatTemplate {
    /// Recognize ChatML in a Jinja template; `None` for other templates.
    pub fn recognize(jinja: &str) -> Option<Self> {
        if !jinja.contains("<|im_start|>") || !jinja.contains("<|im_end|>") {
            return None;
        }
        let marker = "<|im_start|>system\\n";
        let marker_raw = "<|im_start|>system\n";
        let start = jinja
            .find(marker)
            .map(|i| i + marker.len())
            .or_else(|| jinja.find(marker_raw).map(|i| i + marker_raw.len()));
        let default_system = start.and_then(|s| {
            jinja[s..]
                .find("<|im_end|>")
                .map(|e| jinja[s..s + e].replace("\\n", "\n"))
        });
        Some(ChatTemplate { default_system })
    }

    /// A conversation of one user message, ready for the assistant's answer.
    pub fn render_user(&self, user: &str, system: Option<&str>) -> String {
        let mut s = String::new();
        if let Some(sys) = system.or(self.default_system.as_deref()) {
            s.push_str(&format!("<|im_start|>system\n{sys}<|im_end|>\n"));
        }
        s.push_str(&format!(
            "<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
        ));
        s
    }
}
