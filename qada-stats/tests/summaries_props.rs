//! Properties of the bulk summaries: `PageBounds` bounds every key's score by its page's
//! bound (and so the bulk mass), `ClusterMoments` keeps every key once, deterministically,
//! and with one cluster is `KeyMoments`.

use proptest::prelude::*;
use qada_stats::{f16, ClusterMoments, KeyMoments, PageBounds, Rows};

/// `n` keys of length `d` at a scale from 1e-4 to 1e4, and a query.
fn keys_and_query() -> impl Strategy<Value = (usize, Vec<f32>, Vec<f32>)> {
    (1usize..12, 0usize..300, -4i32..=4, -4i32..=4).prop_flat_map(|(d, n, ke, qe)| {
        let (ks, qs) = (10f32.powi(ke), 10f32.powi(qe));
        (
            Just(d),
            prop::collection::vec(-1.0f32..1.0, n * d)
                .prop_map(move |k| -> Vec<f32> { k.iter().map(|x| x * ks).collect() }),
            prop::collection::vec(-1.0f32..1.0, d)
                .prop_map(move |q| -> Vec<f32> { q.iter().map(|x| x * qs).collect() }),
        )
    })
}

fn dot(q: &[f32], k: &[f32]) -> f64 {
    q.iter().zip(k).map(|(&a, &b)| a as f64 * b as f64).sum()
}

proptest! {
    /// Each page's center and radius, mean and variance are those of its keys, recomputed
    /// in f64 from the rows, to f16's rounding (`2^-11` relative, infinite past its range);
    /// `c - r <= k <= c + r` up to that rounding; the largest `|k_j|` is the page's.
    #[test]
    fn page_centers_radii_means_and_variances_are_the_pages_own((d, keys, _q) in keys_and_query(), page in 1usize..40) {
        let mut b = PageBounds::new(d, page).unwrap();
        b.push_rows_of(Rows::F32(&keys)).unwrap();
        let rows: Vec<&[f32]> = keys.chunks_exact(d).collect();
        let f16_max = f16::MAX.to_f64();
        // the f16 value of x: within 2^-11 |x| (and 2^-24 absolute, the subnormals), or
        // infinite past the range
        let near = |got: f16, want: f64, slack: f64| {
            let got = got.to_f64();
            if want.abs() > f16_max {
                return got.is_infinite() || (got - want).abs() <= want.abs() / 2048.0;
            }
            (got - want).abs() <= want.abs() / 2048.0 + 6e-8 + slack
        };
        for p in 0..b.n_pages() {
            let ks = &rows[p * page..(p * page + b.page_len(p))];
            let n = ks.len() as f64;
            let mut amax = 0.0f32;
            for j in 0..d {
                let col: Vec<f64> = ks.iter().map(|k| k[j] as f64).collect();
                let mean = col.iter().sum::<f64>() / n;
                let var = col.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
                let spread = col.iter().fold(0.0f64, |m, x| m.max(x.abs()));
                let i = p * d + j;
                prop_assert!(near(b.means()[i], mean, 1e-6 * spread), "page {p} channel {j}: mean {} vs {mean}", b.means()[i]);
                prop_assert!(near(b.variances()[i], var, 1e-5 * spread * spread), "page {p} channel {j}: variance {} vs {var}", b.variances()[i]);
                let (c, r) = (b.centers()[i].to_f64(), b.radii()[i].to_f64());
                let tol = spread / 1024.0 + 1e-7;
                for &x in &col {
                    prop_assert!(x <= c + r + tol && x >= c - r - tol, "page {p}: {x} outside {c} +- {r}");
                }
                amax = ks.iter().fold(amax, |a, k| a.max(k[j].abs()));
            }
            prop_assert_eq!(b.abs_maxima()[p], amax);
        }
        for j in 0..d {
            let lo = rows.iter().fold(f32::INFINITY, |a, k| a.min(k[j]));
            let hi = rows.iter().fold(f32::NEG_INFINITY, |a, k| a.max(k[j]));
            let spread = if rows.is_empty() { 0.0 } else { 0.5 * hi - 0.5 * lo };
            prop_assert_eq!(b.channel_spread(j), Some(spread), "channel {}", j);
        }
        // the copy by channel, kept from the start, equals the keys coded afresh with each
        // page's final scale, max |k_j| / 127
        let mut c = PageBounds::new(d, page).unwrap();
        c.keep_channel_keys().unwrap();
        c.push_rows_of(Rows::F32(&keys)).unwrap();
        prop_assert!(b.channel_keys().is_none() && c.keep_channel_keys().is_err() != rows.is_empty());
        let copy = c.channel_keys().unwrap();
        prop_assert_eq!(copy.n_rows(), rows.len());
        for j in 0..d {
            let col = copy.column(j).unwrap();
            prop_assert_eq!(col.n_scales(), rows.len().div_ceil(page));
            for (p, ks) in rows.chunks(page).enumerate() {
                let s = ks.iter().fold(0.0f32, |a, k| a.max(k[j].abs())) / 127.0;
                prop_assert_eq!(col.scales[p * col.stride], s, "channel {} page {}", j, p);
                for (i, k) in ks.iter().enumerate() {
                    let want = if s == 0.0 { 0 } else { (k[j] / s).round() as i8 };
                    let got = col.codes[p * page + i];
                    prop_assert_eq!(got, want, "channel {} row {}", j, p * page + i);
                    // and the code stands for the key within half a step
                    prop_assert!((k[j] - s * got as f32).abs() <= 0.5001 * s + 1e-30);
                }
            }
        }
    }

    #[test]
    fn every_key_scores_below_its_page_bound((d, keys, q) in keys_and_query(), page in 1usize..40, scale in 0.01f64..2.0) {
        let mut b = PageBounds::new(d, page).unwrap();
        b.push_rows_of(Rows::F32(&keys)).unwrap();
        let n = keys.len() / d;
        prop_assert_eq!((b.n_rows(), b.n_pages()), (n, n.div_ceil(page)));
        prop_assert_eq!((0..b.n_pages()).map(|p| b.page_len(p)).sum::<usize>(), n);
        let mut log_mass = f64::NEG_INFINITY;
        for (i, k) in keys.chunks_exact(d).enumerate() {
            let p = i / page;
            // the page's bounds hold the key coordinate by coordinate
            for ((&x, &lo), &hi) in k.iter().zip(b.page_min(p)).zip(b.page_max(p)) {
                prop_assert!(lo <= x && x <= hi);
            }
            let s = scale * dot(&q, k);
            let u = b.score_upper_bound(p, &q, scale);
            // exact in f64 but for the sums' rounding, relative to sum |q_j k_j|
            let slack = 1e-12 * scale * q.iter().zip(k).map(|(&a, &c)| (a as f64 * c as f64).abs()).sum::<f64>();
            prop_assert!(s <= u + slack, "key {i}: score {s} above its page bound {u}");
            log_mass = if log_mass > s { log_mass + (s - log_mass).exp().ln_1p() } else { s + (log_mass - s).exp().ln_1p() };
        }
        let ub = b.log_mass_upper_bound(&q, scale).unwrap();
        if n == 0 {
            prop_assert_eq!(ub, f64::NEG_INFINITY);
        } else {
            prop_assert!(log_mass <= ub + 1e-9 * (1.0 + ub.abs()), "ln A_bulk {log_mass} above the bound {ub}");
        }
    }

    /// One key at a time, or the rows in two runs split anywhere (a run derives a page's
    /// f16 rows once, when it closes or the run ends), or in runs through a caller's scratch,
    /// or as f16 rows converted as attention reads them: the same bounds, with or without the
    /// keys by channel.
    #[test]
    fn pushing_rows_one_by_one_or_at_once_is_the_same(
        (d, keys, _q) in keys_and_query(), page in 1usize..20, split in 0.0f64..1.0,
        by_channel: bool, run_keys in 1usize..70, scratch_len in 0usize..300,
    ) {
        let empty = || {
            let mut b = PageBounds::new(d, page).unwrap();
            if by_channel {
                b.keep_channel_keys().unwrap();
            }
            b
        };
        let mut one = empty();
        for k in keys.chunks_exact(d) {
            one.push(k).unwrap();
        }
        let at = (split * (keys.len() / d) as f64) as usize * d;
        let mut all = empty();
        all.push_rows_of(Rows::F32(&keys[..at])).unwrap();
        all.push_rows_of(Rows::F32(&keys[at..])).unwrap();
        prop_assert_eq!(&one, &all);
        // through a caller's scratch, whatever its length before (it is grown when short):
        // runs of a drawn size, as the cache adds pages while decoding
        let mut kept = empty();
        let mut scratch = vec![f32::NAN; scratch_len];
        for run in keys.chunks(d * run_keys) {
            kept.push_rows_with(Rows::F32(run), &mut scratch).unwrap();
        }
        prop_assert_eq!(&one, &kept);
        let halves: Vec<f16> = keys.iter().map(|&k| f16::from_f32(k)).collect();
        let mut from_f16 = PageBounds::new(d, page).unwrap();
        from_f16.push_rows_of(Rows::F16(&halves)).unwrap();
        let widened: Vec<f32> = halves.iter().map(|h| h.to_f32()).collect();
        let mut direct = PageBounds::new(d, page).unwrap();
        direct.push_rows_of(Rows::F32(&widened)).unwrap();
        prop_assert_eq!(from_f16, direct);
    }

    /// k-means, then pushes: every key counted once, at most `k` clusters, and the same keys
    /// give the same clusters.
    #[test]
    fn clusters_count_every_key_once_and_are_deterministic(
        (d, keys, _q) in keys_and_query(), k in 1usize..7, fitted in 0usize..300,
    ) {
        let n = keys.len() / d;
        let split = fitted.min(n) * d;
        let mut c = ClusterMoments::new(d, k).unwrap();
        c.fit(Rows::F32(&keys[..split])).unwrap();
        prop_assert_eq!(c.count() as usize, split / d);
        prop_assert!(c.clusters().len() <= k.min(split / d));
        prop_assert!(c.clusters().iter().all(|m| m.count() > 0));
        c.push_rows_of(Rows::F32(&keys[split..])).unwrap();
        prop_assert_eq!(c.count() as usize, n);
        prop_assert!(c.clusters().len() <= k.max(1));
        let mut again = ClusterMoments::new(d, k).unwrap();
        again.fit(Rows::F32(&keys[..split])).unwrap();
        again.push_rows_of(Rows::F32(&keys[split..])).unwrap();
        prop_assert_eq!(&c, &again);
        // the moments of the clusters merged are those of every key
        if n > 0 {
            let mut merged = KeyMoments::new(d);
            for m in c.clusters() {
                merged.merge(m).unwrap();
            }
            close(&merged, &KeyMoments::from_rows(d, &keys).unwrap())?;
        }
    }

    /// With one cluster, fitting and pushing give the moments of every key.
    #[test]
    fn one_cluster_is_key_moments((d, keys, _q) in keys_and_query(), fitted in 0usize..300) {
        let n = keys.len() / d;
        prop_assume!(n > 0);
        let split = fitted.min(n) * d;
        let mut c = ClusterMoments::new(d, 1).unwrap();
        c.fit(Rows::F32(&keys[..split])).unwrap();
        c.push_rows_of(Rows::F32(&keys[split..])).unwrap();
        prop_assert_eq!(c.clusters().len(), 1);
        close(&c.clusters()[0], &KeyMoments::from_rows(d, &keys).unwrap())?;
    }
}

fn close(a: &KeyMoments, b: &KeyMoments) -> Result<(), TestCaseError> {
    prop_assert_eq!(a.count(), b.count());
    let scale = b.mean().iter().fold(0.0f64, |m, x| m.max(x.abs()))
        + b.covariance()
            .iter()
            .fold(0.0f64, |m, x| m.max(x.abs()))
            .sqrt();
    for (x, y) in a.mean().iter().zip(b.mean()) {
        prop_assert!((x - y).abs() <= 1e-9 * (1.0 + scale), "mean {x} vs {y}");
    }
    for (x, y) in a.covariance().iter().zip(b.covariance()) {
        prop_assert!(
            (x - y).abs() <= 1e-9 * (1.0 + scale * scale),
            "cov {x} vs {y}"
        );
    }
    Ok(())
}

#[test]
fn two_separated_blobs_are_two_clusters_whatever_the_order() {
    let d = 3;
    let mut keys = Vec::new();
    for i in 0..60 {
        let far = (i * 7) % 3 == 0; // interleaved, a third far away
        let c = if far { 10.0 } else { -10.0 };
        keys.extend((0..d).map(|j| c + ((i * 13 + j * 5) % 11) as f32 * 0.01));
    }
    let mut c = ClusterMoments::new(d, 2).unwrap();
    c.fit(Rows::F32(&keys)).unwrap();
    let mut counts: Vec<u64> = c.clusters().iter().map(KeyMoments::count).collect();
    counts.sort();
    assert_eq!(counts, vec![20, 40]);
}
