//! Hyper-parameters that no decoder can have are refused with the metadata key named, the
//! value found and what it must be (not as a byte offset in the file).

use qada_kv::LayerSpan;
use qada_model::gguf::writer::GgufWriter;
use qada_model::gguf::{GgufFile, Value, ValueType};
use qada_model::RopeScaling;
use qada_model::{ModelConfig, ModelError};

/// The metadata of a tiny decoder of family `arch` (keys under its prefix), with `overrides`
/// (full key names) replacing or adding keys.
fn tiny(arch: &str, overrides: &[(&str, Value)]) -> GgufFile {
    let key = |k: &str| format!("{arch}.{k}");
    let mut pairs: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        (key("block_count"), Value::U32(1)),
        (key("context_length"), Value::U32(64)),
        (key("embedding_length"), Value::U32(8)),
        (key("feed_forward_length"), Value::U32(16)),
        (key("attention.head_count"), Value::U32(2)),
        (key("attention.layer_norm_rms_epsilon"), Value::F32(1e-5)),
        (key("vocab_size"), Value::U32(2)),
    ];
    let mut defaults: Vec<(String, Value)> = Vec::new();
    if arch == "gemma3" {
        defaults.push((key("block_count"), Value::U32(6)));
        defaults.push((key("attention.key_length"), Value::U32(16)));
        defaults.push((key("attention.sliding_window"), Value::U32(8)));
    }
    let overrides = defaults
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .chain(overrides.iter().cloned());
    for (k, v) in overrides {
        match pairs.iter_mut().find(|(key, _)| key == k) {
            Some(p) => p.1 = v,
            None => pairs.push((k.to_string(), v)),
        }
    }
    let mut w = GgufWriter::new();
    for (k, v) in pairs {
        w.meta(&k, v);
    }
    GgufFile::parse(w.to_bytes()).unwrap()
}

fn tiny_llama(overrides: &[(&str, Value)]) -> GgufFile {
    tiny("llama", overrides)
}

fn refused(overrides: &[(&str, Value)]) -> String {
    refused_in("llama", overrides)
}

fn refused_in(arch: &str, overrides: &[(&str, Value)]) -> String {
    let e = ModelConfig::from_gguf(&tiny(arch, overrides)).unwrap_err();
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

#[test]
fn the_tiny_gemma_file_has_five_sliding_layers_to_one_global() {
    let c = ModelConfig::from_gguf(&tiny("gemma3", &[])).unwrap();
    assert_eq!(c.head_dim, 16, "from key_length, not 8 / 2");
    assert_eq!(c.global_layers().collect::<Vec<_>>(), [5]);
    assert_eq!(c.layers[0].span, LayerSpan::Sliding(8));
    assert_eq!(c.layers[0].local_rope_base, Some(10_000.0));
    assert_eq!(c.layers[5].local_rope_base, None);
    assert_eq!(c.attention_scale, 0.25);
    assert_eq!(c.embedding_scale, 8f32.sqrt());
    // the file's own pattern and local base win over the published defaults
    let c = ModelConfig::from_gguf(&tiny(
        "gemma3",
        &[
            ("gemma3.attention.sliding_window_pattern", Value::U32(2)),
            ("gemma3.rope.freq_base_swa", Value::F32(500.0)),
        ],
    ))
    .unwrap();
    assert_eq!(c.global_layers().collect::<Vec<_>>(), [1, 3, 5]);
    assert_eq!(c.layers[0].local_rope_base, Some(500.0));
    let pattern = Value::Array(
        ValueType::Bool,
        [true, false, true, true, true, false]
            .map(Value::Bool)
            .to_vec(),
    );
    let c = ModelConfig::from_gguf(&tiny(
        "gemma3",
        &[("gemma3.attention.sliding_window_pattern", pattern)],
    ))
    .unwrap();
    assert_eq!(c.global_layers().collect::<Vec<_>>(), [1, 5]);
}

#[test]
fn hostile_head_and_window_keys_name_the_key() {
    for (k, v, want) in [
        (
            "gemma3.attention.key_length",
            Value::U32(0),
            "\"gemma3.attention.key_length\" = 0: must be in 1..=1048576",
        ),
        (
            "gemma3.attention.key_length",
            Value::U64(u64::MAX),
            "must be in 1..=1048576",
        ),
        (
            "gemma3.attention.key_length",
            Value::U32(1 << 20),
            "query width must be at most 1048576",
        ),
        (
            "gemma3.attention.value_length",
            Value::U32(8),
            "must equal the key length 16",
        ),
        (
            "gemma3.attention.head_count_kv",
            Value::U32(0),
            "\"gemma3.attention.head_count_kv\" = 0",
        ),
        (
            "gemma3.attention.head_count_kv",
            Value::U32(3),
            "must be a multiple of the KV head count",
        ),
        (
            "gemma3.attention.sliding_window",
            Value::U32(65),
            "must be at most the context length 64",
        ),
        (
            "gemma3.attention.sliding_window_pattern",
            Value::U32(0),
            "sliding_window_pattern\" = 0",
        ),
        (
            "gemma3.attention.sliding_window_pattern",
            Value::Array(ValueType::Bool, vec![Value::Bool(true)]),
            "must have one entry per layer (6)",
        ),
        (
            "gemma3.rope.freq_base_swa",
            Value::F32(0.5),
            "\"gemma3.rope.freq_base_swa\" = 0.5",
        ),
    ] {
        let msg = refused_in("gemma3", &[(k, v)]);
        assert!(msg.contains(want), "{k}: {msg}");
    }
    // a sliding window in a family without sliding layers
    let msg = refused_in(
        "qwen2",
        &[("qwen2.attention.sliding_window", Value::U32(8))],
    );
    assert!(msg.contains("no sliding-window layers"), "{msg}");
}

#[test]
fn a_window_slides_on_every_llama_layer_and_zero_means_none() {
    let c = ModelConfig::from_gguf(&tiny_llama(&[(
        "llama.attention.sliding_window",
        Value::U32(8),
    )]))
    .unwrap();
    assert!(c.layers.iter().all(|l| l.span == LayerSpan::Sliding(8)));
    // Phi-3's converter writes 0 for "no window"
    let c = ModelConfig::from_gguf(&tiny(
        "phi3",
        &[("phi3.attention.sliding_window", Value::U32(0))],
    ))
    .unwrap();
    assert!(c.layers.iter().all(|l| l.span == LayerSpan::Full));
}

#[test]
fn rope_scaling_is_linear_or_yarn_or_refused_never_ignored() {
    let linear = [
        ("llama.rope.scaling.type", Value::String("linear".into())),
        ("llama.rope.scaling.factor", Value::F32(8.0)),
    ];
    let c = ModelConfig::from_gguf(&tiny_llama(&linear)).unwrap();
    assert_eq!(c.rope_scaling, RopeScaling::Linear { factor: 8.0 });
    let c = ModelConfig::from_gguf(&tiny_llama(&[(
        "llama.rope.scaling.type",
        Value::String("none".into()),
    )]))
    .unwrap();
    assert_eq!(c.rope_scaling, RopeScaling::None);
    // YaRN needs the original context
    let yarn = [
        ("llama.rope.scaling.type", Value::String("yarn".into())),
        ("llama.rope.scaling.factor", Value::F32(4.0)),
    ];
    let e = ModelConfig::from_gguf(&tiny_llama(&yarn)).unwrap_err();
    assert!(
        e.to_string()
            .contains("missing metadata key \"llama.rope.scaling.original_context_length\""),
        "{e}"
    );
    let mut with_original = yarn.to_vec();
    with_original.push(("llama.rope.scaling.original_context_length", Value::U32(32)));
    let c = ModelConfig::from_gguf(&tiny_llama(&with_original)).unwrap();
    assert!(matches!(
        c.rope_scaling,
        RopeScaling::Yarn {
            factor: 4.0,
            original_context: 32.0,
            ..
        }
    ));
    let msg = refused(&[("llama.rope.scaling.type", Value::String("su".into()))]);
    assert!(
        msg.contains(
            "\"llama.rope.scaling.type\" = \"su\": RoPE scaling other than \"linear\" and \"yarn\""
        ),
        "{msg}"
    );
    let msg = refused(&[
        ("llama.rope.scaling.type", Value::String("linear".into())),
        ("llama.rope.scaling.factor", Value::F32(-1.0)),
    ]);
    assert!(msg.contains("\"llama.rope.scaling.factor\" = -1"), "{msg}");
}

#[test]
fn an_unknown_family_lists_the_ones_this_build_runs() {
    let e = ModelConfig::from_gguf(&tiny("mamba", &[])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "unsupported architecture \"mamba\" (this build runs: llama, qwen2, qwen3, phi3, smollm3, gemma2, gemma3)"
    );
}
