//! Properties of the streaming key moments, each checked against a plain two-pass computation.

use ndarray::{s, Array2, ArrayView2};
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

proptest! {
    /// `covariance_array` is the full symmetric population covariance: equal to the two-pass
    /// reference within 1e-9 relative, entry by entry, and `mean_array` to the two-pass mean.
    #[test]
    fn covariance_array_equals_two_pass((d, keys) in keys_strategy()) {
        let view = ArrayView2::from_shape((keys.len() / d, d), &keys).unwrap();
        let m = KeyMoments::from_keys(view).unwrap();
        let (mean, cov) = two_pass(d, &keys);
        let c = m.covariance_array();
        prop_assert_eq!(c.dim(), (d, d));
        let scale = cov.iter().fold(0.0f64, |a, &x| a.max(x.abs()));
        for i in 0..d {
            for j in 0..d {
                let (a, b) = (c[[i, j]], cov[i * d + j]);
                prop_assert!((a - b).abs() <= 1e-9 * scale.max(f64::MIN_POSITIVE), "({i},{j}): {a} vs {b}");
                prop_assert_eq!(c[[i, j]], c[[j, i]]);
            }
        }
        close(m.mean_array().as_slice().unwrap(), &mean, 1e-12)?;
        prop_assert_eq!(m, KeyMoments::from_rows(d, &keys).unwrap());
    }

    /// A view that is not in standard layout (transposed storage, or every other row) gives
    /// exactly the moments of its standard-layout copy.
    #[test]
    fn from_keys_of_any_layout_equals_its_standard_copy((d, keys) in keys_strategy()) {
        let n = keys.len() / d;
        // stored d x n (column-major for the T x d view): its transpose is not standard layout
        let rows = Array2::from_shape_vec((n, d), keys.clone()).unwrap();
        let stored = rows.t().as_standard_layout().into_owned();
        let transposed = stored.t();
        prop_assert!(n == 1 || d == 1 || transposed.as_slice().is_none());
        let copy = transposed.as_standard_layout().to_owned();
        prop_assert_eq!(
            KeyMoments::from_keys(transposed).unwrap(),
            KeyMoments::from_keys(copy.view()).unwrap()
        );
        // every other row: strided
        let whole = Array2::from_shape_vec((n, d), keys).unwrap();
        let strided = whole.slice(s![..;2, ..]);
        let copy = strided.to_owned();
        prop_assert_eq!(
            KeyMoments::from_keys(strided).unwrap(),
            KeyMoments::from_keys(copy.view()).unwrap()
        );
        // push_keys of a wrong width is an error
        let mut m = KeyMoments::new(d + 1);
        prop_assert!(m.push_keys(whole.view()).is_err());
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
