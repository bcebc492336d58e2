//! The array API's comparison (`compare_query`) gives the numbers of the slice API's probe
//! (`probe_layer`) on the same head. (Moved from qada-core's `tests/query.rs` with the probe;
//! the fixtures are copies.)

use ndarray::{concatenate, s, Array1, Array2, Axis};
use proptest::prelude::*;
use qada_core::{compare_query, decide_query, Approx, Bulk, HeadQuery, KvSegments};
use qada_eval::analysis::probe_layer;
use qada_stats::{KeyMoments, Rows};
use rand::{Rng, SeedableRng};

fn random(seed: u64, t: usize, d: usize) -> (Array1<f32>, Array2<f32>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let q = Array1::from_shape_fn(d, |_| rng.gen_range(-2.0f32..2.0));
    let k = Array2::from_shape_fn((t, d), |_| rng.gen_range(-2.0f32..2.0));
    (q, k)
}

/// Sink rows `..sink`, window the last `window`, bulk between.
fn split(k: &Array2<f32>, sink: usize, window: usize) -> (Array2<f32>, Array2<f32>) {
    let t = k.nrows();
    let local = concatenate![
        Axis(0),
        k.slice(s![..sink, ..]),
        k.slice(s![t - window.., ..])
    ];
    (local, k.slice(s![sink..t - window, ..]).to_owned())
}

proptest! {
    /// `compare_query` gives the probes of `probe_layer` (the slice API) on the same head.
    #[test]
    fn compare_query_equals_the_probe_of_the_slice_api(
        seed in any::<u64>(),
        d in prop_oneof![Just(8usize), Just(13), Just(64)],
        t in 12usize..200,
        tau in 0.05f64..0.95,
    ) {
        let (q, k) = random(seed, t, d);
        let (sink, window) = (2, 6);
        let (local, bulk) = split(&k, sink, window);
        let head = HeadQuery { query: q.view(), local_keys: local.view(), bulk: Bulk::Keys(bulk.view()), scale: None };
        let c = compare_query(tau, &head).unwrap();

        let kv: Vec<f32> = k.iter().copied().collect();
        let m = KeyMoments::from_rows(d, &kv[sink * d..(t - window) * d]).unwrap();
        let seg = KvSegments {
            dim: d,
            sink_keys: Rows::F32(&kv[..sink * d]),
            sink_values: Rows::F32(&kv[..sink * d]),
            bulk_keys: Rows::F32(&kv[sink * d..(t - window) * d]),
            bulk_values: Rows::F32(&kv[sink * d..(t - window) * d]),
            window_keys: Rows::F32(&kv[(t - window) * d..]),
            window_values: Rows::F32(&kv[(t - window) * d..]),
            bulk_moments: &m,
            bulk_pages: None,
            bulk_clusters: None,
        };
        let scale = 1.0 / (d as f32).sqrt();
        let p = probe_layer(0, q.as_slice().unwrap(), &[seg], scale).unwrap()[0];
        prop_assert_eq!(c.log_local, p.log_local);
        prop_assert_eq!(c.log_bulk, p.log_bulk);
        prop_assert_eq!(c.log_bulk_hat, p.log_bulk_hat);
        prop_assert_eq!(c.gaussian_error(), p.log_bulk_hat - p.log_bulk);
        prop_assert_eq!(c.oracle.log_local_share, Some(p.oracle_share()));
        let tau_v = qada_core::Tau::new(tau).unwrap();
        prop_assert_eq!(c.oracle.local, p.oracle_local(tau_v));
        prop_assert_eq!(c.approx.local, p.approx_local(tau_v));

        // moments only: QAdA decides the same; given keys and moments, both as with keys
        let by_moments = HeadQuery { bulk: Bulk::Moments(&m), ..head };
        prop_assert_eq!(decide_query(&Approx::new(tau).unwrap(), &by_moments).unwrap(), c.approx);
        let both = HeadQuery { bulk: Bulk::KeysAndMoments { keys: bulk.view(), moments: &m }, ..head };
        prop_assert_eq!(compare_query(tau, &both).unwrap(), c);
    }
}
