//! Properties of the sink / window / bulk split and of the bulk moments kept by the cache.

use std::sync::Arc;

use proptest::prelude::*;
use qada_kv::{CacheShape, KvCache, KvDtype, KvError, MomentsMode, WindowConfig};
use qada_stats::{KeyMoments, ModelSignature, MomentTable, Rows};

fn shape(d: usize, heads: usize, capacity: usize) -> CacheShape {
    CacheShape {
        n_layers: 2,
        n_kv_heads: heads,
        head_dim: d,
        capacity,
        dtype: KvDtype::F32,
    }
}

fn f32s(r: Rows<'_>) -> &[f32] {
    match r {
        Rows::F32(x) => x,
        _ => panic!("expected f32 rows"),
    }
}

/// A deterministic token-major block of `n` tokens starting at position `p0`.
fn block(n: usize, p0: usize, heads: usize, d: usize, salt: f32) -> Vec<f32> {
    (0..n * heads * d)
        .map(|i| {
            let pos = p0 + i / (heads * d);
            ((pos * 31 + i % (heads * d)) as f32 * 0.173 + salt).sin() * 2.0
        })
        .collect()
}

/// The keys of head `h` at positions `r`, gathered from the token-major blocks' definition.
fn head_keys(cache: &KvCache, layer: usize, h: usize, r: std::ops::Range<usize>) -> Vec<f32> {
    let v = cache.head(layer, h).unwrap();
    f32s(v.keys())[r.start * v.dim()..r.end * v.dim()].to_vec()
}

fn assert_moments_eq(a: &KeyMoments, b: &KeyMoments) -> Result<(), TestCaseError> {
    prop_assert_eq!(a.count(), b.count());
    for (x, y) in a.mean().iter().zip(b.mean()) {
        prop_assert!((x - y).abs() < 1e-9, "mean {x} vs {y}");
    }
    for (x, y) in a.covariance().iter().zip(b.covariance()) {
        prop_assert!((x - y).abs() < 1e-9, "cov {x} vs {y}");
    }
    Ok(())
}

proptest! {
    #[test]
    fn sink_window_and_bulk_are_disjoint_and_cover_every_position(
        sink in 0usize..40, extra in 1usize..200, t in 0usize..600,
    ) {
        let w = WindowConfig::new(sink, sink + extra).unwrap();
        let s = w.split(t);
        prop_assert_eq!(s.sink.start, 0);
        prop_assert_eq!(s.sink.end, s.bulk.start);
        prop_assert_eq!(s.bulk.end, s.window.start);
        prop_assert_eq!(s.window.end, t);
        prop_assert_eq!(s.sink.len(), t.min(sink));
        if t <= w.local() {
            prop_assert_eq!(s.bulk_len(), 0);
            prop_assert_eq!(s.local_len(), t);
        } else {
            // exactly the 1-based set {1..T_sink} U {T-(T_local-T_sink)+1 .. T}
            prop_assert_eq!(s.bulk_len(), t - w.local());
            prop_assert_eq!(s.window.start, t - (w.local() - sink));
            prop_assert_eq!(s.local_len(), w.local());
        }
    }

    #[test]
    fn bulk_moments_equal_two_pass_moments_of_exactly_the_bulk_keys(
        sink in 0usize..6, extra in 1usize..12,
        blocks in prop::collection::vec(1usize..9, 1..12),
        d in 1usize..6, heads in 1usize..4,
    ) {
        let w = WindowConfig::new(sink, sink + extra).unwrap();
        let mut cache = KvCache::new(shape(d, heads, 1000), w, MomentsMode::Update).unwrap();
        let mut t = 0;
        for n in blocks {
            for layer in 0..2 {
                let k = block(n, t, heads, d, layer as f32);
                let v = block(n, t, heads, d, 10.0 + layer as f32);
                cache.append(layer, &k, &v).unwrap();
            }
            t += n;
            for layer in 0..2 {
                for h in 0..heads {
                    let view = cache.head(layer, h).unwrap();
                    let bulk = view.split().bulk;
                    let reference = KeyMoments::from_rows(d, &head_keys(&cache, layer, h, bulk)).unwrap();
                    assert_moments_eq(view.bulk_moments(), &reference)?;
                }
            }
        }
    }

    #[test]
    fn views_return_what_was_appended(
        blocks in prop::collection::vec(1usize..20, 1..8), d in 1usize..5, heads in 1usize..4,
    ) {
        let mut cache = KvCache::new(shape(d, heads, 1000), WindowConfig::new(2, 7).unwrap(), MomentsMode::Update).unwrap();
        let mut all_k = vec![];
        let mut all_v = vec![];
        let mut t = 0;
        for n in blocks {
            let k = block(n, t, heads, d, 0.0);
            let v = block(n, t, heads, d, 5.0);
            cache.append(0, &k, &v).unwrap();
            cache.append(1, &v, &k).unwrap();
            all_k.extend(k);
            all_v.extend(v);
            t += n;
        }
        for h in 0..heads {
            let view = cache.head(0, h).unwrap();
            prop_assert_eq!(view.len(), t);
            for pos in 0..t {
                let src = &all_k[pos * heads * d + h * d..][..d];
                prop_assert_eq!(&f32s(view.keys())[pos * d..(pos + 1) * d], src);
                let src = &all_v[pos * heads * d + h * d..][..d];
                prop_assert_eq!(&f32s(view.values())[pos * d..(pos + 1) * d], src);
            }
            // the three segments are sub-slices of the same storage, in order
            let (s, b, w) = (view.sink(), view.bulk(), view.window());
            prop_assert_eq!(s.start, 0);
            prop_assert_eq!(b.start, s.len(d));
            prop_assert_eq!(w.start, s.len(d) + b.len(d));
            prop_assert_eq!(s.len(d) + b.len(d) + w.len(d), t);
            prop_assert_eq!(f32s(w.keys), &f32s(view.keys())[w.start * d..]);
        }
    }
}

#[test]
fn frozen_moments_stop_at_the_end_of_prefill() {
    let (d, heads) = (3, 2);
    let w = WindowConfig::new(1, 4).unwrap();
    let mut cache = KvCache::new(shape(d, heads, 100), w, MomentsMode::Frozen).unwrap();
    for layer in 0..2 {
        cache
            .append(
                layer,
                &block(20, 0, heads, d, 0.0),
                &block(20, 0, heads, d, 1.0),
            )
            .unwrap();
    }
    cache.finish_prefill().unwrap();
    let at_prefill = cache.head(1, 1).unwrap().bulk_moments().clone();
    assert_eq!(at_prefill.count(), 16);
    for t in 20..30 {
        for layer in 0..2 {
            cache
                .append(
                    layer,
                    &block(1, t, heads, d, 0.0),
                    &block(1, t, heads, d, 1.0),
                )
                .unwrap();
        }
    }
    let view = cache.head(1, 1).unwrap();
    assert_eq!(view.bulk_moments(), &at_prefill);
    assert_eq!(view.split().bulk_len(), 26);
}

#[test]
fn calibration_moments_come_from_the_table_at_prefill() {
    let (d, heads) = (3, 2);
    let sig = ModelSignature {
        architecture: "llama".into(),
        n_layers: 2,
        n_kv_heads: heads as u32,
        head_dim: d as u32,
        rope_base: 1e4,
    };
    let runs: Vec<Vec<f32>> = (0..4).map(|i| block(64, 0, 1, d, i as f32 * 3.0)).collect();
    let table = MomentTable::from_keys(sig, 8, |l, h| runs[l * 2 + h].as_slice()).unwrap();
    let expected = table.lookup(40, 10).unwrap().moments(1, 0).unwrap().clone();
    assert_eq!(expected.count(), 24);
    let mode = MomentsMode::Calibration {
        table: Arc::new(table),
        offset: 10,
    };
    let mut cache =
        KvCache::new(shape(d, heads, 100), WindowConfig::new(1, 4).unwrap(), mode).unwrap();
    for layer in 0..2 {
        cache
            .append(
                layer,
                &block(40, 0, heads, d, 0.0),
                &block(40, 0, heads, d, 1.0),
            )
            .unwrap();
    }
    assert!(cache.head(1, 0).unwrap().bulk_moments().is_empty());
    cache.finish_prefill().unwrap();
    assert_eq!(cache.head(1, 0).unwrap().bulk_moments(), &expected);

    // a prompt too short for any checkpoint is an error that says so
    cache.clear();
    for layer in 0..2 {
        cache
            .append(
                layer,
                &block(12, 0, heads, d, 0.0),
                &block(12, 0, heads, d, 1.0),
            )
            .unwrap();
    }
    let err = cache.finish_prefill().unwrap_err();
    assert!(
        err.to_string().contains("no calibration checkpoint"),
        "{err}"
    );
}

#[test]
fn errors_not_panics() {
    assert!(matches!(
        WindowConfig::new(16, 16),
        Err(KvError::InvalidWindow { .. })
    ));
    assert!(WindowConfig::new(0, 1).is_ok());
    let mut cache = KvCache::new(
        shape(2, 1, 3),
        WindowConfig::new(0, 2).unwrap(),
        MomentsMode::Update,
    )
    .unwrap();
    assert!(matches!(
        cache.append(0, &[1.0; 3], &[1.0; 3]),
        Err(KvError::DimensionMismatch { .. })
    ));
    assert!(matches!(
        cache.append(0, &[1.0; 4], &[1.0; 2]),
        Err(KvError::KeyValueMismatch { .. })
    ));
    assert!(matches!(
        cache.append(5, &[1.0; 2], &[1.0; 2]),
        Err(KvError::OutOfRange { .. })
    ));
    cache.append(0, &[1.0; 6], &[1.0; 6]).unwrap();
    let err = cache.append(0, &[1.0; 2], &[1.0; 2]).unwrap_err();
    assert!(
        matches!(err, KvError::CapacityExceeded { capacity: 3, .. }),
        "{err}"
    );
    assert!(cache.head(0, 1).is_err());
    assert!(cache.head(2, 0).is_err());
}

#[test]
fn sink_of_zero_and_short_sequences() {
    let w = WindowConfig::new(0, 4).unwrap();
    let s = w.split(10);
    assert_eq!((s.sink, s.bulk, s.window), (0..0, 0..6, 6..10));
    let s = WindowConfig::PAPER.split(100);
    assert_eq!((s.sink, s.bulk, s.window), (0..16, 16..16, 16..100));
    let s = WindowConfig::PAPER.split(129);
    assert_eq!((s.sink, s.bulk, s.window), (0..16, 16..17, 17..129));
}

proptest! {
    /// After appending anything, restore returns exactly the checkpointed keys and moments,
    /// and appending the same tokens again gives the same state as the first time.
    #[test]
    fn restore_returns_to_the_checkpoint(
        first in 1usize..40, extra in prop::collection::vec(1usize..9, 1..6), frozen in any::<bool>(),
    ) {
        let (d, heads) = (3, 2);
        let mode = if frozen { MomentsMode::Frozen } else { MomentsMode::Update };
        let mut cache = KvCache::new(shape(d, heads, 1000), WindowConfig::new(2, 6).unwrap(), mode).unwrap();
        for layer in 0..2 {
            cache.append(layer, &block(first, 0, heads, d, 0.0), &block(first, 0, heads, d, 1.0)).unwrap();
        }
        cache.finish_prefill().unwrap();
        let cp = cache.checkpoint();
        let before: Vec<(Vec<f32>, KeyMoments)> = (0..heads)
            .map(|h| (f32s(cache.head(1, h).unwrap().keys()).to_vec(), cache.head(1, h).unwrap().bulk_moments().clone()))
            .collect();
        let run = |cache: &mut KvCache| {
            let mut t = first;
            for &n in &extra {
                for layer in 0..2 {
                    cache.append(layer, &block(n, t, heads, d, 0.0), &block(n, t, heads, d, 1.0)).unwrap();
                }
                t += n;
            }
            (0..heads).map(|h| cache.head(1, h).unwrap().bulk_moments().clone()).collect::<Vec<_>>()
        };
        let once = run(&mut cache);
        cache.restore(&cp).unwrap();
        for (h, (keys, m)) in before.iter().enumerate() {
            let v = cache.head(1, h).unwrap();
            prop_assert_eq!(f32s(v.keys()), keys.as_slice());
            prop_assert_eq!(v.bulk_moments(), m);
        }
        let twice = run(&mut cache);
        prop_assert_eq!(once, twice);
    }
}

#[test]
fn switching_moment_modes_after_prefill() {
    let (d, heads) = (3, 2);
    let sig = ModelSignature {
        architecture: "llama".into(),
        n_layers: 2,
        n_kv_heads: heads as u32,
        head_dim: d as u32,
        rope_base: 1e4,
    };
    let runs: Vec<Vec<f32>> = (0..4).map(|i| block(64, 0, 1, d, i as f32 * 3.0)).collect();
    let table =
        Arc::new(MomentTable::from_keys(sig, 8, |l, h| runs[l * 2 + h].as_slice()).unwrap());
    let w = WindowConfig::new(1, 4).unwrap();
    let mut cache = KvCache::new(shape(d, heads, 100), w, MomentsMode::Update).unwrap();
    for layer in 0..2 {
        cache
            .append(
                layer,
                &block(40, 0, heads, d, 0.0),
                &block(40, 0, heads, d, 1.0),
            )
            .unwrap();
    }
    cache.finish_prefill().unwrap();
    let own = |c: &KvCache| {
        let v = c.head(0, 1).unwrap();
        KeyMoments::from_rows(
            d,
            &f32s(v.keys())[v.split().bulk.start * d..v.split().bulk.end * d],
        )
        .unwrap()
    };
    let cp = cache.checkpoint();

    cache
        .set_moments_mode(MomentsMode::Calibration {
            table: table.clone(),
            offset: 10,
        })
        .unwrap();
    assert_eq!(
        cache.head(0, 1).unwrap().bulk_moments(),
        table.lookup(40, 10).unwrap().moments(0, 1).unwrap()
    );
    // leaving calibration recomputes the cache's own bulk moments, then follows new keys
    cache
        .append(
            0,
            &block(3, 40, heads, d, 0.0),
            &block(3, 40, heads, d, 1.0),
        )
        .unwrap();
    cache.set_moments_mode(MomentsMode::Update).unwrap();
    let m = cache.head(0, 1).unwrap().bulk_moments().clone();
    let r = own(&cache);
    assert_eq!(m.count(), r.count());
    for (a, b) in m.covariance().iter().zip(r.covariance()) {
        assert!((a - b).abs() < 1e-9);
    }
    // frozen after prefill: new keys no longer join
    cache.restore(&cp).unwrap();
    cache.set_moments_mode(MomentsMode::Frozen).unwrap();
    let frozen = cache.head(0, 1).unwrap().bulk_moments().clone();
    cache
        .append(
            0,
            &block(5, 40, heads, d, 0.0),
            &block(5, 40, heads, d, 1.0),
        )
        .unwrap();
    assert_eq!(cache.head(0, 1).unwrap().bulk_moments(), &frozen);
    // back to update: the keys that left the window meanwhile are folded in
    cache.set_moments_mode(MomentsMode::Update).unwrap();
    assert_eq!(
        cache.head(0, 1).unwrap().bulk_moments().count(),
        own(&cache).count()
    );
    // a checkpoint from a longer state cannot be restored into a shorter one
    let long = cache.checkpoint();
    cache.restore(&cp).unwrap();
    assert!(cache.restore(&long).is_err());
}

#[test]
fn an_f16_cache_stores_rounded_rows_and_their_moments() {
    let (d, heads) = (4, 2);
    let mut sh = shape(d, heads, 100);
    sh.dtype = KvDtype::F16;
    let mut cache =
        KvCache::new(sh, WindowConfig::new(2, 8).unwrap(), MomentsMode::Update).unwrap();
    let k = block(30, 0, heads, d, 0.0);
    for layer in 0..2 {
        cache.append(layer, &k, &k).unwrap();
    }
    let v = cache.head(0, 1).unwrap();
    let Rows::F16(stored) = v.keys() else {
        panic!("f16 cache gave f32 rows")
    };
    let rounded: Vec<f32> = (0..30)
        .flat_map(|t| k[t * heads * d + d..t * heads * d + 2 * d].to_vec())
        .map(|x| qada_stats::f16::from_f32(x).to_f32())
        .collect();
    let back: Vec<f32> = stored.iter().map(|x| x.to_f32()).collect();
    assert_eq!(back, rounded);
    let bulk = v.split().bulk;
    let reference = KeyMoments::from_rows(d, &rounded[bulk.start * d..bulk.end * d]).unwrap();
    assert_eq!(v.bulk_moments().count(), reference.count());
    for (a, b) in v
        .bulk_moments()
        .covariance()
        .iter()
        .zip(reference.covariance())
    {
        assert!((a - b).abs() < 1e-9);
    }
}

#[test]
fn fixed_moments_are_served_factored_and_current_ones_exactly() {
    let (d, heads) = (6, 1);
    let w = WindowConfig::new(1, 4).unwrap();
    let q = [0.5f32, -1.0, 0.25, 2.0, -0.75, 1.5];
    for (mode, factored) in [(MomentsMode::Update, false), (MomentsMode::Frozen, true)] {
        let mut cache = KvCache::new(shape(d, heads, 200), w, mode).unwrap();
        for layer in 0..2 {
            cache
                .append(
                    layer,
                    &block(100, 0, heads, d, 0.0),
                    &block(100, 0, heads, d, 1.0),
                )
                .unwrap();
        }
        cache.finish_prefill().unwrap();
        let v = cache.head(1, 0).unwrap();
        let (full, served) = (
            v.bulk_moments().quad_form(&q).unwrap(),
            v.bulk_distribution().quad_form(&q).unwrap(),
        );
        if factored {
            let trace: f64 = (0..d)
                .map(|i| v.bulk_moments().covariance()[i * d + i])
                .sum();
            let qq: f64 = q.iter().map(|&x| (x as f64).powi(2)).sum();
            assert!(
                (full - served).abs() <= qada_kv::FACTOR_TOLERANCE * trace * qq + 1e-5,
                "{full} vs {served}"
            );
        } else {
            assert_eq!(full, served);
        }
        assert_eq!(v.bulk_distribution().count(), v.bulk_moments().count());
    }
}

/// A checkpoint restores only into the cache that took it: another session's cache, a clone
/// and the same cache after `clear` refuse it with an error that says so, and leave their own
/// contents as they were.
#[test]
fn a_checkpoint_of_another_cache_is_refused() {
    let (d, heads) = (2, 1);
    let w = WindowConfig::new(1, 3).unwrap();
    let fill = |c: &mut KvCache, n: usize| {
        for layer in 0..2 {
            c.append(
                layer,
                &block(n, 0, heads, d, 0.0),
                &block(n, 0, heads, d, 1.0),
            )
            .unwrap();
        }
    };
    let mut a = KvCache::new(shape(d, heads, 64), w, MomentsMode::Update).unwrap();
    let mut b = KvCache::new(shape(d, heads, 64), w, MomentsMode::Update).unwrap();
    assert_ne!(a.id(), b.id());
    fill(&mut a, 10);
    fill(&mut b, 20);
    let cp_a = a.checkpoint();
    assert_eq!(cp_a.cache_id(), a.id());

    // same shape, longer sequence: before ids this restored a's moments over b's keys
    let before = b.head(0, 0).unwrap().bulk_moments().clone();
    let err = b.restore(&cp_a).unwrap_err();
    assert!(
        matches!(err, KvError::ForeignCheckpoint { checkpoint, cache } if checkpoint == a.id() && cache == b.id()),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("another cache (another session)")
            && msg.contains("restore a checkpoint into the session that made it"),
        "{msg}"
    );
    assert_eq!(b.seq_len(), 20);
    assert_eq!(b.head(0, 0).unwrap().bulk_moments(), &before);

    // a clone is another cache, both ways
    let mut c = a.clone();
    assert_ne!(c.id(), a.id());
    assert!(matches!(
        c.restore(&cp_a),
        Err(KvError::ForeignCheckpoint { .. })
    ));
    assert!(matches!(
        a.restore(&c.checkpoint()),
        Err(KvError::ForeignCheckpoint { .. })
    ));

    // the cache that took it restores it, also after appending more
    fill(&mut a, 4);
    a.restore(&cp_a).unwrap();
    assert_eq!(a.seq_len(), 10);

    // after clear the cache holds another sequence
    let old = a.id();
    a.clear();
    assert_ne!(a.id(), old);
    fill(&mut a, 12);
    assert!(matches!(
        a.restore(&cp_a),
        Err(KvError::ForeignCheckpoint { .. })
    ));
    assert_eq!(a.seq_len(), 12);
}
