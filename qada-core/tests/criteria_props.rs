//! Properties of the locality criteria.

mod common;

use common::{scores_f64, Head};
use proptest::prelude::*;
use qada_core::attention::scores;
use qada_core::{
    Approx, Decision, Dense, HeadInput, LocalityCriterion, Oracle, Static, StaticCalibrator,
    StaticTable, Window,
};
use qada_stats::{KeyMoments, ModelSignature};
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};

fn local_scores(h: &Head, q: &[f32], scale: f32) -> Vec<f32> {
    let kv = h.segments();
    let ns = kv.sink_keys.len() / h.d;
    let mut s = vec![0.0; kv.local_len()];
    scores(q, kv.sink_keys, scale, &mut s[..ns]);
    scores(q, kv.window_keys, scale, &mut s[ns..]);
    s
}

fn input<'a>(h: &'a Head, q: &'a [f32], scale: f32, local: &'a [f32]) -> HeadInput<'a> {
    let kv = h.segments();
    HeadInput {
        layer: 0,
        head: 0,
        query: q,
        scale,
        local_scores: local,
        bulk_len: kv.bulk_len(),
        bulk_moments: &h.moments,
        bulk_keys: kv.bulk_keys,
        bulk_pages: None,
        bulk_clusters: None,
    }
}

fn head_strategy() -> impl Strategy<Value = (Head, Vec<f32>)> {
    (1usize..6, 0usize..5, 1usize..10, 1usize..80).prop_flat_map(|(d, sink, extra, t)| {
        (
            prop::collection::vec(-2.0f32..2.0, t * d..=t * d),
            prop::collection::vec(-2.0f32..2.0, d..=d),
        )
            .prop_map(move |(keys, q)| {
                let values = keys.iter().map(|k| k * 0.5 + 1.0).collect();
                (Head::new(d, sink, sink + extra, keys, values), q)
            })
    })
}

proptest! {
    #[test]
    fn oracle_equals_brute_force_softmax_mass((h, q) in head_strategy(), tau in 0.01f64..0.99) {
        let scale = 1.0 / (h.d as f32).sqrt();
        let ls = local_scores(&h, &q, scale);
        let dec = Oracle::new(tau).unwrap().decide(&input(&h, &q, scale, &ls)).unwrap();
        let s = scores_f64(&q, &h.keys, scale);
        let total: f64 = s.iter().map(|x| x.exp()).sum();
        let local: f64 = s.iter().enumerate().filter(|(i, _)| h.is_local_pos(*i)).map(|(_, x)| x.exp()).sum();
        let share = local / total;
        let got = dec.log_local_share.unwrap().exp();
        prop_assert!((got - share).abs() < 1e-5, "share {got} vs brute force {share}");
        if (share - tau).abs() > 1e-5 {
            prop_assert_eq!(dec.local, share >= tau);
        }
    }

    /// Scores here lie in [-10, 10] (|q|,|k| <= 2 sqrt(d), scale 1/sqrt(d) -> |s| <= 4 d / sqrt(d)
    /// <= 10 for d <= 5), so the local share is at least exp(-20) / T > 1e-12.
    #[test]
    fn tau_near_zero_makes_every_head_local((h, q) in head_strategy()) {
        let scale = 1.0 / (h.d as f32).sqrt();
        let ls = local_scores(&h, &q, scale);
        let inp = input(&h, &q, scale, &ls);
        prop_assert!(Oracle::new(1e-12).unwrap().decide(&inp).unwrap().local);
        prop_assert!(Approx::new(1e-12).unwrap().decide(&inp).unwrap().local);
    }

    #[test]
    fn decisions_are_monotone_in_tau((h, q) in head_strategy(), a in 0.001f64..0.999, b in 0.001f64..0.999) {
        let (lo, hi) = if a < b { (a, b) } else { (b, a) };
        let scale = 1.0 / (h.d as f32).sqrt();
        let ls = local_scores(&h, &q, scale);
        let inp = input(&h, &q, scale, &ls);
        for (crit_lo, crit_hi) in [
            (Box::new(Oracle::new(lo).unwrap()) as Box<dyn LocalityCriterion>, Box::new(Oracle::new(hi).unwrap()) as Box<dyn LocalityCriterion>),
            (Box::new(Approx::new(lo).unwrap()), Box::new(Approx::new(hi).unwrap())),
        ] {
            let (dl, dh) = (crit_lo.decide(&inp).unwrap(), crit_hi.decide(&inp).unwrap());
            // local at the higher threshold implies local at the lower one
            prop_assert!(!dh.local || dl.local, "{}: local at tau {hi} but not at {lo}", crit_lo.name());
        }
    }

    #[test]
    fn no_bulk_means_every_criterion_says_local(d in 1usize..5, t in 1usize..20, q in prop::collection::vec(-1.0f32..1.0, 5)) {
        let keys: Vec<f32> = (0..t * d).map(|i| (i as f32).sin()).collect();
        let h = Head::new(d, 2, 20, keys.clone(), keys);
        let q = &q[..d];
        let ls = local_scores(&h, q, 1.0);
        let inp = input(&h, q, 1.0, &ls);
        prop_assert_eq!(inp.bulk_len, 0);
        prop_assert!(Oracle::new(0.99).unwrap().decide(&inp).unwrap().local);
        prop_assert!(Approx::new(0.99).unwrap().decide(&inp).unwrap().local);
        prop_assert!(Dense.decide(&inp).unwrap().local);
    }

    /// Bulk keys i.i.d. from a Gaussian, a bulk of 8000 keys: the Gaussian estimate of
    /// log A_bulk is within 0.15 of the exact value (Monte-Carlo error
    /// sqrt((exp(sigma_s^2) - 1) / 8000) < 0.03 for sigma_s^2 <= 1.5, plus the moment
    /// estimates), so QAdA and the oracle agree whenever the oracle's log-odds
    /// ln(A_local / A_bulk) is more than 0.15 away from ln(tau / (1 - tau)).
    #[test]
    fn approx_agrees_with_oracle_away_from_the_threshold(
        seed in 0u64..10_000, tau in 0.05f64..0.95, qscale in 0.1f32..1.2, local_boost in -3.0f32..6.0,
    ) {
        let d = 16;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let normal = Normal::new(0.0f32, 1.0).unwrap();
        let (sink, local, t) = (4, 32, 8032);
        let mut keys: Vec<f32> = (0..t * d).map(|_| normal.sample(&mut rng)).collect();
        let q: Vec<f32> = (0..d).map(|_| normal.sample(&mut rng) * qscale).collect();
        // make local keys more or less aligned with q so that both labels occur
        let qn = q.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-3);
        for i in (0..sink).chain(t - (local - sink)..t) {
            for j in 0..d {
                keys[i * d + j] += local_boost * q[j] / qn;
            }
        }
        let values = keys.clone();
        let h = Head::new(d, sink, local, keys, values);
        let scale = 1.0 / (d as f32).sqrt();
        let ls = local_scores(&h, &q, scale);
        let inp = input(&h, &q, scale, &ls);
        let g = qada_stats::GaussianScore::new(&q, &h.moments, scale as f64).unwrap();
        prop_assume!(g.sigma2_s <= 1.5);
        let exact = Oracle::log_bulk_mass(&inp).unwrap();
        let est = Approx::log_bulk_mass(&inp).unwrap();
        prop_assert!((exact - est).abs() < 0.15, "log A_bulk {exact} vs estimate {est}");
        let log_odds = qada_core::lse::lse(&ls) - exact;
        let threshold = (tau / (1.0 - tau)).ln();
        if (log_odds - threshold).abs() > 0.15 {
            let o = Oracle::new(tau).unwrap().decide(&inp).unwrap();
            let a = Approx::new(tau).unwrap().decide(&inp).unwrap();
            prop_assert_eq!(o.local, a.local);
        }
    }
}

#[test]
fn huge_scores_give_finite_shares() {
    let (q, h) = common::extreme_head(None);
    let ls = local_scores(&h, &q, 1.0);
    assert!(ls.iter().all(|s| s.abs() == 1e4));
    let inp = input(&h, &q, 1.0, &ls);
    for c in [
        Box::new(Oracle::new(0.5).unwrap()) as Box<dyn LocalityCriterion>,
        Box::new(Approx::new(0.5).unwrap()),
    ] {
        let dec = c.decide(&inp).unwrap();
        let s = dec.log_local_share.unwrap();
        assert!(!s.is_nan(), "{}: NaN share", c.name());
    }
}

#[test]
fn nan_never_labels_a_head_local() {
    let d = 2;
    let keys: Vec<f32> = (0..200 * d).map(|i| (i as f32).sin()).collect();
    let h = Head::new(d, 4, 32, keys.clone(), keys);
    let q = [f32::NAN, 1.0];
    let ls = local_scores(&h, &q, 1.0);
    let inp = input(&h, &q, 1.0, &ls);
    for c in [
        Box::new(Oracle::new(0.01).unwrap()) as Box<dyn LocalityCriterion>,
        Box::new(Approx::new(0.01).unwrap()),
    ] {
        let dec = c.decide(&inp).unwrap();
        assert!(!dec.local, "{} labeled a NaN query local", c.name());
        assert!(dec.is_nonfinite());
    }
    // empty moments with a bulk: nothing to estimate from, so long-context
    let empty = KeyMoments::new(d);
    let mut inp = input(&h, &[1.0, 1.0], 1.0, &ls);
    inp.bulk_moments = &empty;
    let dec = Approx::new(0.01).unwrap().decide(&inp).unwrap();
    assert!(!dec.local && dec.is_nonfinite());
}

#[test]
fn tau_outside_zero_to_one_is_an_error_and_one_is_the_whole_mass() {
    for bad in [0.0, 1.0 + f64::EPSILON, -0.1, 1.5, f64::NAN] {
        assert!(Oracle::new(bad).is_err());
        assert!(Approx::new(bad).is_err());
    }
    // tau in (0, 1]: at 1 a head with any bulk mass is long
    let h = Head::new(4, 2, 8, vec![0.5; 40 * 4], vec![0.5; 40 * 4]);
    let ls = vec![0.0; 8];
    let inp = input(&h, &[1.0, 0.0, 0.0, 0.0], 1.0, &ls);
    assert!(!Oracle::new(1.0).unwrap().decide(&inp).unwrap().local);
    assert!(!Approx::new(1.0).unwrap().decide(&inp).unwrap().local);
}

#[test]
fn mismatched_dimensions_are_errors() {
    let h = Head::new(4, 2, 8, vec![0.5; 40 * 4], vec![0.5; 40 * 4]);
    let q = [1.0f32; 3];
    let ls = vec![0.0; 8];
    let inp = input(&h, &q, 1.0, &ls);
    assert!(Oracle::new(0.5).unwrap().decide(&inp).is_err());
    assert!(Approx::new(0.5).unwrap().decide(&inp).is_err());
}

#[test]
fn dense_and_window_are_the_two_ends() {
    let h = Head::new(2, 2, 8, vec![0.5; 40 * 2], vec![0.5; 40 * 2]);
    let q = [1.0f32; 2];
    let ls = local_scores(&h, &q, 1.0);
    let inp = input(&h, &q, 1.0, &ls);
    assert_eq!(Dense.decide(&inp).unwrap(), Decision::LONG);
    assert_eq!(Window.decide(&inp).unwrap(), Decision::LOCAL);
    // blanket impls: by reference and boxed
    let by_ref: &dyn LocalityCriterion = &Window;
    assert!((&by_ref).decide(&inp).unwrap().local);
}

fn sig(layers: u32) -> ModelSignature {
    ModelSignature {
        architecture: "llama".into(),
        n_layers: layers,
        n_kv_heads: 1,
        head_dim: 4,
        rope_base: 1e4,
    }
}

#[test]
fn static_labels_the_top_alpha_heads_by_local_frequency() {
    let mut cal = StaticCalibrator::new(sig(2), 3, 0.6).unwrap();
    // head (layer, head) local in k of 10 queries
    let freq = [[9, 1, 5], [0, 10, 7]];
    for (l, row) in freq.iter().enumerate() {
        for (h, &k) in row.iter().enumerate() {
            for i in 0..10 {
                cal.observe(l, h, i < k).unwrap();
            }
        }
    }
    assert!(cal.observe(2, 0, true).is_err());
    let table = cal.finish();
    assert_eq!(table.local_frequency(1, 2).unwrap(), 0.7);
    let s = Static::from_table(&table, 0.5).unwrap();
    let labels: Vec<bool> = (0..2)
        .flat_map(|l| (0..3).map(move |h| (l, h)))
        .map(|(l, h)| s.is_local(l, h).unwrap())
        .collect();
    // top 3 of 6: (1,1)=1.0, (0,0)=0.9, (1,2)=0.7
    assert_eq!(labels, vec![true, false, false, false, true, true]);
    assert!(Static::from_table(&table, 0.0).unwrap().local_count() == 0);
    assert!(Static::from_table(&table, 1.0).unwrap().local_count() == 6);
    assert!(Static::from_table(&table, 1.1).is_err());
}

proptest! {
    /// Heads calibration never observed (the sliding layers of Gemma 3) take no share of
    /// alpha: exactly `round(alpha * observed)` heads are local, all of them observed, and none
    /// has a lower local frequency than an observed head left long.
    #[test]
    fn static_alpha_counts_only_observed_heads(
        heads in prop::collection::vec((any::<bool>(), 0u64..6), 2..24),
        alpha in 0.0f64..=1.0,
    ) {
        let n_heads = 2;
        let layers = heads.len().div_ceil(n_heads);
        let mut cal = StaticCalibrator::new(sig(layers as u32), n_heads, 0.6).unwrap();
        for (i, &(observed, k)) in heads.iter().enumerate() {
            for q in 0..5 * observed as u64 {
                cal.observe(i / n_heads, i % n_heads, q < k).unwrap();
            }
        }
        let table = cal.finish();
        let observed: Vec<usize> = (0..heads.len()).filter(|&i| heads[i].0).collect();
        let s = match Static::from_table(&table, alpha) {
            Err(e) => {
                prop_assert!(observed.is_empty(), "{e}");
                return Ok(());
            }
            Ok(s) => s,
        };
        prop_assert!(!observed.is_empty());
        let label = |i: usize| s.is_local(i / n_heads, i % n_heads).unwrap();
        let freq = |i: usize| table.local_frequency(i / n_heads, i % n_heads).unwrap();
        prop_assert_eq!(s.local_count(), (alpha * observed.len() as f64).round() as usize);
        for (i, &(seen, _)) in heads.iter().enumerate() {
            prop_assert!(!label(i) || seen, "head {} labeled but never observed", i);
        }
        for &i in observed.iter().filter(|&&i| label(i)) {
            for &j in observed.iter().filter(|&&j| !label(j)) {
                prop_assert!(freq(i) >= freq(j), "local {} at {} below long {} at {}", i, freq(i), j, freq(j));
            }
        }
    }
}

#[test]
fn static_tables_round_trip_and_refuse_bad_files() {
    let mut cal = StaticCalibrator::new(sig(2), 3, 0.6).unwrap();
    cal.observe(1, 2, true).unwrap();
    cal.observe(1, 2, false).unwrap();
    let table = cal.finish();
    let bytes = table.to_bytes();
    assert_eq!(
        StaticTable::from_bytes(&bytes, Some(&sig(2))).unwrap(),
        table
    );
    let err = StaticTable::from_bytes(&bytes, Some(&sig(30))).unwrap_err();
    assert!(err.to_string().contains("another model"), "{err}");
    for n in 0..bytes.len() {
        assert!(StaticTable::from_bytes(&bytes[..n], None).is_err());
    }
    for i in 0..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 0x10;
        assert!(
            StaticTable::from_bytes(&b, None).is_err(),
            "flip at {i} accepted"
        );
    }
}
