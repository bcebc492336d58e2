//! SentencePiece BPE (`tokenizer.ggml.model = "llama"`, Gemma 3), rebuilt from the file's
//! pieces, scores and types to encode as the `sentencepiece` library does:
//! 1. added tokens are cut out whole, longest first, matched on the text as written: control
//!    tokens (`<bos>`, `<start_of_turn>` ...), which are special, and user-defined ones (Gemma:
//!    runs of 2 to 31 spaces, of newlines, of tabs, HTML tags);
//! 2. the rest has its spaces escaped to U+2581 (no other normalization, no dummy prefix) and is
//!    encoded whole, without pre-tokenization, by BPE whose merges `merges.rs` derives from the
//!    scores;
//! 3. a character without a piece falls back to its UTF-8 bytes, `<0x00>` .. `<0xFF>`.
//!
//! Decoding maps U+2581 back to a space and a byte token to its byte.

use std::collections::HashMap;

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::replace::Replace;
use tokenizers::{AddedToken, Tokenizer as HfTokenizer};

use super::{err, merges, Vocabulary};
use crate::gguf::{GgufFile, Value};
use crate::{ModelError, Result};

/// SentencePiece's escaped space.
const SPACE: &str = "\u{2581}";

/// A piece's type, `tokenizer.ggml.token_type` (SentencePiece's `ModelProto.Type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PieceType {
    /// Encoded by BPE.
    Normal,
    /// `<unk>`: special.
    Unknown,
    /// `<bos>`, `<start_of_turn>` ...: special, cut out of text whole.
    Control,
    /// Cut out of text whole, but not special.
    UserDefined,
    /// Reserved: never produced by encoding.
    Unused,
    /// `<0xXX>`: byte fallback.
    Byte,
}

impl PieceType {
    fn from_code(code: u64) -> Option<Self> {
        Some(match code {
            1 => PieceType::Normal,
            2 => PieceType::Unknown,
            3 => PieceType::Control,
            4 => PieceType::UserDefined,
            5 => PieceType::Unused,
            6 => PieceType::Byte,
            _ => return None,
        })
    }
}

fn bad(key: &str, found: impl Into<String>, reason: impl Into<String>) -> ModelError {
    ModelError::BadMetadata {
        key: key.into(),
        found: found.into(),
        reason: reason.into(),
    }
}

/// The array at `key`, one element per token.
fn per_token<'f>(f: &'f GgufFile, key: &str, n: usize, why: &str) -> Result<&'f [Value]> {
    let v = f
        .get(key)
        .ok_or_else(|| bad(key, "absent", format!("{why}: one per token ({n} tokens)")))?;
    let a = v.as_array().ok_or_else(|| {
        bad(
            key,
            format!("a {}", v.type_name()),
            format!("{why}: an array, one per token ({n} tokens)"),
        )
    })?;
    if a.len() != n {
        return Err(bad(
            key,
            format!("{} elements", a.len()),
            format!("{why}: one per token, and tokenizer.ggml.tokens has {n}"),
        ));
    }
    Ok(a)
}

/// The byte of a piece `<0xXX>`.
fn byte_of(piece: &str) -> Option<u8> {
    let hex = piece.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// The vocabulary of a `tokenizer.ggml.model = "llama"` file: its pieces, scores and types
/// checked, merges derived from the scores (SentencePiece BPE), and the control, user-defined
/// and byte tokens.
pub(super) fn build(f: &GgufFile) -> Result<Vocabulary> {
    check_no_dummy_prefix(f)?;
    let pre = match f.get("tokenizer.ggml.pre") {
        None => "default".to_string(),
        Some(_) => f.get_str("tokenizer.ggml.pre")?.to_string(),
    };
    let Pieces {
        pieces,
        scores,
        types,
    } = Pieces::read(f)?;
    let vocab = piece_ids(&pieces, &types)?;
    let normal: Vec<bool> = types.iter().map(|&t| t == PieceType::Normal).collect();
    let merges = merges::derive(&pieces, &scores, &normal, &vocab)?;
    let bpe = BPE::builder()
        .vocab_and_merges(
            pieces
                .iter()
                .enumerate()
                .map(|(i, &p)| (p.to_string(), i as u32))
                .collect::<tokenizers::models::bpe::Vocab>(),
            merges,
        )
        .byte_fallback(true)
        .build()
        .map_err(err)?;

    let Added {
        specials,
        user,
        special,
        token_bytes,
    } = Added::of(&pieces, &types);

    let mut inner = HfTokenizer::new(bpe);
    inner.with_normalizer(Some(Replace::new(" ", SPACE).map_err(err)?));
    inner.with_decoder(Some(Sequence::new(vec![
        Replace::new(SPACE, " ").map_err(err)?.into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ])));
    inner.add_special_tokens(&specials);
    inner.add_tokens(&user);
    Ok(Vocabulary {
        inner,
        token_bytes,
        special,
        pre,
        byte_has_token: [true; 256],
    })
}

/// Refuse a vocabulary that wants a dummy space prefix: this build encodes without one.
fn check_no_dummy_prefix(f: &GgufFile) -> Result<()> {
    const PREFIX: &str = "tokenizer.ggml.add_space_prefix";
    let dummy_prefix = match f.get(PREFIX) {
        None => true,
        Some(v) => v.as_bool().ok_or_else(|| ModelError::WrongType {
            key: PREFIX.into(),
            expected: "bool",
            found: v.type_name(),
        })?,
    };
    if dummy_prefix {
        return Err(bad(
            PREFIX,
            if f.get(PREFIX).is_some() {
                "true"
            } else {
                "absent (true for SentencePiece)"
            },
            "this build encodes SentencePiece vocabularies without a dummy space prefix \
             (Gemma 3's); guessing where the prefix goes would give wrong token ids",
        ));
    }
    Ok(())
}

/// The file's pieces with their scores and types, one each per token.
struct Pieces<'f> {
    pieces: Vec<&'f str>,
    scores: Vec<f32>,
    types: Vec<PieceType>,
}

impl<'f> Pieces<'f> {
    fn read(f: &'f GgufFile) -> Result<Self> {
        let tokens = f.get_array("tokenizer.ggml.tokens")?;
        let n = tokens.len();
        let mut pieces = Vec::with_capacity(n);
        for (i, t) in tokens.iter().enumerate() {
            pieces.push(
                t.as_str()
                    .ok_or_else(|| err(format!("token {i} is not a string")))?,
            );
        }
        const SCORES: &str = "tokenizer.ggml.scores";
        let mut scores = Vec::with_capacity(n);
        for (i, v) in per_token(f, SCORES, n, "SentencePiece BPE ranks merges by score")?
            .iter()
            .enumerate()
        {
            match v.as_f64() {
                Some(s) if !s.is_nan() => scores.push(s as f32),
                _ => {
                    return Err(bad(
                        SCORES,
                        format!("element {i} = {}", v.render(4)),
                        "every score must be a number",
                    ))
                }
            }
        }
        let mut types = Vec::with_capacity(n);
        for (i, v) in per_token(
            f,
            TYPES,
            n,
            "control, user-defined and byte tokens need types",
        )?
        .iter()
        .enumerate()
        {
            types.push(v.as_u64().and_then(PieceType::from_code).ok_or_else(|| {
                bad(
                    TYPES,
                    format!("element {i} = {}", v.render(4)),
                    "a type is 1 (normal) to 6 (byte)",
                )
            })?);
        }
        Ok(Pieces {
            pieces,
            scores,
            types,
        })
    }
}

/// The metadata key of the token types.
const TYPES: &str = "tokenizer.ggml.token_type";

/// Each piece's id; every piece distinct, and all 256 byte tokens `<0xXX>` present (byte
/// fallback needs them).
fn piece_ids<'f>(pieces: &[&'f str], types: &[PieceType]) -> Result<HashMap<&'f str, u32>> {
    let mut vocab = HashMap::with_capacity(pieces.len());
    let mut byte_token: [Option<u32>; 256] = [None; 256];
    for (i, (&p, &ty)) in pieces.iter().zip(types).enumerate() {
        if let Some(j) = vocab.insert(p, i as u32) {
            return Err(bad(
                "tokenizer.ggml.tokens",
                format!("token {i} = {p:?}, the same piece as token {j}"),
                "every piece must be distinct, or ids would be ambiguous",
            ));
        }
        if ty == PieceType::Byte {
            let b = byte_of(p).ok_or_else(|| {
                bad(
                    TYPES,
                    format!("element {i} = 6 (byte) for the piece {p:?}"),
                    "a byte token's piece is <0xXX>",
                )
            })?;
            byte_token[b as usize] = Some(i as u32);
        }
    }
    for (b, id) in byte_token.iter().enumerate() {
        if id.is_none() {
            let piece = format!("<0x{b:02X}>");
            let found = match vocab.get(piece.as_str()) {
                Some(&i) => format!("token {i} = {piece} of type {:?}", types[i as usize]),
                None => format!("no token {piece}"),
            };
            return Err(bad(
                "tokenizer.ggml.tokens",
                found,
                format!(
                    "byte fallback needs all 256 byte tokens <0x00> .. <0xFF> (type 6); \
                     {piece} is missing"
                ),
            ));
        }
    }
    Ok(vocab)
}

/// The tokens added beside BPE: control (special) and user-defined pieces; and every token's
/// bytes when decoded.
struct Added {
    specials: Vec<AddedToken>,
    user: Vec<AddedToken>,
    special: Vec<bool>,
    token_bytes: Vec<Vec<u8>>,
}

impl Added {
    /// Of pieces whose byte tokens [`piece_ids`] checked.
    fn of(pieces: &[&str], types: &[PieceType]) -> Self {
        let n = pieces.len();
        let mut a = Added {
            specials: Vec::new(),
            user: Vec::new(),
            special: vec![false; n],
            token_bytes: Vec::with_capacity(n),
        };
        for (i, (&p, &ty)) in pieces.iter().zip(types).enumerate() {
            a.token_bytes.push(match ty {
                PieceType::Control | PieceType::Unknown => {
                    a.special[i] = true;
                    a.specials.push(AddedToken::from(p, true).normalized(false));
                    p.as_bytes().to_vec()
                }
                PieceType::UserDefined => {
                    a.user.push(AddedToken::from(p, false).normalized(false));
                    p.as_bytes().to_vec()
                }
                PieceType::Byte => vec![byte_of(p).expect("checked by piece_ids")],
                PieceType::Normal | PieceType::Unused => p.replace(SPACE, " ").into_bytes(),
            });
        }
        a
    }
}
