//! Properties of layers with a span: sliding layers (Gemma 3's local attention) keep only the
//! rows their queries can still see, in bounded memory, while full layers of the same cache
//! behave exactly as in a cache without spans.

use std::sync::Arc;

use proptest::prelude::*;
use qada_kv::{
    CacheShape, KvCache, KvDtype, KvError, LayerSpan, MomentsMode, Segment, WindowConfig,
};
use qada_stats::{KeyMoments, ModelSignature, MomentTable, Rows};

/// Layer 0 full, layer 1 sliding over `w`, layer 2 full: full layers on both sides, so a
/// layer-indexing slip shows.
fn spans(w: usize) -> Vec<LayerSpan> {
    vec![LayerSpan::Full, LayerSpan::Sliding(w), LayerSpan::Full]
}

fn shape(dtype: KvDtype, capacity: usize) -> CacheShape {
    CacheShape {
        n_layers: 3,
        n_kv_heads: 2,
        head_dim: 3,
        capacity,
        dtype,
    }
}

fn dtype() -> impl Strategy<Value = KvDtype> {
    prop_oneof![Just(KvDtype::F32), Just(KvDtype::F16)]
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

/// Rows as exact bit patterns (f32 or f16), comparable across dtypes of the same cache.
fn bits(r: Rows<'_>) -> Vec<u32> {
    match r {
        Rows::F32(x) => x.iter().map(|v| v.to_bits()).collect(),
        Rows::F16(x) => x.iter().map(|v| u32::from(v.to_bits())).collect(),
        Rows::Q8(x) => x
            .iter()
            .flat_map(|b| {
                std::iter::once(u32::from(b.d.to_bits()))
                    .chain(b.qs.iter().map(|&q| q as u8 as u32))
            })
            .collect(),
    }
}

/// Everything a reader of one head can see, as plain data.
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    len: usize,
    first: usize,
    span: LayerSpan,
    keys: Vec<u32>,
    values: Vec<u32>,
    segments: Vec<(usize, Vec<u32>, Vec<u32>)>,
    split: qada_kv::Split,
    moments: KeyMoments,
}

fn seg(s: Segment<'_>) -> (usize, Vec<u32>, Vec<u32>) {
    (s.start, bits(s.keys), bits(s.values))
}

fn seen(cache: &KvCache, layer: usize, h: usize) -> Seen {
    let v = cache.head(layer, h).unwrap();
    Seen {
        len: v.len(),
        first: v.first_position(),
        span: v.span(),
        keys: bits(v.keys()),
        values: bits(v.values()),
        segments: vec![seg(v.sink()), seg(v.bulk()), seg(v.window())],
        split: v.split(),
        moments: v.bulk_moments().clone(),
    }
}

fn seen_all(cache: &KvCache) -> Vec<Seen> {
    (0..3)
        .flat_map(|l| (0..2).map(move |h| (l, h)))
        .map(|(l, h)| seen(cache, l, h))
        .collect()
}

/// Append the same block to every layer (values differ from keys by a salt).
fn append_all(cache: &mut KvCache, n: usize, t: usize) {
    for layer in 0..3 {
        let k = block(n, t, 2, 3, layer as f32);
        let v = block(n, t, 2, 3, 10.0 + layer as f32);
        cache.append(layer, &k, &v).unwrap();
    }
}

proptest! {
    /// A sliding layer's window is the last `min(W, len)` rows of the full history, its sink
    /// and bulk are empty, its kept rows are exactly positions `first..len`, every append
    /// keeps the block's `W - 1` predecessors, and memory stays within `max(2W, W - 1 + n)`.
    #[test]
    fn a_sliding_layer_sees_the_last_w_rows_in_bounded_memory(
        w in 1usize..40, blocks in prop::collection::vec(prop_oneof![1usize..3, 1usize..50], 1..40),
        dtype in dtype(),
        mode in 0usize..2,
    ) {
        let mode = if mode == 0 { MomentsMode::Update } else { MomentsMode::Frozen };
        let (d, heads) = (3, 2);
        let wc = WindowConfig::new(2, 9).unwrap();
        let mut cache = KvCache::with_spans(shape(dtype, 2000), wc, mode.clone(), spans(w)).unwrap();
        // a reference layer that keeps every row, fed the same rows
        let mut full = KvCache::new(shape(dtype, 2000), wc, mode).unwrap();
        let mut t = 0;
        for (i, &n) in blocks.iter().enumerate() {
            let k = block(n, t, heads, d, 1.0);
            let v = block(n, t, heads, d, 11.0);
            cache.append(1, &k, &v).unwrap();
            full.append(1, &k, &v).unwrap();
            t += n;
            if i == 0 {
                cache.finish_prefill().unwrap();
                full.finish_prefill().unwrap();
            }
            prop_assert_eq!(cache.len(1), t);
            for h in 0..heads {
                let view = cache.head(1, h).unwrap();
                let reference = full.head(1, h).unwrap();
                let first = view.first_position();
                prop_assert_eq!(view.len(), t);
                prop_assert_eq!(view.span(), LayerSpan::Sliding(w));
                // the block's queries still see their W - 1 predecessors
                prop_assert!(first <= t.saturating_sub(n + w - 1), "first {first} len {t} n {n} W {w}");
                // bounded memory: at most max(2W, W - 1 + n) rows kept
                let kept = view.keys().n_rows(d);
                prop_assert!(kept <= (2 * w).max(w - 1 + n), "kept {kept} n {n} W {w}");
                prop_assert_eq!(view.values().n_rows(d), kept);
                prop_assert_eq!(cache.stored_bytes(), 2 * heads * d * dtype.size() * kept);
                // kept rows are positions first..len, in order
                prop_assert_eq!(kept, t - first);
                prop_assert_eq!(bits(view.keys()), bits(reference.keys().slice(first, t, d)));
                prop_assert_eq!(bits(view.values()), bits(reference.values().slice(first, t, d)));
                // everything is window: the last min(W, len) positions
                let s = t.saturating_sub(w);
                let split = view.split();
                prop_assert_eq!(split.clone(), qada_kv::Split { sink: s..s, bulk: s..s, window: s..t });
                prop_assert!(view.sink().is_empty() && view.bulk().is_empty());
                prop_assert_eq!(view.sink().start, s);
                prop_assert_eq!(view.bulk().start, s);
                let win = view.window();
                prop_assert_eq!(win.start, s);
                prop_assert_eq!(win.len(d), t.min(w));
                prop_assert_eq!(bits(win.keys), bits(reference.keys().slice(s, t, d)));
                prop_assert_eq!(bits(win.values), bits(reference.values().slice(s, t, d)));
                // nothing is folded into moments of a sliding layer
                prop_assert!(view.bulk_moments().is_empty());
            }
        }
        // the sliding layer's memory does not grow with the context
        let one_layer = 2 * heads * d * dtype.size();
        let max_n = blocks.iter().copied().max().unwrap();
        prop_assert!(cache.stored_bytes() <= one_layer * (2 * w).max(w - 1 + max_n));
        prop_assert_eq!(full.stored_bytes(), one_layer * t);
    }

    /// Full layers of a cache with sliding layers behave exactly as in a cache without spans:
    /// same rows, same split, same segments, same moments.
    #[test]
    fn full_layers_are_untouched_by_sliding_neighbours(
        w in 1usize..20, blocks in prop::collection::vec(1usize..30, 1..12), dtype in dtype(),
        prefill_at in 0usize..4, mode in 0usize..2,
    ) {
        let mode = if mode == 0 { MomentsMode::Update } else { MomentsMode::Frozen };
        let wc = WindowConfig::new(1, 6).unwrap();
        let mut sliding = KvCache::with_spans(shape(dtype, 1000), wc, mode.clone(), spans(w)).unwrap();
        let mut plain = KvCache::new(shape(dtype, 1000), wc, mode).unwrap();
        prop_assert_eq!(plain.spans(), &[LayerSpan::Full; 3][..]);
        let mut t = 0;
        for (i, &n) in blocks.iter().enumerate() {
            append_all(&mut sliding, n, t);
            append_all(&mut plain, n, t);
            t += n;
            if i == prefill_at {
                sliding.finish_prefill().unwrap();
                plain.finish_prefill().unwrap();
            }
            for layer in [0, 2] {
                for h in 0..2 {
                    let a = seen(&sliding, layer, h);
                    prop_assert_eq!(a.first, 0);
                    prop_assert_eq!(a.span, LayerSpan::Full);
                    prop_assert_eq!(&a, &seen(&plain, layer, h));
                }
            }
            prop_assert_eq!(sliding.len(1), plain.len(1));
            prop_assert_eq!(sliding.seq_len(), plain.seq_len());
        }
    }

    /// Checkpoint, append more, restore: every view is the one at checkpoint time, and
    /// decoding the same tokens again gives the same views as the first time.
    #[test]
    fn restore_gives_back_the_sliding_rows(
        w in 1usize..20, prompt in 1usize..60,
        extra in prop::collection::vec(1usize..12, 1..12), dtype in dtype(), frozen in any::<bool>(),
    ) {
        let mode = if frozen { MomentsMode::Frozen } else { MomentsMode::Update };
        let wc = WindowConfig::new(2, 6).unwrap();
        let mut cache = KvCache::with_spans(shape(dtype, 1000), wc, mode, spans(w)).unwrap();
        append_all(&mut cache, prompt, 0);
        cache.finish_prefill().unwrap();
        let cp = cache.checkpoint();
        let at_checkpoint = seen_all(&cache);
        let bytes_at_checkpoint = cache.stored_bytes();
        let run = |cache: &mut KvCache| {
            let mut t = prompt;
            let mut views = vec![];
            for &n in &extra {
                append_all(cache, n, t);
                t += n;
                views.push(seen_all(cache));
            }
            views
        };
        let once = run(&mut cache);
        cache.restore(&cp).unwrap();
        prop_assert_eq!(&seen_all(&cache), &at_checkpoint);
        prop_assert_eq!(cache.stored_bytes(), bytes_at_checkpoint);
        let twice = run(&mut cache);
        prop_assert_eq!(once, twice);
        // restoring twice is the same as once
        cache.restore(&cp).unwrap();
        prop_assert_eq!(&seen_all(&cache), &at_checkpoint);
    }
}

#[test]
fn with_spans_refuses_a_wrong_count_and_a_zero_window() {
    let wc = WindowConfig::new(1, 4).unwrap();
    let s = shape(KvDtype::F32, 100);
    for bad in [
        vec![],
        vec![LayerSpan::Full; 2],
        vec![LayerSpan::Sliding(4); 4],
    ] {
        let n = bad.len();
        let err = KvCache::with_spans(s, wc, MomentsMode::Update, bad).unwrap_err();
        assert!(
            matches!(err, KvError::SpanCount { spans, layers: 3 } if spans == n),
            "{err:?}"
        );
        assert!(err.to_string().contains("one LayerSpan per layer"), "{err}");
    }
    let err = KvCache::with_spans(
        s,
        wc,
        MomentsMode::Update,
        vec![LayerSpan::Full, LayerSpan::Full, LayerSpan::Sliding(0)],
    )
    .unwrap_err();
    assert!(
        matches!(err, KvError::EmptySlidingWindow { layer: 2 }),
        "{err:?}"
    );
    assert!(err.to_string().contains("layer 2"), "{err}");
    // a window at least as long as the capacity is legal: it never drops a row
    let mut cache = KvCache::with_spans(s, wc, MomentsMode::Update, spans(usize::MAX)).unwrap();
    append_all(&mut cache, 100, 0);
    let v = cache.head(1, 1).unwrap();
    assert_eq!((v.first_position(), v.keys().n_rows(3)), (0, 100));
    assert_eq!(v.window().len(3), 100);
    let mut cache = KvCache::with_spans(s, wc, MomentsMode::Update, spans(100)).unwrap();
    for t in 0..100 {
        append_all(&mut cache, 1, t);
    }
    assert_eq!(cache.head(1, 0).unwrap().first_position(), 0);
}

#[test]
fn spans_are_reported_and_default_to_full() {
    assert_eq!(LayerSpan::default(), LayerSpan::Full);
    assert_eq!(LayerSpan::Full.window(), None);
    assert_eq!(LayerSpan::Sliding(512).window(), Some(512));
    let wc = WindowConfig::new(1, 4).unwrap();
    let cache =
        KvCache::with_spans(shape(KvDtype::F16, 100), wc, MomentsMode::Update, spans(7)).unwrap();
    assert_eq!(cache.spans(), &spans(7)[..]);
    assert_eq!(cache.span(1), LayerSpan::Sliding(7));
    assert_eq!(cache.span(2), LayerSpan::Full);
    assert_eq!(cache.span(3), LayerSpan::Full, "out of range reads as Full");
    assert_eq!(cache.head(1, 0).unwrap().span(), LayerSpan::Sliding(7));
    assert_eq!(cache.head(0, 0).unwrap().first_position(), 0);
    let cache = KvCache::new(shape(KvDtype::F32, 10), wc, MomentsMode::Update).unwrap();
    assert_eq!(cache.spans(), &[LayerSpan::Full; 3][..]);
}

/// Clearing a cache resets its sliding layers: they start again at position 0.
#[test]
fn clear_resets_sliding_layers() {
    let wc = WindowConfig::new(1, 4).unwrap();
    let mut cache =
        KvCache::with_spans(shape(KvDtype::F32, 100), wc, MomentsMode::Update, spans(4)).unwrap();
    let mut fresh = cache.clone();
    append_all(&mut cache, 30, 0);
    append_all(&mut cache, 30, 30);
    assert_eq!(
        cache.head(1, 0).unwrap().first_position(),
        60 - (30 + 4 - 1)
    );
    cache.clear();
    assert_eq!(cache.stored_bytes(), 0);
    let v = cache.head(1, 0).unwrap();
    assert_eq!((v.len(), v.first_position(), v.keys().len()), (0, 0, 0));
    append_all(&mut cache, 3, 0);
    append_all(&mut fresh, 3, 0);
    assert_eq!(seen_all(&cache), seen_all(&fresh));
}

/// Calibration tables: checking and applying one ignores sliding layers (they keep empty
/// moments, whatever the table holds for them), and switching back to the cache's own moments
/// folds nothing for them either.
#[test]
fn calibration_ignores_sliding_layers() {
    let (d, heads) = (3, 2);
    let sig = ModelSignature {
        architecture: "gemma3".into(),
        n_layers: 3,
        n_kv_heads: heads as u32,
        head_dim: d as u32,
        rope_base: 1e4,
    };
    // a table with moments for every layer, and one with empty moments for the sliding layer
    let runs: Vec<Vec<f32>> = (0..6).map(|i| block(64, 0, 1, d, i as f32 * 3.0)).collect();
    let dense = MomentTable::from_keys(sig.clone(), 8, |l, h| runs[l * 2 + h].as_slice()).unwrap();
    let mut holed = MomentTable::new(sig, 8);
    for cp in dense.checkpoints() {
        let moments = (0..6)
            .map(|i| {
                if i / heads == 1 {
                    KeyMoments::new(d)
                } else {
                    cp.moments(i / heads, i % heads).unwrap().clone()
                }
            })
            .collect();
        holed.push_checkpoint(cp.tokens, moments).unwrap();
    }
    let expected = dense.lookup(40, 10).unwrap().clone();
    for table in [dense, holed] {
        let mode = MomentsMode::Calibration {
            table: Arc::new(table),
            offset: 10,
        };
        let wc = WindowConfig::new(1, 4).unwrap();
        let mut cache =
            KvCache::with_spans(shape(KvDtype::F32, 100), wc, mode.clone(), spans(5)).unwrap();
        append_all(&mut cache, 40, 0);
        cache.finish_prefill().unwrap();
        for h in 0..heads {
            for layer in [0, 2] {
                let v = cache.head(layer, h).unwrap();
                assert_eq!(v.bulk_moments(), expected.moments(layer, h).unwrap());
            }
            assert!(cache.head(1, h).unwrap().bulk_moments().is_empty());
        }
        append_all(&mut cache, 5, 40);
        cache.set_moments_mode(MomentsMode::Update).unwrap();
        assert!(cache.head(1, 0).unwrap().bulk_moments().is_empty());
        assert!(!cache.head(0, 0).unwrap().bulk_moments().is_empty());
        // switching into calibration after prefill applies the table the same way
        let MomentsMode::Calibration { table, .. } = &mode else {
            unreachable!()
        };
        let at_45 = table.lookup(45, 10).unwrap().clone();
        cache.set_moments_mode(mode).unwrap();
        assert!(cache.head(1, 1).unwrap().bulk_moments().is_empty());
        assert_eq!(
            cache.head(2, 1).unwrap().bulk_moments(),
            at_45.moments(2, 1).unwrap()
        );
    }
}
