//! The Gaussian score model against Monte-Carlo means of exp(q . k / sqrt(d)).

use proptest::prelude::*;
use qada_stats::{GaussianScore, KeyMoments};
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};

/// Draw `n` keys `k = mu + L z` with `z ~ N(0, I)`.
fn gaussian_keys(mu: &[f32], l: &[f32], n: usize, seed: u64) -> Vec<f32> {
    let d = mu.len();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(n * d);
    let mut z = vec![0.0f32; d];
    for _ in 0..n {
        for zi in z.iter_mut() {
            *zi = StandardNormal.sample(&mut rng);
        }
        for i in 0..d {
            let mut v = mu[i];
            for j in 0..d {
                v += l[i * d + j] * z[j];
            }
            out.push(v);
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// For keys drawn from a Gaussian, `exp(mu_s + sigma_s^2/2)` is the mean of `exp(s)`.
    /// Tolerance: the Monte-Carlo mean of a log-normal has relative standard error
    /// `sqrt((exp(sigma_s^2) - 1) / n)`; we allow six of them plus 1e-3.
    #[test]
    fn score_model_matches_monte_carlo_mean(
        d in 2usize..9,
        seed in 0u64..1000,
        mu in prop::collection::vec(-1.0f32..1.0, 8),
        l in prop::collection::vec(-0.6f32..0.6, 64),
        q in prop::collection::vec(-1.5f32..1.5, 8),
    ) {
        let n = 40_000;
        let keys = gaussian_keys(&mu[..d], &l[..d * d], n, seed);
        let q = &q[..d];
        let scale = 1.0 / (d as f64).sqrt();
        let moments = KeyMoments::from_rows(d, &keys).unwrap();
        let g = GaussianScore::new(q, &moments, scale).unwrap();
        prop_assume!(g.sigma2_s < 1.5);
        let mc: f64 = keys
            .chunks_exact(d)
            .map(|k| (scale * q.iter().zip(k).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>()).exp())
            .sum::<f64>() / n as f64;
        let se = ((g.sigma2_s.exp() - 1.0) / n as f64).sqrt();
        let err = (mc.ln() - g.log_mean_exp()).abs();
        prop_assert!(err <= 6.0 * se + 1e-3, "log error {err}, standard error {se}");
        // the bulk mass is T_bulk times the mean
        let t_bulk = 1234;
        prop_assert!((g.log_bulk_mass(t_bulk) - ((t_bulk as f64).ln() + g.log_mean_exp())).abs() < 1e-12);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// The factored quadratic form is within `rel_tol * trace * |q|^2` of the full one, and
    /// with tolerance 0 it keeps every factor.
    #[test]
    fn factored_covariance_is_within_its_stated_bound(
        d in 2usize..12,
        seed in 0u64..1000,
        l in prop::collection::vec(-1.0f32..1.0, 144),
        q in prop::collection::vec(-2.0f32..2.0, 12),
        tol in 0.0f64..0.2,
    ) {
        use qada_stats::{FactoredMoments, KeyDistribution};
        let keys = gaussian_keys(&vec![0.3; d], &l[..d * d], 500, seed);
        let m = KeyMoments::from_rows(d, &keys).unwrap();
        let f = FactoredMoments::new(&m, tol).unwrap();
        let q = &q[..d];
        let full = m.quad_form(q).unwrap();
        let fac = f.quad_form(q).unwrap();
        let qq: f64 = q.iter().map(|&x| (x as f64).powi(2)).sum();
        prop_assert!((full - fac).abs() <= tol * f.trace() * qq + 1e-4 * (1.0 + full), "{full} vs {fac}, rank {}", f.rank());
        prop_assert!((m.mean_dot(q).unwrap() - f.mean_dot(q).unwrap()).abs() < 1e-9);
        prop_assert!(f.dropped() <= tol * f.trace() + 1e-12);
        let exact = FactoredMoments::new(&m, 0.0).unwrap();
        prop_assert!(exact.rank() >= d - 1, "rank {} of {d} with zero tolerance", exact.rank());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// `log A_bulk_hat = ln T + mu_s + sigma_s^2 / 2` is `ln(T E[exp(s)])` for
    /// `s ~ N(mu_s, sigma_s^2)`, with the log-normal mean taken from statrs, for the score
    /// moments of any keys and query (the query entering as an `ndarray` view, contiguous or
    /// strided).
    #[test]
    fn log_bulk_mass_is_t_times_the_log_normal_mean(
        d in 1usize..9,
        keys in prop::collection::vec(-2.0f32..2.0, 8 * 40),
        q in prop::collection::vec(-2.0f32..2.0, 16),
        t_bulk in 1usize..100_000,
    ) {
        use ndarray::{s, ArrayView1, ArrayView2};
        use statrs::distribution::LogNormal;
        use statrs::statistics::Distribution as _;
        let keys = ArrayView2::from_shape((40, d), &keys[..40 * d]).unwrap();
        let moments = KeyMoments::from_keys(keys).unwrap();
        let scale = 1.0 / (d as f64).sqrt();
        let contiguous = ArrayView1::from(&q[..d]);
        let strided = ArrayView1::from(&q[..2 * d]).slice_move(s![..;2]);
        let g = GaussianScore::of_query(contiguous, &moments, scale).unwrap();
        prop_assert_eq!(g, GaussianScore::new(&q[..d], &moments, scale).unwrap());
        let every_other: Vec<f32> = q[..2 * d].iter().step_by(2).copied().collect();
        prop_assert_eq!(
            GaussianScore::of_query(strided, &moments, scale).unwrap(),
            GaussianScore::new(&every_other, &moments, scale).unwrap()
        );
        prop_assume!(g.sigma2_s > 1e-12);
        let mean = LogNormal::new(g.mu_s, g.sigma2_s.sqrt()).unwrap().mean().unwrap();
        let expected = (t_bulk as f64 * mean).ln();
        let got = g.log_bulk_mass(t_bulk);
        prop_assert!((got - expected).abs() <= 1e-12 * (1.0 + expected.abs()), "{got} vs {expected}");
    }
}

/// Scores of keys drawn from a Gaussian (statrs's `Normal` samples) are distributed as
/// `N(mu_s, sigma_s^2)` with the model's moments: the Kolmogorov-Smirnov distance between their
/// empirical distribution and statrs's normal cdf stays under the 0.1% critical value
/// `1.95 / sqrt(n)`, and the share of scores above `mu_s + sigma_s` is `1 - Phi(1)` within four
/// binomial standard errors; a variance without the `scale^2` fails the distance check.
#[test]
fn scores_of_gaussian_keys_follow_the_model_normal() {
    use rand::SeedableRng;
    use statrs::distribution::{ContinuousCDF, Normal};
    let n = 20_000;
    let standard = Normal::new(0.0, 1.0).unwrap();
    for (seed, d) in [(1u64, 2usize), (2, 4), (3, 8), (4, 16)] {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut draw = |scale: f64| {
            (scale * rand::distributions::Distribution::sample(&standard, &mut rng)) as f32
        };
        let mu: Vec<f32> = (0..d).map(|_| draw(0.5)).collect();
        let l: Vec<f32> = (0..d * d).map(|_| draw(0.4)).collect();
        let q: Vec<f32> = (0..d).map(|_| draw(1.0)).collect();
        let mut keys = Vec::with_capacity(n * d);
        let mut z = vec![0.0f32; d];
        for _ in 0..n {
            z.iter_mut().for_each(|x| *x = draw(1.0));
            for i in 0..d {
                keys.push(mu[i] + (0..d).map(|j| l[i * d + j] * z[j]).sum::<f32>());
            }
        }
        let scale = 1.0 / (d as f64).sqrt();
        let moments = KeyMoments::from_rows(d, &keys).unwrap();
        let g = GaussianScore::new(&q, &moments, scale).unwrap();
        let model = Normal::new(g.mu_s, g.sigma2_s.sqrt()).unwrap();
        let mut scores: Vec<f64> = keys
            .chunks_exact(d)
            .map(|k| {
                scale
                    * q.iter()
                        .zip(k)
                        .map(|(&a, &b)| a as f64 * b as f64)
                        .sum::<f64>()
            })
            .collect();
        scores.sort_by(f64::total_cmp);
        let ks_distance = |model: &Normal| {
            scores
                .iter()
                .enumerate()
                .map(|(i, &s)| {
                    let f = model.cdf(s);
                    (f - i as f64 / n as f64)
                        .abs()
                        .max(((i + 1) as f64 / n as f64 - f).abs())
                })
                .fold(0.0f64, f64::max)
        };
        let critical = 1.95 / (n as f64).sqrt();
        let ks = ks_distance(&model);
        assert!(
            ks < critical,
            "d = {d}: KS distance {ks}, critical {critical}"
        );
        // the check has power: sigma_s^2 without the scale^2 (d times too wide) is refused
        let unscaled = Normal::new(g.mu_s, (g.sigma2_s * d as f64).sqrt()).unwrap();
        let ks_wrong = ks_distance(&unscaled);
        assert!(
            ks_wrong > critical,
            "d = {d}: a wrong variance passed, KS {ks_wrong}"
        );
        let p = 1.0 - standard.cdf(1.0);
        let above = scores
            .iter()
            .filter(|&&s| s > g.mu_s + g.sigma2_s.sqrt())
            .count();
        let se = (p * (1.0 - p) / n as f64).sqrt();
        let share = above as f64 / n as f64;
        assert!(
            (share - p).abs() < 4.0 * se,
            "d = {d}: share {share} above mu + sigma, expected {p}"
        );
    }
}
