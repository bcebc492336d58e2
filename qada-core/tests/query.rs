//! The array API (`decide_query`, `compare_query`): any memory layout, checked shapes, and
//! `.npy` files written and read back. (That it gives the numbers of the slice API's probe is
//! tested in qada-eval, `tests/probe_query.rs`.)

mod common;

use common::{random, split};
use ndarray::{s, Array1, Array2};
use proptest::prelude::*;
use qada_core::{compare_query, decide_query, Approx, Bulk, CoreError, HeadQuery, Oracle};
use qada_stats::KeyMoments;

proptest! {
    /// Views in any layout (transposed, strided) give the numbers of standard-layout arrays.
    #[test]
    fn layout_does_not_change_the_decision(seed in any::<u64>(), t in 10usize..120, tau in 0.05f64..0.95) {
        let d = 16;
        let (q, k) = random(seed, t, d);
        let (local, bulk) = split(&k, 1, 4);
        let head = HeadQuery { query: q.view(), local_keys: local.view(), bulk: Bulk::Keys(bulk.view()), scale: Some(0.3) };
        // Fortran-order copies, and a query taken every other element of a longer array
        let local_f = local.t().as_standard_layout().into_owned().reversed_axes();
        let bulk_f = bulk.t().as_standard_layout().into_owned().reversed_axes();
        let wide: Array1<f32> = q.iter().flat_map(|&x| [x, f32::NAN]).collect();
        let q_strided = wide.slice(s![..;2]);
        prop_assert!(!local_f.is_standard_layout() || local.nrows() <= 1);
        prop_assert!(!q_strided.is_standard_layout());
        let odd = HeadQuery { query: q_strided, local_keys: local_f.view(), bulk: Bulk::Keys(bulk_f.view()), scale: Some(0.3) };
        prop_assert_eq!(compare_query(tau, &odd).unwrap(), compare_query(tau, &head).unwrap());
    }
}

#[test]
fn shapes_are_checked_with_what_was_wrong() {
    let (q, k) = random(1, 40, 8);
    let (local, bulk) = split(&k, 2, 6);
    let ok = HeadQuery {
        query: q.view(),
        local_keys: local.view(),
        bulk: Bulk::Keys(bulk.view()),
        scale: None,
    };
    assert!(decide_query(&Oracle::new(0.5).unwrap(), &ok).is_ok());

    let short_q = q.slice(s![..7]);
    let err = decide_query(
        &Oracle::new(0.5).unwrap(),
        &HeadQuery {
            query: short_q,
            ..ok
        },
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            CoreError::DimensionMismatch {
                expected: 7,
                found: 8,
                ..
            }
        ),
        "{err}"
    );

    let narrow = bulk.slice(s![.., ..7]);
    let err = compare_query(
        0.5,
        &HeadQuery {
            bulk: Bulk::Keys(narrow),
            ..ok
        },
    )
    .unwrap_err();
    assert!(matches!(err, CoreError::DimensionMismatch { .. }), "{err}");

    let m7 = KeyMoments::new(7);
    let err = compare_query(
        0.5,
        &HeadQuery {
            bulk: Bulk::Moments(&m7),
            ..ok
        },
    )
    .unwrap_err();
    assert!(matches!(err, CoreError::DimensionMismatch { .. }), "{err}");

    let m8 = KeyMoments::from_rows(8, bulk.as_slice().unwrap()).unwrap();
    let by_moments = HeadQuery {
        bulk: Bulk::Moments(&m8),
        ..ok
    };
    assert!(matches!(
        compare_query(0.5, &by_moments),
        Err(CoreError::MissingBulkKeys)
    ));
    assert!(decide_query(&Oracle::new(0.5).unwrap(), &by_moments).is_err());
    assert!(decide_query(&Approx::new(0.5).unwrap(), &by_moments).is_ok());
    assert!(matches!(
        compare_query(1.5, &ok),
        Err(CoreError::InvalidTau(_))
    ));
    let empty = Array1::<f32>::zeros(0);
    assert!(decide_query(
        &Approx::new(0.5).unwrap(),
        &HeadQuery {
            query: empty.view(),
            ..ok
        }
    )
    .is_err());
}

#[test]
fn npy_files_written_and_read_back_give_the_same_comparison() {
    let (q, k) = random(7, 300, 16);
    let dir = std::env::temp_dir().join(format!("qada-core-npy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    ndarray_npy::write_npy(dir.join("q.npy"), &q).unwrap();
    ndarray_npy::write_npy(dir.join("keys.npy"), &k).unwrap();
    let q2: Array1<f32> = ndarray_npy::read_npy(dir.join("q.npy")).unwrap();
    let k2: Array2<f32> = ndarray_npy::read_npy(dir.join("keys.npy")).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!((&q2, &k2), (&q, &k));
    for tau in [0.3, 0.6, 0.9] {
        let run = |q: &Array1<f32>, k: &Array2<f32>| {
            let (local, bulk) = split(k, 4, 20);
            compare_query(
                tau,
                &HeadQuery {
                    query: q.view(),
                    local_keys: local.view(),
                    bulk: Bulk::Keys(bulk.view()),
                    scale: None,
                },
            )
            .unwrap()
        };
        let (a, b) = (run(&q, &k), run(&q2, &k2));
        assert_eq!(a, b);
        assert!(a.gaussian_error().is_finite());
    }
}
