//! The GGUF reader on files written by the test: round trips, and hostile files that must give
//! an error naming what and where, never a panic or a huge allocation.

use qada_model::gguf::writer::GgufWriter;
use qada_model::gguf::{GgufFile, Value, ValueType};
use qada_model::quant::GgmlType;
use qada_model::ModelError;

fn sample() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.meta("general.architecture", Value::String("llama".into()))
        .meta("llama.block_count", Value::U32(2))
        .meta("some.float", Value::F64(0.5))
        .meta(
            "nested",
            Value::Array(
                ValueType::Array,
                vec![Value::Array(
                    ValueType::I32,
                    vec![Value::I32(-1), Value::I32(2)],
                )],
            ),
        )
        .meta(
            "flags",
            Value::Array(ValueType::Bool, vec![Value::Bool(true), Value::Bool(false)]),
        )
        .tensor_f32("a", &[4, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
        .tensor_f32("b", &[3], &[-1.0, 0.5, 2.0]);
    w
}

#[test]
fn written_files_read_back() {
    let f = GgufFile::parse(sample().to_bytes()).unwrap();
    assert_eq!(f.version, 3);
    assert_eq!(f.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(f.get_u64("llama.block_count").unwrap(), 2);
    assert_eq!(f.get_f64("some.float").unwrap(), 0.5);
    let nested = f.get_array("nested").unwrap();
    assert_eq!(nested[0].as_array().unwrap()[0], Value::I32(-1));
    let (dims, data) = f.tensor_f32("a").unwrap();
    assert_eq!(dims, vec![4, 2]);
    assert_eq!(data, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    assert_eq!(f.tensor_f32("b").unwrap().1, vec![-1.0, 0.5, 2.0]);
    assert!(matches!(
        f.get_u64("missing"),
        Err(ModelError::MissingKey(_))
    ));
    assert!(matches!(
        f.get_u64("general.architecture"),
        Err(ModelError::WrongType { .. })
    ));
    assert!(matches!(
        f.tensor_f32("c"),
        Err(ModelError::MissingTensor(_))
    ));
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = sample().to_bytes();
    for n in 0..bytes.len() {
        let r = GgufFile::parse(bytes[..n].to_vec());
        assert!(
            r.is_err(),
            "a prefix of {n} of {} bytes was accepted",
            bytes.len()
        );
    }
}

#[test]
fn wrong_magic_and_versions() {
    let mut b = sample().to_bytes();
    b[0] = b'X';
    assert!(matches!(
        GgufFile::parse(b),
        Err(ModelError::BadMagic { .. })
    ));
    for v in [0u32, 1, 4, u32::MAX] {
        let mut b = sample().to_bytes();
        b[4..8].copy_from_slice(&v.to_le_bytes());
        let e = GgufFile::parse(b).unwrap_err();
        assert!(
            matches!(e, ModelError::UnsupportedVersion(x) if x == v),
            "{e}"
        );
    }
}

fn header(n_tensors: u64, n_kv: u64) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&n_tensors.to_le_bytes());
    b.extend_from_slice(&n_kv.to_le_bytes());
    b
}

fn put_str(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(&(s.len() as u64).to_le_bytes());
    b.extend_from_slice(s.as_bytes());
}

#[test]
fn counts_near_two_to_the_64_are_refused_without_allocating() {
    for (t, k) in [
        (u64::MAX, 0),
        (0, u64::MAX),
        (1 << 62, 1 << 62),
        (0, 1 << 40),
    ] {
        let e = GgufFile::parse(header(t, k)).unwrap_err();
        assert!(
            e.to_string().contains("count") || e.to_string().contains("truncated"),
            "{e}"
        );
    }
}

#[test]
fn absurd_string_and_array_lengths_are_refused() {
    let mut b = header(0, 1);
    b.extend_from_slice(&u64::MAX.to_le_bytes()); // key length
    b.resize(b.len() + 32, 0);
    assert!(matches!(
        GgufFile::parse(b),
        Err(ModelError::Truncated { .. })
    ));

    let mut b = header(0, 1);
    put_str(&mut b, "k");
    b.extend_from_slice(&9u32.to_le_bytes()); // array
    b.extend_from_slice(&8u32.to_le_bytes()); // of strings
    b.extend_from_slice(&(1u64 << 61).to_le_bytes());
    let e = GgufFile::parse(b).unwrap_err();
    assert!(e.to_string().contains("\"k\""), "error names the key: {e}");

    let mut b = header(0, 1);
    put_str(&mut b, "k");
    b.extend_from_slice(&13u32.to_le_bytes()); // no such type
    b.resize(b.len() + 16, 0);
    assert!(GgufFile::parse(b)
        .unwrap_err()
        .to_string()
        .contains("unknown value type 13"));
}

#[test]
fn deeply_nested_arrays_are_refused() {
    let mut b = header(0, 1);
    put_str(&mut b, "deep");
    b.extend_from_slice(&9u32.to_le_bytes());
    for _ in 0..64 {
        b.extend_from_slice(&9u32.to_le_bytes());
        b.extend_from_slice(&1u64.to_le_bytes());
    }
    b.resize(b.len() + 4096, 0);
    let e = GgufFile::parse(b).unwrap_err();
    assert!(e.to_string().contains("nested"), "{e}");
}

fn one_tensor(dims: &[u64], ty: u32, offset: u64, data: usize) -> Vec<u8> {
    let mut b = header(1, 0);
    put_str(&mut b, "t");
    b.extend_from_slice(&(dims.len() as u32).to_le_bytes());
    for d in dims {
        b.extend_from_slice(&d.to_le_bytes());
    }
    b.extend_from_slice(&ty.to_le_bytes());
    b.extend_from_slice(&offset.to_le_bytes());
    let start = b.len().div_ceil(32) * 32;
    b.resize(start + data, 0);
    b
}

#[test]
fn hostile_tensor_infos_are_refused_with_the_tensor_named() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (one_tensor(&[u64::MAX, 3], 0, 0, 64), "overflow"),
        (
            one_tensor(&[1 << 32, 1 << 32, 1 << 32], 0, 0, 64),
            "overflow",
        ),
        (one_tensor(&[16], 0, 1 << 40, 64), "truncated"),
        (one_tensor(&[16], 0, u64::MAX - 31, 64), "truncated"),
        (one_tensor(&[16], 0, 0, 63), "truncated"),
        (one_tensor(&[16], 0, 8, 128), "alignment"),
        (one_tensor(&[33], 8, 0, 64), "blocks"),
        (one_tensor(&[16], 99, 0, 64), "unknown type id 99"),
        (one_tensor(&[], 0, 0, 64), "dimensions"),
        (one_tensor(&[1, 1, 1, 1, 1], 0, 0, 64), "dimensions"),
    ];
    for (bytes, needle) in cases {
        let e = GgufFile::parse(bytes).unwrap_err().to_string();
        assert!(e.contains(needle), "expected {needle:?} in: {e}");
        assert!(e.contains("\"t\""), "error names the tensor: {e}");
    }
}

#[test]
fn duplicate_names_and_keys_are_refused() {
    let mut w = GgufWriter::new();
    w.tensor_f32("x", &[2], &[1.0, 2.0])
        .tensor_f32("x", &[2], &[1.0, 2.0]);
    assert!(GgufFile::parse(w.to_bytes())
        .unwrap_err()
        .to_string()
        .contains("twice"));
    let mut w = GgufWriter::new();
    w.meta("k", Value::U8(1)).meta("k", Value::U8(2));
    assert!(GgufFile::parse(w.to_bytes())
        .unwrap_err()
        .to_string()
        .contains("twice"));
}

#[test]
fn nan_and_infinity_in_weights_are_refused_by_name() {
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut w = GgufWriter::new();
        w.tensor_f32("w", &[3], &[1.0, bad, 2.0]);
        let f = GgufFile::parse(w.to_bytes()).unwrap();
        let e = f.tensor_f32("w").unwrap_err();
        assert!(matches!(e, ModelError::NonFinite { index: 1, .. }), "{e}");
    }
}

#[test]
fn bad_alignment_is_refused() {
    for a in [0u32, 3, 48] {
        let mut w = GgufWriter::new();
        w.meta("general.alignment", Value::U32(a));
        let e = GgufFile::parse(w.to_bytes()).unwrap_err();
        assert!(e.to_string().contains("general.alignment"), "{e}");
    }
    let mut w = GgufWriter::new();
    w.meta("general.alignment", Value::U32(64))
        .tensor_f32("x", &[5], &[1.0; 5])
        .tensor_f32("y", &[2], &[3.0; 2]);
    let f = GgufFile::parse(w.to_bytes()).unwrap();
    assert_eq!(f.alignment, 64);
    assert_eq!(f.tensor_f32("y").unwrap().1, vec![3.0, 3.0]);
    assert_eq!(f.tensor("y").unwrap().ty, GgmlType::F32);
}
