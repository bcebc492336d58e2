//! A q8 cache ([`KvDtype::Q8`]): every stored value within `d / 2` of the f32 it came from
//! (`d` its block's scale), bulk moments bit for bit those of an f32 cache fed the same keys
//! (they are computed before quantization), checkpoints and sliding layers as in an f32 cache,
//! 34 bytes per 32 values, and head dimensions off the block size refused.

use proptest::prelude::*;
use qada_kv::{CacheShape, KvCache, KvDtype, KvError, LayerSpan, MomentsMode, WindowConfig};
use qada_stats::{Q8Block, Rows};

const D: usize = 64;
const HEADS: usize = 2;

fn shape(dtype: KvDtype) -> CacheShape {
    CacheShape {
        n_layers: 2,
        n_kv_heads: HEADS,
        head_dim: D,
        capacity: 4000,
        dtype,
    }
}

/// Layer 0 full, layer 1 sliding over `w`.
fn spans(w: usize) -> Vec<LayerSpan> {
    vec![LayerSpan::Full, LayerSpan::Sliding(w)]
}

/// A deterministic token-major block of `n` tokens from position `p0`; every fourth block of
/// 32 values has one outlier, so scales differ within a row.
fn block(n: usize, p0: usize, salt: f32) -> Vec<f32> {
    (0..n * HEADS * D)
        .map(|i| {
            let pos = p0 + i / (HEADS * D);
            let x = ((pos * 31 + i % (HEADS * D)) as f32 * 0.173 + salt).sin() * 2.0;
            if i % 128 == 5 {
                x * 300.0
            } else {
                x
            }
        })
        .collect()
}

fn blocks(r: Rows<'_>) -> Vec<Q8Block> {
    match r {
        Rows::Q8(x) => x.to_vec(),
        _ => panic!("expected q8 rows"),
    }
}

fn append(c: &mut KvCache, n: usize, t: usize) {
    for layer in 0..2 {
        let (k, v) = (block(n, t, layer as f32), block(n, t, 10.0 + layer as f32));
        c.append(layer, &k, &v).unwrap();
    }
}

/// Head `h`'s f32 keys (or values, `salt` 10) of positions `r`, as appended.
fn appended(r: std::ops::Range<usize>, h: usize, salt: f32) -> Vec<f32> {
    let all = block(r.end, 0, salt);
    r.flat_map(|p| all[p * HEADS * D + h * D..p * HEADS * D + (h + 1) * D].to_vec())
        .collect()
}

proptest! {
    #[test]
    fn q8_cache_round_trips_and_keeps_exact_moments(
        sizes in prop::collection::vec(prop_oneof![1usize..3, 1usize..90], 1..12),
        prefill_at in 0usize..4,
        frozen in any::<bool>(),
        w in 1usize..40,
        decode_after_checkpoint in 1usize..30,
    ) {
        let mode = if frozen { MomentsMode::Frozen } else { MomentsMode::Update };
        let wc = WindowConfig::new(3, 20).unwrap();
        let mut q8 = KvCache::with_spans(shape(KvDtype::Q8), wc, mode.clone(), spans(w)).unwrap();
        let mut f32c = KvCache::with_spans(shape(KvDtype::F32), wc, mode, spans(w)).unwrap();
        let mut t = 0;
        let mut cp = None;
        for (i, &n) in sizes.iter().enumerate() {
            append(&mut q8, n, t);
            append(&mut f32c, n, t);
            t += n;
            if i == prefill_at {
                q8.finish_prefill().unwrap();
                f32c.finish_prefill().unwrap();
                cp = Some((q8.checkpoint(), f32c.checkpoint(), t));
            }
            for h in 0..HEADS {
                let (a, b) = (q8.head(0, h).unwrap(), f32c.head(0, h).unwrap());
                // moments of the f32 keys, exactly
                prop_assert_eq!(a.bulk_moments(), b.bulk_moments());
                // every value within half a step of its block's scale
                for (k, salt) in [(a.keys(), 0.0), (a.values(), 10.0)] {
                    let x = appended(0..t, h, salt);
                    for (blk, xs) in blocks(k).iter().zip(x.chunks_exact(32)) {
                        let d = blk.d.to_f32();
                        for (&q, &v) in blk.qs.iter().zip(xs) {
                            prop_assert!((d * q as f32 - v).abs() <= 0.5 * d * (1.0 + 1e-6));
                        }
                    }
                }
                // the sliding layer keeps the same positions, and those positions' blocks
                let (s, f) = (q8.head(1, h).unwrap(), f32c.head(1, h).unwrap());
                prop_assert_eq!(s.first_position(), f.first_position());
                prop_assert_eq!(s.split(), f.split());
                let mut want = Vec::new();
                Q8Block::quantize_into(&appended(s.first_position()..t, h, 1.0), &mut want);
                prop_assert_eq!(blocks(s.keys()), want);
            }
            // bytes: 34 per 32 values, as many values as the f32 cache holds
            prop_assert_eq!(q8.stored_bytes() * 4 * 32, f32c.stored_bytes() * 34);
        }
        // checkpoint: decode, restore, decode the same again: the same state, moments exact
        if let Some((cq, cf, t0)) = cp {
            let step = |q8: &mut KvCache, f: &mut KvCache| {
                for k in 0..decode_after_checkpoint {
                    append(q8, 1, t0 + k);
                    append(f, 1, t0 + k);
                }
            };
            q8.restore(&cq).unwrap();
            f32c.restore(&cf).unwrap();
            step(&mut q8, &mut f32c);
            let first: Vec<_> = (0..2)
                .flat_map(|l| (0..HEADS).map(move |h| (l, h)))
                .map(|(l, h)| {
                    let v = q8.head(l, h).unwrap();
                    (blocks(v.keys()), blocks(v.values()), v.bulk_moments().clone(), v.split())
                })
                .collect();
            q8.restore(&cq).unwrap();
            f32c.restore(&cf).unwrap();
            step(&mut q8, &mut f32c);
            for (i, (l, h)) in (0..2).flat_map(|l| (0..HEADS).map(move |h| (l, h))).enumerate() {
                let v = q8.head(l, h).unwrap();
                prop_assert_eq!(&first[i].0, &blocks(v.keys()));
                prop_assert_eq!(&first[i].1, &blocks(v.values()));
                prop_assert_eq!(&first[i].2, v.bulk_moments());
                prop_assert_eq!(&first[i].3, &v.split());
                prop_assert_eq!(v.bulk_moments(), f32c.head(l, h).unwrap().bulk_moments());
            }
        }
    }
}

#[test]
fn q8_needs_a_head_dimension_in_blocks_of_32() {
    let mut s = shape(KvDtype::Q8);
    s.head_dim = 48;
    let err = KvCache::new(s, WindowConfig::default(), MomentsMode::Update).unwrap_err();
    assert!(matches!(err, KvError::Q8HeadDim { head_dim: 48 }), "{err}");
    assert!(err.to_string().contains("multiple of 32"));
    assert_eq!(KvDtype::Q8.bytes_for(64), 68);
}
