//! The tokenizer built from the real GGUF file against the shared reference token ids.

mod common;

use qada_model::gguf::GgufFile;
use qada_model::{StreamDecoder, Tokenizer};

fn tokenizer() -> Tokenizer {
    let f = GgufFile::open(&common::model_path()).unwrap();
    Tokenizer::from_gguf(&f).unwrap()
}

#[test]
fn token_ids_equal_the_reference_for_every_case() {
    let tok = tokenizer();
    let r = common::reference();
    assert_eq!(tok.pre_tokenizer(), "smollm");
    common::check_token_ids(&tok, &r);
}

#[test]
fn chat_template_reproduces_the_reference_chatml_prompt() {
    let tok = tokenizer();
    let r = common::reference();
    let chat = tok.chat_template().expect("SmolLM2 has a ChatML template");
    let rendered = chat
        .render_user(
            "What is the capital of France? Answer in one sentence.",
            None,
        )
        .unwrap();
    let expected = r["prompts"][1]["text"].as_str().unwrap();
    assert_eq!(rendered, expected);
}

#[test]
fn streaming_decode_never_splits_a_character() {
    let tok = tokenizer();
    let text = "Héllo wörld — 日本語のテキスト; Привет ½ ² ٣ 🎉";
    let ids = tok.encode(text).unwrap();
    let mut dec = StreamDecoder::new();
    let mut out = String::new();
    for &id in &ids {
        let piece = dec.push(&tok, id);
        assert!(!piece.contains('\u{fffd}'), "split character in {piece:?}");
        out.push_str(&piece);
    }
    out.push_str(&dec.finish());
    assert_eq!(out, text);
}

#[test]
fn special_tokens_and_eos_come_from_the_file() {
    let tok = tokenizer();
    assert_eq!(tok.eos(), Some(2));
    assert_eq!(tok.bos(), Some(1));
    assert!(tok.is_special(2));
    assert_eq!(tok.encode("<|im_end|>").unwrap(), vec![2]);
    assert_eq!(tok.encode("").unwrap(), Vec::<u32>::new());
}

/// Found by fuzzing: SmolLM2's vocabulary has no token for some control bytes (0x14 here), so
/// encoding drops them, as the model's own tokenizer does; `unrepresentable` reports them.
#[test]
fn bytes_without_a_token_are_dropped_and_reported() {
    let tok = tokenizer();
    let text = "Hel wörld 123\u{14}5 <|im_start|>user\nhi";
    let ids = tok.encode(text).unwrap();
    assert_eq!(tok.decode(&ids), text.replace('\u{14}', ""));
    assert_eq!(tok.unrepresentable(text), vec![(14, 0x14)]);
    assert!(tok.unrepresentable("plain text, ½ ² ٣ 日本").is_empty());
}
