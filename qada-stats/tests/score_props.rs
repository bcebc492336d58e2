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
