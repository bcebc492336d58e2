//! `probe_layer_with`: any criterion's bulk estimate in the probes `qada analyze` scores.

mod common;

use common::Head;
use proptest::prelude::*;
use qada_core::{Approx, Dense, KvSegments, Oracle, Window};
use qada_eval::analysis::{probe_layer, probe_layer_with};

fn layer() -> impl Strategy<Value = (Vec<Head>, Vec<f32>)> {
    (1usize..5, 1usize..3, 1usize..4, 20usize..90).prop_flat_map(|(d, n_kv, group, t)| {
        (
            prop::collection::vec(
                prop::collection::vec(-2.0f32..2.0, t * d..=t * d),
                n_kv..=n_kv,
            ),
            prop::collection::vec(-2.0f32..2.0, n_kv * group * d..=n_kv * group * d),
        )
            .prop_map(move |(keys, q)| {
                let heads = keys
                    .into_iter()
                    .map(|k| {
                        let v = k.iter().map(|x| x * 0.5).collect();
                        Head::new(d, 2, 10, k, v)
                    })
                    .collect();
                (heads, q)
            })
    })
}

proptest! {
    #[test]
    fn approx_gives_the_gaussian_estimate_and_the_oracle_the_exact_mass((heads, q) in layer()) {
        let kv: Vec<KvSegments<'_>> = heads.iter().map(Head::segments).collect();
        let scale = 1.0 / (heads[0].d as f32).sqrt();
        let base = probe_layer(3, &q, &kv, scale).unwrap();
        let approx = probe_layer_with(3, &q, &kv, scale, &Approx::new(0.5).unwrap()).unwrap();
        let oracle = probe_layer_with(3, &q, &kv, scale, &Oracle::new(0.5).unwrap()).unwrap();
        prop_assert_eq!(base.len(), approx.len());
        for ((b, a), o) in base.iter().zip(&approx).zip(&oracle) {
            prop_assert_eq!((b.layer, b.head, b.log_bulk), (a.layer, a.head, a.log_bulk));
            let tol = 1e-6 * (1.0 + b.log_bulk_hat.abs());
            prop_assert!((a.log_bulk_hat - b.log_bulk_hat).abs() < tol,
                "approx {} vs {}", a.log_bulk_hat, b.log_bulk_hat);
            let tol = 1e-4 * (1.0 + o.log_bulk.abs());
            prop_assert!((o.log_bulk_hat - o.log_bulk).abs() < tol,
                "oracle {} vs exact {}", o.log_bulk_hat, o.log_bulk);
        }
        // a criterion with no mass gives its label: the window is local, dense long
        let window = probe_layer_with(3, &q, &kv, scale, &Window).unwrap();
        prop_assert!(window.iter().all(|p| p.log_bulk_hat == f64::NEG_INFINITY));
        let dense = probe_layer_with(3, &q, &kv, scale, &Dense).unwrap();
        prop_assert!(dense.iter().all(|p| p.log_bulk_hat == f64::INFINITY));
    }
}
