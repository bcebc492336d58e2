//! Properties of group decisions (`GroupMode`, `Grouped`): each mode against its definition,
//! the modes against each other, and attention under `all` against dense attention.

mod common;

use common::{scores_f64, Head};
use proptest::prelude::*;
use qada_core::attention::scores;
use qada_core::{
    attend_layer, Approx, Decision, Dense, GroupMode, Grouped, HeadInput, KvSegments, LayerScratch,
    LocalityCriterion, Mixture, Oracle, Window,
};
use qada_stats::ClusterMoments;

/// One KV head shared by `qs.len()` query heads.
#[derive(Debug)]
struct Group {
    head: Head,
    qs: Vec<Vec<f32>>,
    local: Vec<Vec<f32>>,
    scale: f32,
}

impl Group {
    fn new(head: Head, qs: Vec<Vec<f32>>) -> Self {
        let scale = 1.0 / (head.d as f32).sqrt();
        let kv = head.segments();
        let ns = kv.sink_keys.len() / head.d;
        let local = qs
            .iter()
            .map(|q| {
                let mut s = vec![0.0; kv.local_len()];
                scores(q, kv.sink_keys, scale, &mut s[..ns]);
                scores(q, kv.window_keys, scale, &mut s[ns..]);
                s
            })
            .collect();
        Group {
            head,
            qs,
            local,
            scale,
        }
    }
    fn inputs(&self) -> Vec<HeadInput<'_>> {
        let kv = self.head.segments();
        (0..self.qs.len())
            .map(|h| HeadInput {
                layer: 0,
                head: h,
                query: &self.qs[h],
                scale: self.scale,
                local_scores: &self.local[h],
                bulk_len: kv.bulk_len(),
                bulk_moments: &self.head.moments,
                bulk_keys: kv.bulk_keys,
                bulk_pages: None,
                bulk_clusters: None,
            })
            .collect()
    }
    fn decide(&self, c: &impl LocalityCriterion) -> (Vec<Decision>, bool) {
        let inputs = self.inputs();
        let mut out = vec![Decision::LONG; inputs.len()];
        let any_long = c.decide_group(&inputs, &mut out).unwrap();
        (out, any_long)
    }
    /// `sum_h A_local,h / sum_h A_h`, straight from f64 scores.
    fn summed_share(&self) -> f64 {
        let (mut local, mut all) = (0.0f64, 0.0f64);
        for q in &self.qs {
            let s = scores_f64(q, &self.head.keys, self.scale);
            for (i, v) in s.iter().enumerate() {
                all += v.exp();
                if self.head.is_local_pos(i) {
                    local += v.exp();
                }
            }
        }
        local / all
    }
}

fn group_strategy() -> impl Strategy<Value = Group> {
    groups(1..5, 1..70, 1..6)
}

/// Groups of `n` query heads over one KV head of `t` keys of length `d`.
fn groups(
    d: std::ops::Range<usize>,
    t: std::ops::Range<usize>,
    n: std::ops::Range<usize>,
) -> impl Strategy<Value = Group> {
    (d, 0usize..4, 1usize..8, t, n).prop_flat_map(|(d, sink, extra, t, n)| {
        (
            prop::collection::vec(-2.0f32..2.0, t * d..=t * d),
            prop::collection::vec(prop::collection::vec(-3.0f32..3.0, d..=d), n..=n),
        )
            .prop_map(move |(keys, qs)| {
                let values = keys.iter().map(|k| 1.0 - k).collect();
                Group::new(Head::new(d, sink, sink + extra, keys, values), qs)
            })
    })
}

proptest! {
    #[test]
    fn head_mode_is_the_inner_criterion(g in group_strategy(), tau in 0.05f64..0.95) {
        let oracle = Oracle::new(tau).unwrap();
        let (inner, long) = g.decide(&oracle);
        let (grouped, glong) = g.decide(&Grouped::new(oracle, GroupMode::Head));
        prop_assert_eq!(inner, grouped);
        prop_assert_eq!(long, glong);
    }

    #[test]
    fn all_mode_is_local_only_when_every_head_is(g in group_strategy(), tau in 0.05f64..0.95) {
        let oracle = Oracle::new(tau).unwrap();
        let (heads, _) = g.decide(&oracle);
        let (grouped, any_long) = g.decide(&Grouped::new(oracle, GroupMode::All));
        let every = heads.iter().all(|d| d.local);
        prop_assert_eq!(any_long, !every);
        for (a, h) in grouped.iter().zip(&heads) {
            prop_assert_eq!(a.local, every);
            // the shares stay each head's own
            prop_assert_eq!(a.log_local_share, h.log_local_share);
        }
    }

    #[test]
    fn mass_mode_thresholds_the_summed_masses(g in group_strategy(), tau in 0.05f64..0.95) {
        let truth = g.summed_share();
        prop_assume!((truth - tau).abs() > 1e-4);
        let (out, any_long) = g.decide(&Grouped::new(Oracle::new(tau).unwrap(), GroupMode::Mass));
        let expected = g.head.segments().bulk_len() == 0 || truth >= tau;
        prop_assert!(out.iter().all(|d| d.local == expected),
            "summed share {} tau {}: {:?}", truth, tau, out);
        prop_assert_eq!(any_long, !expected);
    }

    #[test]
    fn the_modes_nest(g in group_strategy(), tau in 0.05f64..0.95) {
        // every head local => the summed share >= tau (a mediant of shares >= tau);
        // the group long by mass => some head long
        let oracle = Oracle::new(tau).unwrap();
        let (all, _) = g.decide(&Grouped::new(oracle, GroupMode::All));
        let (mass, _) = g.decide(&Grouped::new(oracle, GroupMode::Mass));
        let (head, _) = g.decide(&oracle);
        if all[0].local {
            prop_assert!(mass[0].local);
        }
        if !mass[0].local {
            prop_assert!(head.iter().any(|d| !d.local));
        }
    }

    #[test]
    fn mass_without_shares_falls_back_to_all(g in group_strategy()) {
        // the window computes no share: mass must behave as all
        let (a, la) = g.decide(&Grouped::new(Window, GroupMode::All));
        let (m, lm) = g.decide(&Grouped::new(Window, GroupMode::Mass));
        prop_assert_eq!(a, m);
        prop_assert_eq!(la, lm);
    }

    #[test]
    fn attention_under_all_is_dense_for_every_head_of_a_long_group(
        g in group_strategy(), tau in 0.05f64..0.95,
    ) {
        let oracle = Oracle::new(tau).unwrap();
        let (_, any_long) = g.decide(&oracle);
        prop_assume!(any_long);
        let n = g.qs.len();
        let d = g.head.d;
        let queries: Vec<f32> = g.qs.concat();
        let kv: [KvSegments<'_>; 1] = [g.head.segments()];
        let run = |c: &dyn LocalityCriterion| {
            let mut scratch = LayerScratch::new();
            let mut out = vec![0.0f32; n * d];
            attend_layer(c, 0, &queries, &kv, g.scale, &mut scratch, &mut out).unwrap();
            (out, scratch.decisions().to_vec())
        };
        let (dense, _) = run(&Dense);
        let (all, dec) = run(&Grouped::new(oracle, GroupMode::All));
        prop_assert!(dec.iter().all(|x| !x.local));
        for (a, b) in all.iter().zip(&dense) {
            prop_assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{} vs {}", a, b);
        }
    }
}

/// Groups of up to 11 heads (beyond one batch of 8) with keys long enough for the SIMD lanes.
fn wide_group_strategy() -> impl Strategy<Value = Group> {
    groups(1..24, 1..60, 1..12)
}

/// Each head decided alone, through `decide`.
fn head_by_head(c: &impl LocalityCriterion, inputs: &[HeadInput<'_>]) -> Vec<Decision> {
    inputs.iter().map(|i| c.decide(i).unwrap()).collect()
}

/// Shares compared bit for bit (NaN equals NaN).
fn same_bits(a: &[Decision], b: &[Decision]) -> bool {
    let bits = |d: &Decision| (d.local, d.log_local_share.map(f64::to_bits));
    a.iter().map(bits).eq(b.iter().map(bits))
}

proptest! {
    /// QAdA and the mixture estimate a group's heads together (one read of the moments or the
    /// clusters for the group): every decision equals the head's alone, bit for bit.
    #[test]
    fn batched_group_estimates_equal_head_by_head(
        g in wide_group_strategy(), tau in 0.05f64..0.95, k in 1usize..5,
    ) {
        let mut inputs = g.inputs();
        let approx = Approx::new(tau).unwrap();
        let mut out = vec![Decision::LONG; inputs.len()];
        let any_long = approx.decide_group(&inputs, &mut out).unwrap();
        let alone = head_by_head(&approx, &inputs);
        prop_assert!(same_bits(&out, &alone), "{:?} vs {:?}", out, alone);
        prop_assert_eq!(any_long, alone.iter().any(|d| !d.local));

        let mut clusters = ClusterMoments::new(g.head.d, k).unwrap();
        clusters.fit(g.head.segments().bulk_keys).unwrap();
        for i in inputs.iter_mut() {
            i.bulk_clusters = Some(&clusters);
        }
        let mixture = Mixture::new(tau, k).unwrap();
        let any_long = mixture.decide_group(&inputs, &mut out).unwrap();
        let alone = head_by_head(&mixture, &inputs);
        prop_assert!(same_bits(&out, &alone), "{:?} vs {:?}", out, alone);
        prop_assert_eq!(any_long, alone.iter().any(|d| !d.local));
        // heads of other KV heads in one call: each still decided on its own clusters
        let other = ClusterMoments::new(g.head.d, k).unwrap();
        inputs[0].bulk_clusters = Some(&other);
        mixture.decide_group(&inputs, &mut out).unwrap();
        prop_assert!(same_bits(&out, &head_by_head(&mixture, &inputs)));
    }
}

#[test]
fn group_modes_parse_by_name() {
    for m in GroupMode::ALL {
        assert_eq!(m.name().parse::<GroupMode>().unwrap(), m);
    }
    let e = "heads".parse::<GroupMode>().unwrap_err().to_string();
    assert!(
        e.contains("heads") && e.contains("head, all or mass"),
        "{e}"
    );
}
