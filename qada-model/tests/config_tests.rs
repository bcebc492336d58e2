//! Hyper-parameters that no decoder can have are refused with the metadata key named, the
//! value found and what it must be (not as a byte offset in the file).

use qada_model::gguf::writer::GgufWriter;
use qada_model::gguf::{GgufFile, Value};
use qada_model::{ModelConfig, ModelError};

fn tiny_llama(overrides: &[(&str, Value)]) -> GgufFile {
    let mut pairs: Vec<(&str, Value)> = vec![
        ("general.architecture", Value::String("llama".into())),
        ("llama.block_count", Value::U32(1)),
        ("llama.context_length", Value::U32(64)),
        ("llama.embedding_length", Value::U32(8)),
        ("llama.feed_forward_length", Value::U32(16)),
        ("llama.attention.head_count", Value::U32(2)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        ("llama.vocab_size", Value::U32(2)),
    ];
    for (k, v) in overrides {
        match pairs.iter_mut().find(|(key, _)| key == k) {
            Some(p) => p.1 = v.clone(),
            None => pairs.push((k, v.clone())),
        }
    }
    let mut w = GgufWriter::new();
    for (k, v) in pairs {
        w.meta(k, v);
    }
    GgufFile::parse(w.to_bytes()).unwrap()
}

fn refused(overrides: &[(&str, Value)]) -> String {
    let e = ModelConfig::from_gguf(&tiny_llama(overrides)).unwrap_err();
    assert!(matches!(e, ModelError::BadMetadata { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(!msg.contains("byte 0"), "no misleading offset: {msg}");
    msg
}

#[test]
fn the_tiny_file_is_a_valid_config() {
    let c = ModelConfig::from_gguf(&tiny_llama(&[])).unwrap();
    assert_eq!((c.n_heads, c.n_kv_heads, c.head_dim), (2, 2, 4));
}

#[test]
fn a_zero_head_count_names_the_key_the_value_and_the_range() {
    let msg = refused(&[("llama.attention.head_count", Value::U32(0))]);
    assert_eq!(
        msg,
        "metadata key \"llama.attention.head_count\" = 0: must be in 1..=1048576 \
         (the file is damaged or not a decoder model)"
    );
    let msg = refused(&[("llama.block_count", Value::U64(1 << 21))]);
    assert!(
        msg.contains("\"llama.block_count\" = 2097152: must be in 1..=1048576"),
        "{msg}"
    );
}

#[test]
fn head_counts_that_do_not_divide_name_both_keys() {
    let msg = refused(&[("llama.attention.head_count", Value::U32(3))]);
    assert!(
        msg.contains("\"llama.embedding_length and llama.attention.head_count\" = 8 and 3"),
        "{msg}"
    );
    let msg = refused(&[("llama.attention.head_count_kv", Value::U32(4))]);
    assert!(
        msg.contains("\"llama.attention.head_count and llama.attention.head_count_kv\" = 2 and 4"),
        "{msg}"
    );
}

#[test]
fn rope_and_norm_parameters_name_their_key() {
    let msg = refused(&[("llama.rope.dimension_count", Value::U32(3))]);
    assert!(
        msg.contains("\"llama.rope.dimension_count\" = 3: must be even"),
        "{msg}"
    );
    let msg = refused(&[("llama.rope.freq_base", Value::F32(f32::NAN))]);
    assert!(msg.contains("\"llama.rope.freq_base\" = NaN"), "{msg}");
    let msg = refused(&[("llama.attention.layer_norm_rms_epsilon", Value::F32(0.0))]);
    assert!(
        msg.contains(
            "\"llama.attention.layer_norm_rms_epsilon\" = 0: must be a finite number above 0"
        ),
        "{msg}"
    );
}
