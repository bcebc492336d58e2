//! Properties of per-head thresholds: `PerHead` over any criterion, `calibrate_head_taus`,
//! and the `HeadTaus` file.

use proptest::prelude::*;
use qada_core::{
    calibrate_head_taus, Approx, Decision, HeadInput, HeadObservation, HeadTaus, LocalityCriterion,
    Mixture, Oracle, PerHead, Tau,
};
use qada_stats::{ClusterMoments, KeyMoments, ModelSignature, Rows};

fn sig(layers: u32) -> ModelSignature {
    ModelSignature {
        architecture: "llama".into(),
        n_layers: layers,
        n_kv_heads: 1,
        head_dim: 4,
        rope_base: 1e4,
    }
}

/// One head's query, local scores and bulk keys, with the bulk's moments and clusters.
#[derive(Debug)]
struct Case {
    query: Vec<f32>,
    local_scores: Vec<f32>,
    keys: Vec<f32>,
    moments: KeyMoments,
    clusters: ClusterMoments,
}

impl Case {
    fn input(&self, layer: usize, head: usize) -> HeadInput<'_> {
        HeadInput {
            layer,
            head,
            query: &self.query,
            scale: 1.0 / (self.query.len() as f32).sqrt(),
            local_scores: &self.local_scores,
            bulk_len: self.keys.len() / self.query.len(),
            bulk_moments: &self.moments,
            bulk_keys: Rows::F32(&self.keys),
            bulk_pages: None,
            bulk_clusters: Some(&self.clusters),
        }
    }
}

/// Heads of dimension 1 to 6, with 0 to 40 bulk keys and 1 to 8 local scores placed from far
/// below to far above the bulk's scores, so that every criterion says both local and long.
fn case() -> impl Strategy<Value = Case> {
    (1usize..7, 0usize..41, 1usize..9).prop_flat_map(|(d, t, n)| {
        (
            prop::collection::vec(-3.0f32..3.0, d),
            prop::collection::vec(-8.0f32..8.0, n),
            prop::collection::vec(-3.0f32..3.0, t * d),
        )
            .prop_map(move |(query, local_scores, keys)| {
                let moments = KeyMoments::from_rows(d, &keys).unwrap();
                let mut clusters = ClusterMoments::new(d, 3).unwrap();
                clusters.fit(Rows::F32(&keys)).unwrap();
                Case {
                    query,
                    local_scores,
                    keys,
                    moments,
                    clusters,
                }
            })
    })
}

/// The criteria that report a share: QAdA, the mixture, the oracle.
fn criteria(tau: f64) -> Vec<Box<dyn LocalityCriterion>> {
    vec![
        Box::new(Approx::new(tau).unwrap()),
        Box::new(Mixture::new(tau, 3).unwrap()),
        Box::new(Oracle::new(tau).unwrap()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// A group through `PerHead::decide_group` (the inner criterion's batch, then each
    /// head's own tau) decides each head as `PerHead::decide` does, with thresholds that
    /// differ from head to head.
    #[test]
    fn group_decisions_are_each_heads_own(
        c in case(),
        taus in prop::collection::vec(0.05f64..0.95, 4),
    ) {
        let mut table = HeadTaus::uniform(sig(1), 4, Tau::new(0.5).unwrap());
        for (h, &t) in taus.iter().enumerate() {
            table.set(0, h, Tau::new(t).unwrap()).unwrap();
        }
        for inner in criteria(0.5) {
            let per_head = PerHead::new(inner, table.clone());
            let inputs: Vec<HeadInput<'_>> = (0..4).map(|h| c.input(0, h)).collect();
            let mut out = vec![Decision::LONG; 4];
            let any_long = per_head.decide_group(&inputs, &mut out).unwrap();
            for (h, o) in out.iter().enumerate() {
                let alone = per_head.decide(&inputs[h]).unwrap();
                prop_assert_eq!(o.local, alone.local, "head {}", h);
                prop_assert_eq!(o.log_local_share.map(f64::to_bits), alone.log_local_share.map(f64::to_bits));
            }
            prop_assert_eq!(any_long, out.iter().any(|o| !o.local));
        }
    }

    /// (a) With every `tau_{l,h} = tau`, `PerHead` decides exactly as its criterion.
    #[test]
    fn uniform_thresholds_decide_as_the_inner_criterion(
        c in case(),
        tau in 0.05f64..0.95,
        layers in 1u32..4,
        heads in 1usize..5,
        at in (0usize..4, 0usize..5),
    ) {
        let (layer, head) = (at.0 % layers as usize, at.1 % heads);
        let table = HeadTaus::uniform(sig(layers), heads, Tau::new(tau).unwrap());
        for inner in criteria(tau) {
            let name = inner.name().to_string();
            let expected = inner.decide(&c.input(layer, head)).unwrap();
            let (d, t) = (c.query.len(), c.keys.len() / c.query.len());
            let cost = inner.decision_cost(d, t, t + 1);
            let summaries = inner.bulk_summaries();
            let per_head = PerHead::new(inner, table.clone());
            prop_assert_eq!(per_head.decision_cost(d, t, t + 1), cost);
            prop_assert_eq!(per_head.bulk_summaries(), summaries);
            prop_assert_eq!(per_head.name(), format!("{name}+heads"));
            prop_assert_eq!(per_head.tau().map(Tau::get), Some(tau));
            let got = per_head.decide(&c.input(layer, head)).unwrap();
            prop_assert_eq!(got.local, expected.local, "{}", name);
            prop_assert_eq!(
                got.log_local_share.map(f64::to_bits),
                expected.log_local_share.map(f64::to_bits)
            );
        }
    }

    /// (b) Raising one head's threshold never turns a long decision into local, labels that
    /// head by its share against the new threshold, and leaves the other heads alone.
    #[test]
    fn raising_one_head_only_makes_it_less_local(
        c in case(),
        tau in 0.05f64..0.9,
        raise in 0.0f64..1.0,
        layers in 1u32..4,
        heads in 1usize..5,
        at in (0usize..4, 0usize..5),
    ) {
        let (layer, head) = (at.0 % layers as usize, at.1 % heads);
        let base = Tau::new(tau).unwrap();
        let raised = Tau::new(tau + raise * (0.99 - tau)).unwrap();
        let table = HeadTaus::uniform(sig(layers), heads, base);
        let mut higher = table.clone();
        higher.set(layer, head, raised).unwrap();
        for inner in criteria(tau) {
            let before = PerHead::new(&inner, table.clone());
            let after = PerHead::new(&inner, higher.clone());
            for l in 0..layers as usize {
                for h in 0..heads {
                    let b = before.decide(&c.input(l, h)).unwrap();
                    let a = after.decide(&c.input(l, h)).unwrap();
                    if (l, h) != (layer, head) {
                        prop_assert_eq!(a, b);
                        continue;
                    }
                    prop_assert!(b.local || !a.local, "{}: long turned local", inner.name());
                    if let Some(s) = a.log_local_share.filter(|s| s.is_finite()) {
                        if c.keys.is_empty() {
                            prop_assert!(a.local);
                        } else {
                            prop_assert_eq!(a.local, s >= raised.ln());
                        }
                    }
                }
            }
        }
    }

    /// (c) After calibration every head's false-local rate on its observations is at most
    /// `max_false_local`, every `tau_h >= tau`, and no smaller `tau_h` would do.
    #[test]
    fn calibration_bounds_false_local_labels_per_head(
        layers in 1u32..4,
        heads in 1usize..5,
        tau in 0.05f64..0.95,
        max_false_local in prop_oneof![Just(0.0), 0.0f64..0.5],
        obs in prop::collection::vec(
            (0usize..4, 0usize..5, -6.0f64..-1e-9,
             prop_oneof![8 => -6.0f64..-1e-9, 1 => Just(f64::NAN), 1 => Just(f64::INFINITY)]),
            0..120,
        ),
    ) {
        let obs: Vec<HeadObservation> = obs
            .into_iter()
            .map(|(l, h, exact, estimate)| HeadObservation {
                layer: l % layers as usize,
                head: h % heads,
                exact,
                estimate,
            })
            .collect();
        let base = Tau::new(tau).unwrap();
        let table = calibrate_head_taus(&obs, sig(layers), heads, base, max_false_local).unwrap();
        prop_assert_eq!(table.base(), base);
        let rate = |l: usize, h: usize, t: Tau| {
            let long: Vec<_> = obs
                .iter()
                .filter(|o| (o.layer, o.head) == (l, h) && !base.is_local(o.exact))
                .collect();
            let local = long
                .iter()
                .filter(|o| o.estimate.is_finite() && t.is_local(o.estimate))
                .count();
            (local, long.len())
        };
        for l in 0..layers as usize {
            for h in 0..heads {
                let t = table.get(l, h).unwrap();
                prop_assert!(t.get() >= tau && t.get() < 1.0);
                let (local, n) = rate(l, h, t);
                prop_assert!(local as f64 <= max_false_local * n as f64,
                    "head ({l}, {h}): {local} of {n} long labeled local at tau {}", t.get());
                if t.get() > tau {
                    let lower = Tau::new(f64::from_bits(t.get().to_bits() - 1)).unwrap();
                    let (local, n) = rate(l, h, lower);
                    prop_assert!(local as f64 > max_false_local * n as f64,
                        "head ({l}, {h}): tau {} is not the smallest", t.get());
                }
            }
        }
        // indices outside the model are errors, not panics
        let outside = HeadObservation { layer: layers as usize, head: 0, exact: -1.0, estimate: -1.0 };
        prop_assert!(calibrate_head_taus(&[outside], sig(layers), heads, base, 0.1).is_err());
    }
}

#[test]
fn out_of_range_heads_are_errors() {
    let table = HeadTaus::uniform(sig(2), 3, Tau::new(0.6).unwrap());
    let c = PerHead::new(Approx::new(0.6).unwrap(), table);
    let m = KeyMoments::new(2);
    let input = |layer, head| HeadInput {
        layer,
        head,
        query: &[1.0, 0.0],
        scale: 1.0,
        local_scores: &[0.0],
        bulk_len: 0,
        bulk_moments: &m,
        bulk_keys: Rows::F32(&[]),
        bulk_pages: None,
        bulk_clusters: None,
    };
    assert!(c.decide(&input(1, 2)).unwrap().local);
    assert!(c.decide(&input(2, 0)).is_err());
    assert!(c.decide(&input(0, 3)).is_err());
    let mut out = [Decision::LONG; 2];
    assert!(c
        .decide_group(&[input(0, 0), input(0, 5)], &mut out)
        .is_err());
    assert!(calibrate_head_taus(&[], sig(2), 3, Tau::new(0.6).unwrap(), 1.5).is_err());
}

/// (d) The file round-trips; another model's table and every damaged file are refused.
#[test]
fn head_taus_round_trip_and_refuse_bad_files() {
    let mut table = HeadTaus::uniform(sig(2), 3, Tau::new(0.6).unwrap());
    table.set(1, 2, Tau::new(0.875).unwrap()).unwrap();
    let bytes = table.to_bytes();
    assert_eq!(HeadTaus::from_bytes(&bytes, Some(&sig(2))).unwrap(), table);
    let err = HeadTaus::from_bytes(&bytes, Some(&sig(30))).unwrap_err();
    assert!(err.to_string().contains("another model"), "{err}");
    for n in 0..bytes.len() {
        assert!(HeadTaus::from_bytes(&bytes[..n], None).is_err());
    }
    for i in 0..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 0x10;
        assert!(
            HeadTaus::from_bytes(&b, None).is_err(),
            "flip at {i} accepted"
        );
    }
    // a resealed file with a threshold out of (0, 1] is refused by the parser itself
    let mut b = bytes.clone();
    let end = b.len() - 8;
    b[end - 8..end].copy_from_slice(&1.5f64.to_le_bytes());
    let err = HeadTaus::from_bytes(&qada_stats::codec::reseal(&b), None).unwrap_err();
    assert!(err.to_string().contains("not in (0, 1]"), "{err}");

    let dir = std::env::temp_dir().join(format!("qada-head-taus-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("heads.qhta");
    table.save(&path).unwrap();
    assert_eq!(HeadTaus::load(&path, Some(&sig(2))).unwrap(), table);
    let err = HeadTaus::load(&dir.join("missing.qhta"), None).unwrap_err();
    assert!(err.to_string().contains("missing.qhta"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
