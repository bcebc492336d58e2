//! The array API's comparison (`compare_query`) gives the numbers of the slice API's probe
//! (`probe_layer`) on the same head. (Moved from qada-core's `tests/query.rs` with the probe;
//! the fixtures are qada-core's.)

mod common;

use common::{random, split};
use proptest::prelude::*;
use qada_core::{compare_query, decide_query, Approx, Bulk, HeadQuery, KvSegments};
use qada_eval::analysis::probe_layer;
use qada_stats::{KeyMoments, Rows};

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
