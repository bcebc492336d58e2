//! Hostile model files through the CLI: each gives a message naming the problem and a non-zero
//! exit, never a panic, under a 4 GiB address-space limit (so a huge allocation would fail the
//! test rather than the machine).

use std::path::PathBuf;
use std::process::Command;

use qada_model::gguf::writer::GgufWriter;
use qada_model::gguf::{Value, ValueType};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("qada-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// Run the binary under `ulimit -v` (4 GiB) and return (success, stderr).
fn limited(args: &[&str]) -> (bool, String) {
    let mut cmd = String::from("ulimit -v 4194304 && exec \"$0\"");
    for i in 0..args.len() {
        cmd.push_str(&format!(" \"${}\"", i + 1));
    }
    let o = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .arg(env!("CARGO_BIN_EXE_qada"))
        .args(args)
        .env_remove("QADA_MODEL")
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn header(n_tensors: u64, n_kv: u64) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&n_tensors.to_le_bytes());
    b.extend_from_slice(&n_kv.to_le_bytes());
    b
}

fn tiny_llama() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.meta("general.architecture", Value::String("llama".into()))
        .meta("llama.block_count", Value::U32(1))
        .meta("llama.context_length", Value::U32(64))
        .meta("llama.embedding_length", Value::U32(8))
        .meta("llama.feed_forward_length", Value::U32(16))
        .meta("llama.attention.head_count", Value::U32(2))
        .meta("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5))
        .meta("tokenizer.ggml.model", Value::String("gpt2".into()))
        .meta(
            "tokenizer.ggml.tokens",
            Value::Array(
                ValueType::String,
                vec![Value::String("a".into()), Value::String("b".into())],
            ),
        )
        .meta(
            "tokenizer.ggml.merges",
            Value::Array(ValueType::String, vec![]),
        );
    w
}

#[test]
fn hostile_model_files_fail_cleanly_under_a_memory_limit() {
    let mut cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", vec![], "not a GGUF file"),
        ("magic", b"GGML\x03\x00\x00\x00".to_vec(), "not a GGUF file"),
        (
            "version",
            {
                let mut b = header(0, 0);
                b[4] = 1;
                b
            },
            "unsupported GGUF version 1",
        ),
        ("counts", header(u64::MAX, u64::MAX), "count"),
        (
            "string",
            {
                let mut b = header(0, 1);
                b.extend_from_slice(&(1u64 << 62).to_le_bytes());
                b.resize(64, 0);
                b
            },
            "truncated",
        ),
    ];
    // a well-formed file that lacks the weights: the tensor is named
    cases.push((
        "no-weights",
        tiny_llama().to_bytes(),
        "missing tensor \"token_embd.weight\"",
    ));
    // an architecture this build does not implement
    let mut w = GgufWriter::new();
    w.meta("general.architecture", Value::String("mamba".into()));
    cases.push(("arch", w.to_bytes(), "unsupported architecture \"mamba\""));
    // Gemma 3 keys no decoder can have: an absurd head dimension, a sliding window longer
    // than the context (0 means no window, as Phi-3's converter writes)
    for (key, v, needle) in [
        (
            "gemma3.attention.key_length",
            Value::U64(1 << 40),
            "\"gemma3.attention.key_length\" = 1099511627776",
        ),
        (
            "gemma3.attention.sliding_window",
            Value::U32(65),
            "\"gemma3.attention.sliding_window\" = 65: must be at most the context length 64",
        ),
    ] {
        let mut w = GgufWriter::new();
        w.meta("general.architecture", Value::String("gemma3".into()))
            .meta("gemma3.block_count", Value::U32(6))
            .meta("gemma3.context_length", Value::U32(64))
            .meta("gemma3.embedding_length", Value::U32(8))
            .meta("gemma3.feed_forward_length", Value::U32(16))
            .meta("gemma3.attention.head_count", Value::U32(2))
            .meta("gemma3.attention.layer_norm_rms_epsilon", Value::F32(1e-6))
            .meta("gemma3.vocab_size", Value::U32(2))
            .meta(key, v);
        cases.push(("gemma-meta", w.to_bytes(), needle));
    }
    // NaN in a weight
    let mut w = tiny_llama();
    w.tensor_f32("token_embd.weight", &[8, 2], &[f32::NAN; 16]);
    cases.push(("nan", w.to_bytes(), "non-finite"));
    // truncation points of a small valid file whose last bytes are tensor data
    let mut w = tiny_llama();
    w.tensor_f32("x", &[8], &[1.0; 8]);
    let full = w.to_bytes();
    for cut in [3, 9, 20, 30, full.len() / 2, full.len() - 1] {
        cases.push(("cut", full[..cut].to_vec(), "error"));
    }
    for (i, (name, bytes, needle)) in cases.iter().enumerate() {
        let p = tmp(&format!("{i}-{name}.gguf"));
        std::fs::write(&p, bytes).unwrap();
        for args in [
            vec!["inspect", p.to_str().unwrap()],
            vec!["generate", "--model", p.to_str().unwrap(), "-p", "a"],
        ] {
            let (ok, err) = limited(&args);
            let is_inspect_of_loadable = args[0] == "inspect"
                && (*name == "no-weights"
                    || *name == "arch"
                    || *name == "nan"
                    || *name == "gemma-meta");
            if is_inspect_of_loadable {
                // inspect only reads metadata: these files are readable
                assert!(!err.contains("panicked"), "{name}: {err}");
                continue;
            }
            assert!(!ok, "{name} ({}) succeeded", args[0]);
            assert!(!err.contains("panicked"), "{name}: panic: {err}");
            assert!(
                err.contains(needle),
                "{name} ({}): expected {needle:?} in {err}",
                args[0]
            );
        }
    }
}
