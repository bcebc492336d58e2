//! Calibration moment tables: lookup, save/load round trips and refusal of bad files.

use proptest::prelude::*;
use qada_stats::{KeyMoments, ModelSignature, MomentTable, StatsError};

fn signature() -> ModelSignature {
    ModelSignature {
        architecture: "llama".into(),
        n_layers: 2,
        n_kv_heads: 3,
        head_dim: 4,
        rope_base: 1e5,
    }
}

/// Keys of a fake calibration run: 2 layers x 3 heads, `n` tokens each.
fn runs(n: usize, salt: f32) -> Vec<Vec<f32>> {
    (0..6)
        .map(|h| {
            (0..n * 4)
                .map(|i| (i as f32 * 0.37 + h as f32 + salt).sin() * 3.0)
                .collect()
        })
        .collect()
}

fn table(n: usize, stride: u64) -> MomentTable {
    let r = runs(n, 0.0);
    MomentTable::from_keys(signature(), stride, |l, h| r[l * 3 + h].as_slice()).unwrap()
}

#[test]
fn checkpoints_hold_the_moments_of_the_first_m_keys() {
    let r = runs(100, 0.0);
    let t = MomentTable::from_keys(signature(), 16, |l, h| r[l * 3 + h].as_slice()).unwrap();
    let tokens: Vec<u64> = t.checkpoints().iter().map(|c| c.tokens).collect();
    assert_eq!(tokens, vec![16, 32, 48, 64, 80, 96]);
    for c in t.checkpoints() {
        for (i, run) in r.iter().enumerate() {
            let direct = KeyMoments::from_rows(4, &run[..c.tokens as usize * 4]).unwrap();
            let stored = c.moments(i / 3, i % 3).unwrap();
            for (a, b) in stored.mean().iter().zip(direct.mean()) {
                assert!((a - b).abs() < 1e-12);
            }
            for (a, b) in stored.covariance().iter().zip(direct.covariance()) {
                assert!((a - b).abs() < 1e-10);
            }
        }
    }
}

#[test]
fn an_empty_key_run_has_empty_moments_and_does_not_shorten_the_table() {
    // layer 0 keeps no keys (a sliding-window layer); layer 1 holds 100 tokens per head
    let r = runs(100, 0.0);
    let t = MomentTable::from_keys(signature(), 16, |l, h| {
        if l == 0 {
            &[][..]
        } else {
            r[l * 3 + h].as_slice()
        }
    })
    .unwrap();
    assert_eq!(t.checkpoints().len(), 6);
    let last = t.checkpoints().last().unwrap();
    for h in 0..3 {
        assert_eq!(last.moments(0, h).unwrap().count(), 0);
        assert_eq!(last.moments(1, h).unwrap().count(), 96);
    }
}

#[test]
fn lookup_takes_the_largest_checkpoint_below_the_offset() {
    let t = table(100, 16);
    assert_eq!(t.lookup(1024 + 50, 1024).unwrap().tokens, 48);
    assert_eq!(t.lookup(1024 + 48, 1024).unwrap().tokens, 48);
    assert_eq!(t.lookup(5000, 1024).unwrap().tokens, 96);
    assert_eq!(t.lookup(40, 0).unwrap().tokens, 32);
    let err = t.lookup(1024 + 15, 1024).unwrap_err();
    assert!(
        matches!(err, StatsError::NoCheckpoint { smallest: 16, .. }),
        "{err}"
    );
    assert!(t.lookup(10, 1024).is_err());
}

#[test]
fn a_table_for_another_model_is_refused() {
    let bytes = table(40, 8).to_bytes();
    let mut other = signature();
    other.rope_base = 2e6;
    let err = MomentTable::from_bytes(&bytes, Some(&other)).unwrap_err();
    assert!(
        matches!(
            err,
            StatsError::ModelMismatch {
                field: "rope base",
                ..
            }
        ),
        "{err}"
    );
    other = signature();
    other.n_layers = 30;
    let err = MomentTable::from_bytes(&bytes, Some(&other)).unwrap_err();
    assert!(err.to_string().contains("layer count"), "{err}");
}

#[test]
fn every_truncation_is_refused() {
    let bytes = table(24, 8).to_bytes();
    for n in 0..bytes.len() {
        assert!(MomentTable::from_bytes(&bytes[..n], None).is_err(), "{n}");
    }
}

#[test]
fn wrong_magic_and_version_are_named() {
    let mut bytes = table(24, 8).to_bytes();
    bytes[8] = 9;
    let err = MomentTable::from_bytes(&bytes, None).unwrap_err();
    assert!(
        matches!(err, StatsError::UnsupportedVersion { found: 9, .. }),
        "{err}"
    );
    let err = MomentTable::from_bytes(b"GGUF\x03\x00\x00\x00 not a table", None).unwrap_err();
    assert!(matches!(err, StatsError::BadMagic { .. }), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn save_load_round_trips(n in 8usize..80, stride in 1u64..20, salt in -5.0f32..5.0) {
        let r = runs(n, salt);
        let t = MomentTable::from_keys(signature(), stride, |l, h| r[l * 3 + h].as_slice()).unwrap();
        let back = MomentTable::from_bytes(&t.to_bytes(), Some(&signature())).unwrap();
        prop_assert_eq!(back, t);
    }

    #[test]
    fn corrupted_bytes_are_refused(pos in any::<prop::sample::Index>(), bit in 0u8..8) {
        let mut bytes = table(24, 8).to_bytes();
        let i = pos.index(bytes.len());
        bytes[i] ^= 1 << bit;
        prop_assert!(MomentTable::from_bytes(&bytes, None).is_err());
    }
}

#[test]
fn file_round_trip_and_missing_file() {
    let dir = std::env::temp_dir().join(format!("qada-table-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.qmom");
    let t = table(40, 8);
    t.save(&path).unwrap();
    assert_eq!(MomentTable::load(&path, Some(&signature())).unwrap(), t);
    let err = MomentTable::load(&dir.join("missing"), None).unwrap_err();
    assert!(err.to_string().contains("missing"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
