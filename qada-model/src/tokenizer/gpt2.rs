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

use super::{err, Vocabulary};
use crate::gguf::GgufFile;
use crate::Result;

const LLAMA3_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// GGUF token types.
const TOKEN_CONTROL: i64 = 3;
const TOKEN_USER_DEFINED: i64 = 4;

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

/// The vocabulary of a `tokenizer.ggml.model = "gpt2"` file.
pub(super) fn build(f: &GgufFile) -> Result<Vocabulary> {
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
        "llama-bpe" | "llama3" => split_then_bytes(LLAMA3_PATTERN)?,
        "qwen2" => split_then_bytes(QWEN2_PATTERN)?,
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
    Ok(Vocabulary {
        inner,
        token_bytes,
        special,
        pre,
        byte_has_token,
    })
}

/// A regex split (matches kept as pieces), then the byte-level mapping.
fn split_then_bytes(pattern: &str) -> Result<PreTokenizerWrapper> {
    let split = Split::new(
        SplitPattern::Regex(pattern.into()),
        SplitDelimiterBehavior::Isolated,
        false,
    )
    .map_err(err)?;
    Ok(Sequence::new(vec![
        split.into(),
        ByteLevel::new(false, true, false).into(),
    ])
    .into())
}
