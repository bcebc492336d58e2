//! The GGUF reader on arbitrary bytes: header, metadata, tensor infos, dequantization of every
//! tensor of a sane size, the hyper-parameters and the tokenizer. Any error is fine; a panic,
//! a hang or a huge allocation is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qada_model::gguf::GgufFile;
use qada_model::{ModelConfig, Tokenizer};

fuzz_target!(|data: &[u8]| {
    let Ok(f) = GgufFile::parse(data.to_vec()) else { return };
    for t in f.tensors() {
        if t.n_elements <= 1 << 16 {
            let _ = f.tensor_f32(&t.name);
        }
    }
    let _ = ModelConfig::from_gguf(&f);
    if f.get("tokenizer.ggml.tokens").and_then(|v| v.as_array()).is_some_and(|a| a.len() <= 4096) {
        if let Ok(tok) = Tokenizer::from_gguf(&f) {
            let _ = tok.encode("Hello 123 <|im_start|> wörld  the\n\n<start_of_turn>é");
        }
    }
});
