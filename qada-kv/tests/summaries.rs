//! Properties of the bulk summaries the cache keeps for a criterion: page bounds and cluster
//! moments follow the bulk through prefill, `finish_prefill`, decoding, checkpoints and
//! `set_bulk_summaries`; sliding layers keep none.

use proptest::prelude::*;
use qada_kv::{CacheShape, KvCache, KvDtype, LayerSpan, MomentsMode, WindowConfig};
use qada_stats::{BulkSummaries, ClusterMoments, KeyMoments, PageBounds};

const D_F32: usize = 4;

fn dtype_and_dim(which: u8) -> (KvDtype, usize) {
    match which % 3 {
        0 => (KvDtype::F32, D_F32),
        1 => (KvDtype::F16, D_F32 + 1),
        _ => (KvDtype::Q8, 32),
    }
}

/// A deterministic token-major block of `n` tokens starting at position `p0`, drifting with
/// position (so k-means has something to find).
fn block(n: usize, p0: usize, heads: usize, d: usize, salt: f32) -> Vec<f32> {
    (0..n * heads * d)
        .map(|i| {
            let pos = p0 + i / (heads * d);
            ((pos * 31 + i % (heads * d)) as f32 * 0.173 + salt).sin() * 2.0
                + (pos / 16) as f32 * 0.5
        })
        .collect()
}

/// A cache of two layers: the first full, the second full or sliding.
fn cache(
    dtype: KvDtype,
    d: usize,
    heads: usize,
    sink: usize,
    local: usize,
    sliding: bool,
    frozen: bool,
) -> KvCache {
    let shape = CacheShape {
        n_layers: 2,
        n_kv_heads: heads,
        head_dim: d,
        capacity: 4096,
        dtype,
    };
    let spans = vec![
        LayerSpan::Full,
        if sliding {
            LayerSpan::Sliding(local)
        } else {
            LayerSpan::Full
        },
    ];
    let mode = if frozen {
        MomentsMode::Frozen
    } else {
        MomentsMode::Update
    };
    KvCache::with_spans(shape, WindowConfig::new(sink, local).unwrap(), mode, spans).unwrap()
}

/// Append `n` tokens to every layer.
fn append(c: &mut KvCache, n: usize, salt: f32) {
    let (heads, d) = (c.shape().n_kv_heads, c.shape().head_dim);
    for layer in 0..2 {
        let p0 = c.len(layer);
        let k = block(n, p0, heads, d, salt + layer as f32);
        let v = block(n, p0, heads, d, salt + 7.0);
        c.append(layer, &k, &v).unwrap();
    }
}

/// Every summary the cache keeps, per (layer, KV head).
fn summaries(c: &KvCache) -> Vec<(Option<PageBounds>, Option<ClusterMoments>)> {
    let heads = c.shape().n_kv_heads;
    (0..2)
        .flat_map(|l| (0..heads).map(move |h| (l, h)))
        .map(|(l, h)| {
            let v = c.head(l, h).unwrap();
            (v.bulk_pages().cloned(), v.bulk_clusters().cloned())
        })
        .collect()
}

/// The summaries agree with the bulk rows: page bounds equal bounds built from the rows
/// directly; clusters (after prefill) hold every bulk key, and with `k = 1` in update mode
/// their moments are the bulk's; sliding layers keep none.
fn check(c: &KvCache, want: BulkSummaries, prefill_done: bool) -> Result<(), TestCaseError> {
    for layer in 0..2 {
        for h in 0..c.shape().n_kv_heads {
            let v = c.head(layer, h).unwrap();
            if v.span() != LayerSpan::Full {
                prop_assert!(v.bulk_pages().is_none() && v.bulk_clusters().is_none());
                continue;
            }
            if c.len(layer) < want.from_context {
                // kept from a longer context on: not current, so not shown
                prop_assert!(v.bulk_pages().is_none() && v.bulk_clusters().is_none());
                continue;
            }
            let bulk = v.bulk();
            let n = bulk.len(v.dim());
            match (want.page, v.bulk_pages()) {
                (Some(page), Some(p)) => {
                    let mut direct = PageBounds::new(v.dim(), page).unwrap();
                    if want.channel_keys {
                        direct.keep_channel_keys().unwrap();
                    }
                    direct.push_rows_of(bulk.keys).unwrap();
                    prop_assert_eq!(p, &direct, "layer {} head {}", layer, h);
                }
                (None, None) => {}
                (w, got) => prop_assert!(
                    false,
                    "asked {:?}, kept {:?}",
                    w,
                    got.map(|p| p.page_size())
                ),
            }
            match (want.clusters, v.bulk_clusters()) {
                (Some(k), Some(cl)) => {
                    prop_assert_eq!(cl.k(), k);
                    if prefill_done {
                        prop_assert_eq!(cl.count() as usize, n, "layer {} head {}", layer, h);
                    } else {
                        prop_assert!(cl.is_empty());
                    }
                    // (a q8 cache's moments are those of the unquantized keys, its clusters of
                    // the stored ones)
                    let same_keys = c.shape().dtype == KvDtype::F32;
                    if k == 1
                        && prefill_done
                        && n > 0
                        && same_keys
                        && matches!(c.mode(), MomentsMode::Update)
                    {
                        moments_close(&cl.clusters()[0], v.bulk_moments())?;
                    }
                }
                (None, None) => {}
                (w, got) => prop_assert!(
                    false,
                    "asked {:?} clusters, kept {:?}",
                    w,
                    got.map(|c| c.k())
                ),
            }
        }
    }
    Ok(())
}

fn moments_close(a: &KeyMoments, b: &KeyMoments) -> Result<(), TestCaseError> {
    prop_assert_eq!(a.count(), b.count());
    for (x, y) in a.mean().iter().zip(b.mean()) {
        prop_assert!((x - y).abs() < 1e-9 * (1.0 + y.abs()), "mean {x} vs {y}");
    }
    for (x, y) in a.covariance().iter().zip(b.covariance()) {
        prop_assert!((x - y).abs() < 1e-8 * (1.0 + y.abs()), "cov {x} vs {y}");
    }
    Ok(())
}

/// Summaries from the first key (half the cases) or from a context of up to 100 keys on
/// (reached during prefill, during decoding, or never).
fn wanted() -> impl Strategy<Value = BulkSummaries> {
    (
        prop::option::of(1usize..12),
        prop::option::of(1usize..5),
        prop_oneof![Just(0usize), 1usize..100],
    )
        .prop_map(|(page, clusters, from)| BulkSummaries {
            page,
            clusters,
            channel_keys: page.is_some(),
            from_context: if page.is_some() || clusters.is_some() {
                from
            } else {
                0
            },
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Prefill chunks, `finish_prefill`, then single-token decoding; the summaries asked for
    /// before, during or after prefill always agree with the bulk rows.
    #[test]
    fn summaries_follow_the_bulk_through_prefill_and_decoding(
        which in 0u8..3, heads in 1usize..3, sink in 0usize..5, extra in 1usize..10,
        chunks in prop::collection::vec(1usize..25, 1..5), steps in 0usize..40,
        want in wanted(), set_at in 0usize..3, sliding: bool, frozen: bool,
    ) {
        let (dtype, d) = dtype_and_dim(which);
        let mut c = cache(dtype, d, heads, sink, sink + extra, sliding, frozen);
        if set_at == 0 {
            c.set_bulk_summaries(want).unwrap();
        }
        for (i, &n) in chunks.iter().enumerate() {
            append(&mut c, n, 0.0);
            if set_at == 1 && i == 0 {
                c.set_bulk_summaries(want).unwrap();
            }
            check(&c, if set_at < 2 { want } else { BulkSummaries::default() }, false)?;
        }
        c.finish_prefill().unwrap();
        if set_at == 2 {
            c.set_bulk_summaries(want).unwrap();
        }
        prop_assert_eq!(c.bulk_summaries(), want);
        check(&c, want, true)?;
        for _ in 0..steps {
            append(&mut c, 1, 0.0);
            check(&c, want, true)?;
        }
    }

    /// A checkpoint gives back the same summaries, and decoding from it again gives the same
    /// summaries as the first time.
    #[test]
    fn checkpoint_and_restore_give_back_the_summaries(
        which in 0u8..3, sink in 0usize..5, extra in 1usize..10, prompt in 1usize..60,
        steps in 1usize..30, want in wanted(), other in wanted(), sliding: bool,
    ) {
        let (dtype, d) = dtype_and_dim(which);
        let mut c = cache(dtype, d, 2, sink, sink + extra, sliding, false);
        c.set_bulk_summaries(want).unwrap();
        append(&mut c, prompt, 0.0);
        c.finish_prefill().unwrap();
        let cp = c.checkpoint();
        let at_checkpoint = summaries(&c);
        for _ in 0..steps {
            append(&mut c, 1, 0.0);
        }
        let after = summaries(&c);
        c.restore(&cp).unwrap();
        prop_assert_eq!(summaries(&c), at_checkpoint.clone());
        for _ in 0..steps {
            append(&mut c, 1, 0.0);
        }
        prop_assert_eq!(summaries(&c), after);
        check(&c, want, true)?;
        // asking for something else in between: restore brings back what was kept then
        c.restore(&cp).unwrap();
        c.set_bulk_summaries(other).unwrap();
        check(&c, other, true)?;
        c.restore(&cp).unwrap();
        prop_assert_eq!(c.bulk_summaries(), want);
        prop_assert_eq!(summaries(&c), at_checkpoint);
    }

    /// Asking again for what is kept changes nothing (the clusters, which followed the keys
    /// since prefill, are not re-fitted); asking for something else rebuilds from the bulk.
    #[test]
    fn set_bulk_summaries_is_a_no_op_for_the_same_value_and_a_rebuild_otherwise(
        which in 0u8..3, sink in 0usize..5, extra in 1usize..10, prompt in 20usize..80,
        steps in 1usize..40, k in 2usize..5, page in 1usize..9,
    ) {
        let (dtype, d) = dtype_and_dim(which);
        let mut c = cache(dtype, d, 1, sink, sink + extra, false, false);
        let want = BulkSummaries {
            page: Some(page),
            clusters: Some(k),
            channel_keys: true,
            from_context: 0,
        };
        c.set_bulk_summaries(want).unwrap();
        append(&mut c, prompt, 0.0);
        c.finish_prefill().unwrap();
        for _ in 0..steps {
            append(&mut c, 1, 0.3);
        }
        let before = summaries(&c);
        c.set_bulk_summaries(want).unwrap();
        prop_assert_eq!(summaries(&c), before);

        let other = BulkSummaries { page: Some(page + 1), ..want };
        c.set_bulk_summaries(other).unwrap();
        check(&c, other, true)?;
        for layer in 0..2 {
            let v = c.head(layer, 0).unwrap();
            let mut refit = ClusterMoments::new(d, k).unwrap();
            refit.fit(v.bulk().keys).unwrap();
            prop_assert_eq!(v.bulk_clusters(), Some(&refit));
        }
        c.set_bulk_summaries(BulkSummaries::default()).unwrap();
        check(&c, BulkSummaries::default(), true)?;
    }
}

#[test]
fn sliding_layers_keep_no_summaries_and_clear_empties_them() {
    let mut c = cache(KvDtype::F32, D_F32, 2, 2, 6, true, false);
    c.set_bulk_summaries(BulkSummaries {
        page: Some(4),
        clusters: Some(2),
        channel_keys: true,
        from_context: 0,
    })
    .unwrap();
    append(&mut c, 40, 0.0);
    c.finish_prefill().unwrap();
    append(&mut c, 1, 0.0);
    for h in 0..2 {
        let v = c.head(1, h).unwrap();
        assert!(v.bulk_pages().is_none() && v.bulk_clusters().is_none());
        let full = c.head(0, h).unwrap();
        assert_eq!(full.bulk_pages().unwrap().n_rows(), 41 - 6);
        assert_eq!(full.bulk_clusters().unwrap().count(), 41 - 6);
    }
    c.clear();
    let v = c.head(0, 0).unwrap();
    assert!(v.bulk_pages().unwrap().is_empty() && v.bulk_clusters().unwrap().is_empty());
    // and they follow the next sequence from scratch
    append(&mut c, 20, 1.0);
    c.finish_prefill().unwrap();
    let v = c.head(0, 0).unwrap();
    let mut direct = PageBounds::new(D_F32, 4).unwrap();
    direct.keep_channel_keys().unwrap();
    direct.push_rows_of(v.bulk().keys).unwrap();
    assert_eq!(v.bulk_pages(), Some(&direct));
    assert_eq!(v.bulk_clusters().unwrap().count(), 14);
}
