//! Properties of the streaming key moments, each checked against a plain two-pass computation.

use proptest::prelude::*;
use qada_stats::KeyMoments;

/// Two-pass f64 mean and population covariance: the reference.
fn two_pass(d: usize, keys: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let n = keys.len() / d;
    let mut mean = vec![0.0; d];
    for row in keys.chunks_exact(d) {
        for (m, &k) in mean.iter_mut().zip(row) {
            *m += k as f64;
        }
    }
    mean.iter_mut().for_each(|m| *m /= n as f64);
    let mut cov = vec![0.0; d * d];
    for row in keys.chunks_exact(d) {
        for i in 0..d {
            for j in 0..d {
                cov[i * d + j] += (row[i] as f64 - mean[i]) * (row[j] as f64 - mean[j]);
            }
        }
    }
    cov.iter_mut().for_each(|c| *c /= n as f64);
    (mean, cov)
}

fn close(a: &[f64], b: &[f64], tol: f64) -> Result<(), TestCaseError> {
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let scale = 1.0 + x.abs().max(y.abs());
        prop_assert!((x - y).abs() <= tol * scale, "index {i}: {x} vs {y}");
    }
    Ok(())
}

fn keys_strategy() -> impl Strategy<Value = (usize, Vec<f32>)> {
    (1usize..9, 1usize..60).prop_flat_map(|(d, n)| {
        (
            Just(d),
            prop::collection::vec(-100.0f32..100.0, d * n..=d * n),
        )
    })
}

proptest! {
    #[test]
    fn streaming_equals_two_pass((d, keys) in keys_strategy()) {
        let mut m = KeyMoments::new(d);
        for row in keys.chunks_exact(d) {
            m.push(row).unwrap();
        }
        let (mean, cov) = two_pass(d, &keys);
        prop_assert_eq!(m.count() as usize, keys.len() / d);
        close(m.mean(), &mean, 1e-12)?;
        close(&m.covariance(), &cov, 1e-10)?;
    }

    #[test]
    fn block_push_equals_two_pass((d, keys) in keys_strategy()) {
        let m = KeyMoments::from_rows(d, &keys).unwrap();
        let (mean, cov) = two_pass(d, &keys);
        close(m.mean(), &mean, 1e-12)?;
        close(&m.covariance(), &cov, 1e-10)?;
    }

    #[test]
    fn merge_of_any_split_equals_one_pass((d, keys) in keys_strategy(), cut in 0.0f64..1.0) {
        let n = keys.len() / d;
        let split = ((n as f64) * cut) as usize * d;
        let mut a = KeyMoments::new(d);
        let mut b = KeyMoments::new(d);
        for row in keys[..split].chunks_exact(d) { a.push(row).unwrap(); }
        for row in keys[split..].chunks_exact(d) { b.push(row).unwrap(); }
        a.merge(&b).unwrap();
        let whole = KeyMoments::from_rows(d, &keys).unwrap();
        prop_assert_eq!(a.count(), whole.count());
        close(a.mean(), whole.mean(), 1e-12)?;
        close(&a.covariance(), &whole.covariance(), 1e-10)?;
    }

    #[test]
    fn covariance_is_symmetric_and_positive_semidefinite(
        (d, keys) in keys_strategy(),
        q in prop::collection::vec(-3.0f32..3.0, 8),
    ) {
        let m = KeyMoments::from_rows(d, &keys).unwrap();
        let cov = m.covariance();
        for i in 0..d {
            for j in 0..d {
                prop_assert_eq!(cov[i * d + j], cov[j * d + i]);
            }
        }
        // q Sigma q >= 0 up to rounding, both through the packed form and the full matrix.
        let q = &q[..d];
        let quad = m.quad_form(q).unwrap();
        let mut full = 0.0;
        for i in 0..d {
            for j in 0..d {
                full += q[i] as f64 * cov[i * d + j] * q[j] as f64;
            }
        }
        let trace: f64 = (0..d).map(|i| cov[i * d + i]).sum();
        let qq: f64 = q.iter().map(|&x| (x as f64).powi(2)).sum();
        let tol = 1e-9 * (1.0 + trace * qq);
        prop_assert!(quad >= -tol, "quad form {quad}");
        prop_assert!((quad - full).abs() <= tol, "packed {quad} vs full {full}");
    }
}

/// Keys around 1e4 with a spread of 1e-2: the naive E[kk^T] - mu mu^T loses every digit here.
#[test]
fn tiny_spread_on_a_large_offset_stays_accurate() {
    use rand::{Rng, SeedableRng};
    let d = 4;
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let keys: Vec<f32> = (0..20_000 * d)
        .map(|i| 1e4 + (i % d) as f32 + rng.gen_range(-0.017f32..0.017))
        .collect();
    let mut m = KeyMoments::new(d);
    for row in keys.chunks_exact(d) {
        m.push(row).unwrap();
    }
    let (mean, cov) = two_pass(d, &keys);
    for i in 0..d {
        assert!((m.mean()[i] - mean[i]).abs() < 1e-9);
        for j in 0..d {
            let (a, b) = (m.covariance()[i * d + j], cov[i * d + j]);
            // variances are ~1e-4: ask for 1e-6 relative to them.
            assert!((a - b).abs() < 1e-10, "({i},{j}): {a} vs {b}");
        }
    }
    let var0 = m.covariance()[0];
    assert!(var0 > 5e-5 && var0 < 2e-4, "variance {var0}");
}
