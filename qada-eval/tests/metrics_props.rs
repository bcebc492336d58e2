//! Properties of the quality metrics (`qada_eval::metrics`).

use proptest::prelude::*;
use qada_eval::metrics::{interpolate, kl_divergence, log_softmax, recall, top1_agreement};

/// Logits on a 1/64 grid, so that adding an integer shift is exact in f32.
fn grid_logits() -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(-20_000i32..20_000, 1..200)
        .prop_map(|v| v.into_iter().map(|k| k as f32 / 64.0).collect())
}

fn wide_logits(n: std::ops::Range<usize>) -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(-1.0e4f32..1.0e4, n)
}

fn total_variation(p: &[f64], q: &[f64]) -> f64 {
    0.5 * p
        .iter()
        .zip(q)
        .map(|(a, b)| (a.exp() - b.exp()).abs())
        .sum::<f64>()
}

proptest! {
    #[test]
    fn log_softmax_sums_to_one_in_probability(l in wide_logits(1..300)) {
        let lp = log_softmax(&l);
        prop_assert_eq!(lp.len(), l.len());
        let total: f64 = lp.iter().map(|x| x.exp()).sum();
        prop_assert!((total - 1.0).abs() < 1e-12, "sum of probabilities {total}");
        prop_assert!(lp.iter().all(|&x| x <= 1e-15), "a log-probability above 0");
    }

    #[test]
    fn log_softmax_is_shift_invariant(l in grid_logits(), c in -1000i32..1000) {
        let shifted: Vec<f32> = l.iter().map(|&x| x + c as f32).collect();
        let (a, b) = (log_softmax(&l), log_softmax(&shifted));
        for (x, y) in a.iter().zip(&b) {
            prop_assert!((x - y).abs() < 1e-9, "{x} vs {y} after a shift of {c}");
        }
    }

    #[test]
    fn log_softmax_keeps_differences_of_logits(l in grid_logits()) {
        let lp = log_softmax(&l);
        for i in 1..l.len() {
            let want = (l[i] - l[0]) as f64;
            prop_assert!((lp[i] - lp[0] - want).abs() < 1e-9);
        }
    }

    #[test]
    fn kl_is_zero_for_identical_distributions(l in wide_logits(1..300)) {
        let p = log_softmax(&l);
        prop_assert!(kl_divergence(&p, &p).abs() < 1e-12);
        prop_assert!(top1_agreement(&p, &p));
    }

    /// Gibbs' inequality, and Pinsker's: `KL(P || Q) >= 2 TV(P, Q)^2 >= 0`.
    #[test]
    fn kl_is_nonnegative_and_bounds_total_variation(
        (a, b) in (2usize..100).prop_flat_map(|n| {
            (prop::collection::vec(-20.0f32..20.0, n), prop::collection::vec(-20.0f32..20.0, n))
        })
    ) {
        let (p, q) = (log_softmax(&a), log_softmax(&b));
        let kl = kl_divergence(&p, &q);
        prop_assert!(kl >= -1e-12, "KL = {kl}");
        let tv = total_variation(&p, &q);
        prop_assert!(kl >= 2.0 * tv * tv - 1e-9, "KL = {kl} below Pinsker's bound, TV = {tv}");
    }

    #[test]
    fn top1_agreement_follows_the_largest_logit(l in grid_logits(), i in any::<prop::sample::Index>()) {
        let i = i.index(l.len());
        let mut peaked = l.clone();
        let top = l.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        peaked[i] = top + 1.0;
        let (p, q) = (log_softmax(&l), log_softmax(&peaked));
        let p_top = p.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0;
        prop_assert_eq!(top1_agreement(&p, &q), p_top == i);
    }

    #[test]
    fn interpolation_between_two_points_lies_between_them(
        s0 in 0.0f64..1.0, gap in 1e-6f64..1.0, y0 in -10.0f64..10.0, y1 in -10.0f64..10.0,
        t in 0.0f64..=1.0,
    ) {
        let s1 = s0 + gap;
        let pts = [(s1, y1), (s0, y0)];
        prop_assert_eq!(interpolate(&pts, s0), Some(y0));
        let at1 = interpolate(&pts, s1).unwrap();
        prop_assert!((at1 - y1).abs() < 1e-12, "{at1} at s1, want {y1}");
        let s = (s0 + t * gap).min(s1);
        let y = interpolate(&pts, s).unwrap();
        prop_assert!(y >= y0.min(y1) - 1e-12 && y <= y0.max(y1) + 1e-12, "{y} not between {y0} and {y1}");
        let want = y0 + (y1 - y0) * (s - s0) / gap;
        prop_assert!((y - want).abs() < 1e-9);
        prop_assert_eq!(interpolate(&pts, s1 + 1e-3), None);
        prop_assert_eq!(interpolate(&pts, s0 - 1e-3), None);
    }

    #[test]
    fn interpolation_ignores_points_outside_the_bracket(
        mut xs in prop::collection::btree_set(0u32..1000, 3..12),
        ys in prop::collection::vec(-5.0f64..5.0, 12),
        pick in any::<prop::sample::Index>(), t in 0.0f64..1.0,
    ) {
        let xs: Vec<f64> = std::mem::take(&mut xs).into_iter().map(|x| x as f64 / 1000.0).collect();
        let pts: Vec<(f64, f64)> = xs.iter().zip(&ys).map(|(&x, &y)| (x, y)).rev().collect();
        let k = pick.index(xs.len() - 1);
        let s = xs[k] + t * (xs[k + 1] - xs[k]);
        let y = interpolate(&pts, s).unwrap();
        let (lo, hi) = (ys[k].min(ys[k + 1]), ys[k].max(ys[k + 1]));
        prop_assert!(y >= lo - 1e-12 && y <= hi + 1e-12, "{y} outside [{lo}, {hi}] at {s}");
    }

    #[test]
    fn recall_is_a_fraction_and_one_when_all_are_found(
        expected in prop::collection::vec("[a-zA-Z0-9 ]{1,8}", 1..6),
        filler in prop::collection::vec("[a-z .,]{0,12}", 6),
        answer in "[a-zA-Z0-9 .]{0,40}",
    ) {
        let r = recall(&answer, &expected);
        prop_assert!((0.0..=1.0).contains(&r), "recall {r}");
        let mut all = String::new();
        for (e, f) in expected.iter().zip(&filler) {
            all.push_str(f);
            all.push_str(&e.to_uppercase());
        }
        prop_assert_eq!(recall(&all, &expected), 1.0);
    }

    /// `k` of `n` distinct keys are in the answer: recall is `k / n`.
    #[test]
    fn recall_is_the_fraction_of_keys_found(
        keys in prop::collection::btree_set(10_000u32..100_000, 1..8),
        mask in prop::collection::vec(any::<bool>(), 8),
    ) {
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        let answer: String = keys
            .iter()
            .zip(&mask)
            .filter(|(_, &m)| m)
            .map(|(k, _)| format!("the key is {k}. "))
            .collect();
        let k = mask.iter().take(keys.len()).filter(|&&m| m).count();
        prop_assert_eq!(recall(&answer, &keys), k as f64 / keys.len() as f64);
    }
}
