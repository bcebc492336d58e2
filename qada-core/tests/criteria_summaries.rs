//! Properties of the criteria that read summaries of the bulk: `Bound` (page bounds),
//! `Mixture` (cluster moments) and `Hybrid` (QAdA checked by the bound).

use ndarray::Array2;
use proptest::prelude::*;
use qada_core::{
    decide_query, Approx, Bound, Bulk, CoreError, Decision, HeadInput, HeadQuery, Hybrid,
    LocalityCriterion, Mixture, Oracle, PreparedQuery,
};
use qada_core::{DEFAULT_CLUSTERS, DEFAULT_MARGIN, DEFAULT_PAGE};
use qada_stats::{f16, ClusterMoments, KeyMoments, PageBounds, Q8Block, Rows};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// How the bulk keys are stored (and so read by the oracle's kernels and the page bounds).
#[derive(Clone, Copy, Debug)]
enum Dtype {
    F32,
    F16,
    Q8,
}

/// One query head: the query, its local scores, and the bulk keys with their moments and
/// summaries.
#[derive(Debug)]
struct Case {
    d: usize,
    query: Vec<f32>,
    scale: f32,
    local_scores: Vec<f32>,
    dtype: Dtype,
    keys: Vec<f32>,
    keys_f16: Vec<f16>,
    keys_q8: Vec<Q8Block>,
    moments: KeyMoments,
    pages: Option<PageBounds>,
    clusters: Option<ClusterMoments>,
}

impl Case {
    /// The bulk keys as stored.
    fn rows(&self) -> Rows<'_> {
        match self.dtype {
            Dtype::F32 => Rows::F32(&self.keys),
            Dtype::F16 => Rows::F16(&self.keys_f16),
            Dtype::Q8 => Rows::Q8(&self.keys_q8),
        }
    }
    fn bulk_len(&self) -> usize {
        self.keys.len() / self.d
    }
    fn input(&self) -> HeadInput<'_> {
        HeadInput {
            layer: 0,
            head: 0,
            query: &self.query,
            scale: self.scale,
            local_scores: &self.local_scores,
            bulk_len: self.bulk_len(),
            bulk_moments: &self.moments,
            bulk_keys: self.rows(),
            bulk_pages: self.pages.as_ref(),
            bulk_clusters: self.clusters.as_ref(),
        }
    }
    /// Build the summaries a criterion asks for from the stored rows.
    fn summarize(&mut self, page: Option<usize>, clusters: Option<usize>) {
        let rows = self.rows();
        let pages = page.map(|p| {
            let mut b = PageBounds::new(self.d, p).unwrap();
            b.push_rows_of(rows).unwrap();
            b
        });
        let clusters = clusters.map(|k| {
            let mut c = ClusterMoments::new(self.d, k).unwrap();
            c.fit(rows).unwrap();
            c
        });
        (self.pages, self.clusters) = (pages, clusters);
    }

    /// A head with `keys` stored as `dtype` and local scores placed around the bulk's mass:
    /// `ln A_local - ln A_bulk` near each of `offsets`.
    fn new(
        d: usize,
        dtype: Dtype,
        keys: Vec<f32>,
        query: Vec<f32>,
        scale: f32,
        offsets: &[f64],
    ) -> Case {
        let keys_f16 = keys.iter().map(|&k| f16::from_f32(k)).collect();
        let mut keys_q8 = Vec::new();
        if matches!(dtype, Dtype::Q8) {
            Q8Block::quantize_into(&keys, &mut keys_q8);
        }
        let mut case = Case {
            d,
            query,
            scale,
            local_scores: Vec::new(),
            dtype,
            keys,
            keys_f16,
            keys_q8,
            moments: KeyMoments::new(d),
            pages: None,
            clusters: None,
        };
        let mut moments = KeyMoments::new(d);
        moments.push_rows_of(case.rows()).unwrap();
        case.moments = moments;
        // exact log bulk mass of the stored keys, in f64
        let mut row = vec![0.0f32; d];
        let s: Vec<f64> = (0..case.bulk_len())
            .map(|i| {
                case.rows().row_f32(i, &mut row);
                scale as f64
                    * row
                        .iter()
                        .zip(&case.query)
                        .map(|(&k, &q)| k as f64 * q as f64)
                        .sum::<f64>()
            })
            .collect();
        let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let log_bulk = m + s.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
        let n = offsets.len() as f64;
        case.local_scores = offsets
            .iter()
            .map(|o| (log_bulk + o - n.ln()) as f32)
            .collect();
        case
    }
}

/// Keys of every kind: distinct or repeated in runs (identical keys make a page's bound
/// tight, where only the slack covers the kernels' rounding), at scales from 1e-4 to 1e4,
/// stored as f32, f16 or q8; queries from 1e-4 to 1e4; pages of 1 to 64 keys; bulks of 1 to
/// 3000 keys.
fn bound_case() -> impl Strategy<Value = (Case, usize, f64)> {
    let dtype = prop_oneof![Just(Dtype::F32), Just(Dtype::F16), Just(Dtype::Q8)];
    let page = prop_oneof![
        Just(1usize),
        Just(2),
        3usize..9,
        Just(DEFAULT_PAGE),
        Just(64)
    ];
    let t_bulk = prop_oneof![4 => 1usize..40, 4 => 40usize..400, 1 => 400usize..3000];
    (
        dtype,
        1usize..25,
        page,
        t_bulk,
        -4i32..=4,
        -4i32..=4,
        0usize..4,
        any::<u64>(),
        0.01f64..0.99,
    )
        .prop_map(|(dtype, d, page, t, key_exp, q_exp, protos, seed, tau)| {
            let d = match dtype {
                Dtype::Q8 => 32 * (1 + d % 2),
                _ => d,
            };
            let mut rng = StdRng::seed_from_u64(seed);
            let (ks, qs) = (10f32.powi(key_exp), 10f32.powi(q_exp));
            let mut draw = |n: usize, s: f32| -> Vec<f32> {
                (0..n).map(|_| rng.gen_range(-1.0f32..1.0) * s).collect()
            };
            let keys = if protos == 0 {
                draw(t * d, ks)
            } else {
                let proto = draw(protos * d, ks);
                let mut keys = Vec::with_capacity(t * d);
                let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
                while keys.len() < t * d {
                    let p = rng.gen_range(0..protos);
                    let run = rng.gen_range(1..=2 * page);
                    for _ in 0..run {
                        keys.extend_from_slice(&proto[p * d..(p + 1) * d]);
                    }
                }
                keys.truncate(t * d);
                keys
            };
            let query = draw(d, qs);
            let scale = [1.0 / (d as f32).sqrt(), 1.0, 0.125][(seed % 3) as usize];
            let offsets: Vec<f64> = (0..1 + seed as usize % 5)
                .map(|_| rng.gen_range(-6.0..12.0))
                .collect();
            let mut case = Case::new(d, dtype, keys, query, scale, &offsets);
            case.summarize(Some(page), None);
            (case, page, tau)
        })
}

/// Two blobs of keys (centres at least 3 apart in every coordinate, noise 0.05), in order or
/// shuffled, and a query.
fn blobs_case() -> impl Strategy<Value = (Case, f64)> {
    (
        2usize..12,
        20usize..200,
        20usize..200,
        any::<bool>(),
        0.2f32..2.0,
        any::<u64>(),
        0.05f64..0.95,
    )
        .prop_map(|(d, n1, n2, shuffle, qs, seed, tau)| {
            let mut rng = StdRng::seed_from_u64(seed);
            let c1: Vec<f32> = (0..d).map(|_| rng.gen_range(-2.0f32..2.0)).collect();
            let c2: Vec<f32> = c1
                .iter()
                .map(|&c| {
                    c + rng.gen_range(3.0f32..6.0) * if rng.gen::<bool>() { 1.0 } else { -1.0 }
                })
                .collect();
            let mut rows: Vec<Vec<f32>> = (0..n1 + n2)
                .map(|i| {
                    let c = if i < n1 { &c1 } else { &c2 };
                    c.iter()
                        .map(|&x| x + rng.gen_range(-0.05f32..0.05))
                        .collect()
                })
                .collect();
            if shuffle {
                for i in (1..rows.len()).rev() {
                    rows.swap(i, rng.gen_range(0..=i));
                }
            }
            let keys = rows.concat();
            let query: Vec<f32> = (0..d).map(|_| rng.gen_range(-1.0f32..1.0) * qs).collect();
            let offsets = [rng.gen_range(-4.0..6.0)];
            (
                Case::new(
                    d,
                    Dtype::F32,
                    keys,
                    query,
                    1.0 / (d as f32).sqrt(),
                    &offsets,
                ),
                tau,
            )
        })
}

/// Keys from 1e-3 to 1e3 (one scale per case), a few local scores around the bulk mass.
fn plain_case(max_t: usize) -> impl Strategy<Value = (Case, f64)> {
    (
        1usize..17,
        1usize..max_t,
        -3i32..=3,
        any::<u64>(),
        0.01f64..0.99,
    )
        .prop_map(|(d, t, e, seed, tau)| {
            let mut rng = StdRng::seed_from_u64(seed);
            let s = 10f32.powi(e);
            let keys: Vec<f32> = (0..t * d)
                .map(|_| rng.gen_range(-1.0f32..1.0) * s + 0.3 * s)
                .collect();
            let query: Vec<f32> = (0..d).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
            let offsets: Vec<f64> = (0..3).map(|_| rng.gen_range(-5.0..8.0)).collect();
            (
                Case::new(
                    d,
                    Dtype::F32,
                    keys,
                    query,
                    1.0 / (d as f32).sqrt(),
                    &offsets,
                ),
                tau,
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The bound's `ln A_bulk` is never below the oracle's (as its f32 kernels compute it),
    /// so a head the bound calls local the oracle calls local.
    #[test]
    fn bound_is_never_below_the_oracle((case, page, tau) in bound_case()) {
        let input = case.input();
        let bound = Bound::log_bulk_mass(&input).unwrap();
        let exact = Oracle::log_bulk_mass(&input).unwrap();
        let b = Bound::new(tau, page).unwrap().decide(&input).unwrap();
        let o = Oracle::new(tau).unwrap().decide(&input).unwrap();
        if exact.is_nan() {
            prop_assert!(!b.local);
        } else {
            prop_assert!(bound >= exact, "bound {bound} < oracle {exact} ({:?}, d {}, page {page})", case.dtype, case.d);
        }
        prop_assert!(!b.local || o.local, "bound local (share {:?}), oracle long (share {:?})", b.log_local_share, o.log_local_share);
        // and the bound is the page bound, raised by a slack only
        let pages = case.pages.as_ref().unwrap().log_mass_upper_bound(&case.query, case.scale as f64).unwrap();
        prop_assert!(bound >= pages);
    }

    /// `k = 1` with the one cluster holding the bulk's keys is QAdA: the same decision and
    /// share (exactly, with the same moments; within 1e-9 through arrays, where QAdA's moments
    /// are computed apart).
    #[test]
    fn mixture_of_one_cluster_is_qada((mut case, tau) in plain_case(300)) {
        case.summarize(None, Some(1));
        let cluster = case.clusters.as_ref().unwrap().clusters()[0].clone();
        prop_assert_eq!(cluster.count() as usize, case.bulk_len());
        case.moments = cluster;
        let input = case.input();
        let mix = Mixture::new(tau, 1).unwrap().decide(&input).unwrap();
        let qada = Approx::new(tau).unwrap().decide(&input).unwrap();
        prop_assert_eq!(mix, qada);

        let (keys, local) = arrays(&case);
        let head = HeadQuery { query: case.query.as_slice().into(), local_keys: local.view(), bulk: Bulk::Keys(keys.view()), scale: Some(case.scale) };
        let mix = decide_query(&Mixture::new(tau, 1).unwrap(), &head).unwrap();
        let qada = decide_query(&Approx::new(tau).unwrap(), &head).unwrap();
        let (m, a) = (mix.log_local_share.unwrap(), qada.log_local_share.unwrap());
        prop_assert!((m - a).abs() < 1e-9, "mixture {m} vs approx {a}");
        prop_assert!(mix.local == qada.local || (a - tau.ln()).abs() < 1e-9);
    }

    /// On two well-separated blobs of keys, the mixture's `ln A_bulk_hat` is closer to the
    /// oracle's than QAdA's one Gaussian (which spreads one wide Gaussian over both).
    #[test]
    fn mixture_follows_two_blobs_better_than_qada((mut case, _tau) in blobs_case(), k in 2usize..=DEFAULT_CLUSTERS) {
        case.summarize(None, Some(k));
        let input = case.input();
        let exact = Oracle::log_bulk_mass(&input).unwrap();
        let mix = Mixture::log_bulk_mass(&input).unwrap();
        let qada = Approx::log_bulk_mass(&input).unwrap();
        prop_assert!((mix - exact).abs() <= (qada - exact).abs() + 1e-3, "k {k}: oracle {exact}, mixture {mix}, approx {qada}");
        prop_assert!((mix - exact).abs() < 0.05, "k {k}: oracle {exact}, mixture {mix}");
    }

    /// A local label of the hybrid is one of QAdA's; with an infinite margin it is the bound's
    /// wherever QAdA says local (and so never a head the oracle calls long); with margin 0 it
    /// is QAdA.
    #[test]
    fn hybrid_is_qada_checked_by_the_bound((case, page, tau) in bound_case(), margin in 0.0f64..4.0) {
        let input = case.input();
        let qada = Approx::new(tau).unwrap().decide(&input).unwrap();
        let bound = Bound::new(tau, page).unwrap().decide(&input).unwrap();
        let hybrid = Hybrid::new(tau, margin, page).unwrap().decide(&input).unwrap();
        prop_assert!(!hybrid.local || qada.local);
        let checked = Hybrid::new(tau, f64::INFINITY, page).unwrap().decide(&input).unwrap();
        if qada.local {
            prop_assert_eq!(checked, bound);
            prop_assert!(!checked.local || Oracle::new(tau).unwrap().decide(&input).unwrap().local);
        } else {
            prop_assert_eq!(checked, qada);
        }
        prop_assert_eq!(Hybrid::new(tau, 0.0, page).unwrap().decide(&input).unwrap(), qada);
        // the share reported is the one that decided
        prop_assert!(hybrid == qada || hybrid == bound);
    }

    /// From arrays, `decide_query` and `PreparedQuery::decide` build the summaries each
    /// criterion asks for and decide as from a `HeadInput` that carries them.
    #[test]
    fn the_three_decide_from_arrays((case, tau) in plain_case(200), page in 1usize..40, k in 1usize..6) {
        let (keys, local) = arrays(&case);
        let head = HeadQuery { query: case.query.as_slice().into(), local_keys: local.view(), bulk: Bulk::Keys(keys.view()), scale: Some(case.scale) };
        let prepared = PreparedQuery::new(&head).unwrap();
        let criteria: [Box<dyn LocalityCriterion>; 3] = [
            Box::new(Bound::new(tau, page).unwrap()),
            Box::new(Mixture::new(tau, k).unwrap()),
            Box::new(Hybrid::new(tau, DEFAULT_MARGIN, page).unwrap()),
        ];
        for c in &criteria {
            let want = c.bulk_summaries();
            let mut own = Case { local_scores: prepared.local_scores().to_vec(), moments: prepared.moments().clone(), ..case.clone_keys() };
            own.summarize(want.page, want.clusters);
            let direct = c.decide(&own.input()).unwrap();
            prop_assert_eq!(prepared.decide(c.as_ref()).unwrap(), direct, "{}", c.name());
            prop_assert_eq!(decide_query(c.as_ref(), &head).unwrap(), direct, "{}", c.name());
        }
    }
}

impl Case {
    /// The same keys and query, no summaries.
    fn clone_keys(&self) -> Case {
        Case {
            d: self.d,
            query: self.query.clone(),
            scale: self.scale,
            local_scores: self.local_scores.clone(),
            dtype: self.dtype,
            keys: self.keys.clone(),
            keys_f16: self.keys_f16.clone(),
            keys_q8: self.keys_q8.clone(),
            moments: self.moments.clone(),
            pages: None,
            clusters: None,
        }
    }
}

/// The case as arrays: bulk keys `T x d`, and local keys whose scores are the case's local
/// scores (one key per score, along the query: `k = s q / (scale |q|^2)`).
fn arrays(case: &Case) -> (Array2<f32>, Array2<f32>) {
    let d = case.d;
    let keys = Array2::from_shape_vec((case.bulk_len(), d), case.keys.clone()).unwrap();
    let q2: f32 = case.query.iter().map(|q| q * q).sum();
    let local: Vec<f32> = case
        .local_scores
        .iter()
        .flat_map(|&s| {
            case.query
                .iter()
                .map(move |&q| s * q / (case.scale * q2.max(1e-30)))
        })
        .collect();
    (
        keys,
        Array2::from_shape_vec((case.local_scores.len(), d), local).unwrap(),
    )
}

/// A head with a bulk of `t` keys along `-q` and one local key along `q`: clearly local.
fn clear_case(t: usize) -> Case {
    let d = 8;
    let query: Vec<f32> = (0..d)
        .map(|j| if j % 2 == 0 { 1.0 } else { -0.5 })
        .collect();
    let keys: Vec<f32> = (0..t)
        .flat_map(|i| {
            query
                .iter()
                .map(move |&q| -q * (1.0 + (i % 7) as f32 * 0.1))
        })
        .collect();
    Case::new(d, Dtype::F32, keys, query, 1.0 / (d as f32).sqrt(), &[12.0])
}

#[test]
fn each_criterion_says_local_where_the_local_mass_dominates() {
    let mut case = clear_case(500);
    case.summarize(Some(DEFAULT_PAGE), Some(DEFAULT_CLUSTERS));
    let input = case.input();
    for c in [
        Box::new(Bound::new(0.99, DEFAULT_PAGE).unwrap()) as Box<dyn LocalityCriterion>,
        Box::new(Mixture::new(0.99, DEFAULT_CLUSTERS).unwrap()),
        Box::new(Hybrid::new(0.99, DEFAULT_MARGIN, DEFAULT_PAGE).unwrap()),
    ] {
        let dec = c.decide(&input).unwrap();
        assert!(dec.local, "{}: {dec:?}", c.name());
    }
    // and long where the bulk dominates
    let mut case = clear_case(500);
    case.local_scores = vec![-30.0];
    case.summarize(Some(DEFAULT_PAGE), Some(DEFAULT_CLUSTERS));
    let input = case.input();
    assert!(!Bound::new(0.5, 4).unwrap().decide(&input).unwrap().local);
    assert!(!Mixture::new(0.5, 2).unwrap().decide(&input).unwrap().local);
    assert!(
        !Hybrid::new(0.5, 1.0, 4)
            .unwrap()
            .decide(&input)
            .unwrap()
            .local
    );
}

#[test]
fn missing_or_mismatched_summaries_are_errors_that_say_so() {
    let mut case = clear_case(50);
    let input = case.input();
    for c in [
        Box::new(Bound::new(0.9, 8).unwrap()) as Box<dyn LocalityCriterion>,
        Box::new(Mixture::new(0.9, 2).unwrap()),
    ] {
        let err = c.decide(&input).unwrap_err();
        assert!(matches!(err, CoreError::MissingBulkSummary { .. }), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains(c.name())
                && msg.contains("set_bulk_summaries")
                && msg.contains("PreparedQuery::decide"),
            "{msg}"
        );
    }
    // the hybrid needs pages only for a close local call of QAdA
    let err = Hybrid::new(0.9, f64::INFINITY, 8)
        .unwrap()
        .decide(&input)
        .unwrap_err();
    assert!(
        matches!(
            err,
            CoreError::MissingBulkSummary {
                criterion: "bound",
                ..
            }
        ),
        "{err}"
    );

    // pages of another number of keys than T_bulk: both numbers in the message
    let mut short = PageBounds::new(case.d, 8).unwrap();
    short
        .push_rows_of(Rows::F32(&case.keys[..40 * case.d]))
        .unwrap();
    case.pages = Some(short);
    let err = Bound::new(0.9, 8)
        .unwrap()
        .decide(&case.input())
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("50") && msg.contains("40") && msg.contains("T_bulk"),
        "{msg}"
    );
    // keys of another length than the query
    case.pages = Some(PageBounds::new(case.d + 1, 8).unwrap());
    assert!(matches!(
        Bound::new(0.9, 8).unwrap().decide(&case.input()),
        Err(CoreError::DimensionMismatch { .. })
    ));
    case.clusters = Some(ClusterMoments::new(case.d + 1, 2).unwrap());
    assert!(matches!(
        Mixture::new(0.9, 2).unwrap().decide(&case.input()),
        Err(CoreError::DimensionMismatch { .. })
    ));

    // an empty bulk needs no summary: local with share 1
    let mut empty = clear_case(0);
    empty.pages = None;
    for c in [
        Box::new(Bound::new(0.9, 8).unwrap()) as Box<dyn LocalityCriterion>,
        Box::new(Mixture::new(0.9, 2).unwrap()),
        Box::new(Hybrid::new(0.9, 1.0, 8).unwrap()),
    ] {
        assert_eq!(
            c.decide(&empty.input()).unwrap(),
            Decision {
                local: true,
                log_local_share: Some(0.0)
            }
        );
    }

    // moments only, from arrays: the summaries cannot be built
    let (_, local) = arrays(&clear_case(50));
    let head = HeadQuery {
        query: case.query.as_slice().into(),
        local_keys: local.view(),
        bulk: Bulk::Moments(&case.moments),
        scale: None,
    };
    assert!(matches!(
        decide_query(&Bound::new(0.9, 8).unwrap(), &head),
        Err(CoreError::MissingBulkSummary { .. })
    ));
    assert!(matches!(
        decide_query(&Mixture::new(0.9, 2).unwrap(), &head),
        Err(CoreError::MissingBulkSummary { .. })
    ));
}

#[test]
fn empty_clusters_with_a_bulk_mean_long() {
    let mut case = clear_case(50);
    case.clusters = Some(ClusterMoments::new(case.d, 3).unwrap());
    let dec = Mixture::new(0.1, 3).unwrap().decide(&case.input()).unwrap();
    assert!(!dec.local && dec.is_nonfinite());
}

#[test]
fn parameters_are_checked_and_costs_scale_as_stated() {
    assert!(matches!(
        Bound::new(0.5, 0),
        Err(CoreError::InvalidParameter { .. })
    ));
    assert!(matches!(
        Mixture::new(0.5, 0),
        Err(CoreError::InvalidParameter { .. })
    ));
    for m in [-1.0, f64::NAN] {
        assert!(matches!(
            Hybrid::new(0.5, m, 8),
            Err(CoreError::InvalidParameter { .. })
        ));
    }
    assert!(matches!(Bound::new(1.5, 8), Err(CoreError::InvalidTau(_))));
    // tau is in (0, 1]: 1 is the whole mass, just above it is refused
    assert!(Bound::new(1.0, 8).is_ok());
    assert!(matches!(
        Bound::new(1.0 + f64::EPSILON, 8),
        Err(CoreError::InvalidTau(_))
    ));
    let (b, m) = (Bound::new(0.5, 32).unwrap(), Mixture::new(0.5, 4).unwrap());
    // O(T d / P), O(k d^2)
    let flops = |c: &dyn LocalityCriterion, t: usize| c.decision_cost(64, t, t + 128).flops;
    assert_eq!(flops(&b, 3200), 4 * 64 * 100);
    assert_eq!(flops(&b, 3201), 4 * 64 * 101);
    assert_eq!(b.decision_cost(64, 3201, 0).bytes, 2 * 4 * 64 * 101);
    assert_eq!(flops(&m, 1 << 20), 4 * (64 * 64 + 4 * 64));
    assert_eq!(m.decision_cost(64, 1 << 20, 0).bytes, 0);
    let h = Hybrid::new(0.5, 1.0, 32).unwrap();
    assert_eq!(flops(&h, 3200), (64 * 64 + 4 * 64) + 4 * 64 * 100);
    assert_eq!(
        h.decision_cost(64, 3200, 0).bytes,
        b.decision_cost(64, 3200, 0).bytes
    );
    assert_eq!(b.bulk_summaries().page, Some(32));
    assert_eq!(m.bulk_summaries().clusters, Some(4));
    assert_eq!(h.bulk_summaries(), b.bulk_summaries());
    assert_eq!(
        (b.name(), m.name(), h.name()),
        ("bound", "mixture", "hybrid")
    );
}
