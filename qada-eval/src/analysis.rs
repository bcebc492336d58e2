//! Measuring a criterion against the oracle: per-head probes of the exact and estimated masses,
//! and the statistics of the paper's Table 2 and Figure 7.
//!
//! A [`HeadProbe`] holds, for one query head at one step, `log A_local`, the exact
//! `log A_bulk` and the Gaussian estimate `log A_bulk_hat`. Every label at any `tau` follows
//! from these three numbers, so one decoding pass can be scored at many thresholds. A probe of
//! a criterion also holds `log A_missed`, the exact mass of the bulk rows the criterion's read
//! leaves out for the head (all of the bulk for a local head, the pages not chosen for a
//! head that selects pages): its share of the head's softmax mass is what the head's output
//! loses, the quantity `1 - tau` bounds.

use ndarray::Array2;
use qada_core::attention::{scores, KvSegments};
use qada_core::lse::{log_local_share, lse, lse2};
use qada_core::{CoreError, Decision, HeadInput, LocalityCriterion, Result, Tau};
use qada_core::{GroupRead, PageSelection};
use qada_stats::GaussianScore;
use statrs::statistics::{Data, OrderStatistics, Statistics};

/// The masses of one query head at one step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HeadProbe {
    /// Layer index.
    pub layer: usize,
    /// Query head index.
    pub head: usize,
    /// `T_bulk`.
    pub bulk_len: usize,
    /// `ln A_local = lse(s_I)`.
    pub log_local: f64,
    /// `ln A_bulk`, exact.
    pub log_bulk: f64,
    /// `ln A_bulk_hat = ln T_bulk + mu_s + sigma_s^2 / 2` (NaN without moments).
    pub log_bulk_hat: f64,
    /// `ln A_missed`: the exact mass of the bulk rows the probed criterion leaves out for
    /// this head (`-inf`: none; `log_bulk`: the whole bulk). NaN when no criterion was
    /// probed ([`probe_layer`]): then QAdA's label at the report's `tau` says.
    pub log_missed: f64,
}

impl HeadProbe {
    /// Exact log local share.
    pub fn oracle_share(&self) -> f64 {
        log_local_share(self.log_local, self.log_bulk)
    }
    /// Estimated log local share.
    pub fn approx_share(&self) -> f64 {
        log_local_share(self.log_local, self.log_bulk_hat)
    }
    /// The oracle's label at `tau`.
    pub fn oracle_local(&self, tau: Tau) -> bool {
        tau.is_local(self.oracle_share())
    }
    /// QAdA's label at `tau`.
    pub fn approx_local(&self, tau: Tau) -> bool {
        tau.is_local(self.approx_share())
    }
    /// The share of the head's exact softmax mass its read leaves out,
    /// `A_missed / (A_local + A_bulk)`: from `log_missed`, or, for a probe of QAdA's estimate
    /// alone, the whole bulk where its label at `tau` is local and nothing where it is long.
    pub fn missed_share(&self, tau: Tau) -> f64 {
        let log_missed = if !self.log_missed.is_nan() {
            self.log_missed
        } else if self.approx_local(tau) {
            self.log_bulk
        } else {
            return 0.0;
        };
        (log_missed - lse2(self.log_local, self.log_bulk)).exp()
    }
}

/// Probe every query head of a layer at one step (only when there is a bulk).
pub fn probe_layer(
    layer: usize,
    queries: &[f32],
    kv: &[KvSegments<'_>],
    scale: f32,
) -> Result<Vec<HeadProbe>> {
    let n_kv = kv.len();
    let d = kv.first().map_or(0, |k| k.dim);
    if n_kv == 0
        || d == 0
        || !queries.len().is_multiple_of(d)
        || !(queries.len() / d).is_multiple_of(n_kv)
    {
        return Err(CoreError::DimensionMismatch {
            what: "queries (n_heads x d) for the KV heads",
            expected: n_kv * d,
            found: queries.len(),
        });
    }
    let n_heads = queries.len() / d;
    let group = n_heads / n_kv;
    let mut out = Vec::with_capacity(n_heads);
    let mut local = Vec::new();
    let mut bulk = Vec::new();
    for h in 0..n_heads {
        let k = &kv[h / group];
        k.validate()?;
        if k.bulk_len() == 0 {
            continue;
        }
        let q = &queries[h * d..(h + 1) * d];
        let ns = k.sink_keys.n_rows(d);
        local.resize(k.local_len(), 0.0);
        scores(q, k.sink_keys, scale, &mut local[..ns]);
        scores(q, k.window_keys, scale, &mut local[ns..]);
        bulk.resize(k.bulk_len(), 0.0);
        scores(q, k.bulk_keys, scale, &mut bulk);
        let log_bulk_hat = if k.bulk_moments.count() == 0 {
            f64::NAN
        } else {
            GaussianScore::new(q, k.bulk_moments, scale as f64)?.log_bulk_mass(k.bulk_len())
        };
        out.push(HeadProbe {
            layer,
            head: h,
            bulk_len: k.bulk_len(),
            log_local: lse(&local),
            log_bulk: lse(&bulk),
            log_bulk_hat,
            log_missed: f64::NAN,
        });
    }
    Ok(out)
}

/// As [`probe_layer`], with `log_bulk_hat` the bulk mass `criterion` estimates instead of
/// QAdA's: from the log local share `r` it reports, `ln A_bulk_hat = L + ln(e^-r - 1)` (so the
/// probe's share is `r` again). A criterion that computes no share (window, static) gives its
/// label instead: `-inf` (local at every `tau`) or `+inf` (long). The criterion decides each
/// KV group as attention would have it decide ([`LocalityCriterion::select_group`]: local
/// scores, moments, bulk keys and the segments' summaries), and `log_missed` is the exact
/// mass of what its read leaves out per head. A criterion whose estimate depends on `tau`
/// (hybrid, pages) is exact at its own `tau` only.
pub fn probe_layer_with<C: LocalityCriterion + ?Sized>(
    layer: usize,
    queries: &[f32],
    kv: &[KvSegments<'_>],
    scale: f32,
    criterion: &C,
) -> Result<Vec<HeadProbe>> {
    let mut probes = probe_layer(layer, queries, kv, scale)?;
    let d = kv.first().map_or(0, |k| k.dim);
    let group = queries.len() / d / kv.len();
    let mut local = vec![Vec::new(); group];
    let mut bulk = Vec::new();
    let mut decisions = vec![Decision::LONG; group];
    let mut selection = PageSelection::new();
    for (g, k) in kv.iter().enumerate() {
        if k.bulk_len() == 0 {
            continue;
        }
        let ns = k.sink_keys.n_rows(d);
        for (j, s) in local.iter_mut().enumerate() {
            let q = &queries[(g * group + j) * d..(g * group + j + 1) * d];
            s.resize(k.local_len(), 0.0);
            scores(q, k.sink_keys, scale, &mut s[..ns]);
            scores(q, k.window_keys, scale, &mut s[ns..]);
        }
        let inputs: Vec<HeadInput<'_>> = (0..group)
            .map(|j| HeadInput {
                layer,
                head: g * group + j,
                query: &queries[(g * group + j) * d..(g * group + j + 1) * d],
                scale,
                local_scores: &local[j],
                bulk_len: k.bulk_len(),
                bulk_moments: k.bulk_moments,
                bulk_keys: k.bulk_keys,
                bulk_pages: k.bulk_pages,
                bulk_clusters: k.bulk_clusters,
            })
            .collect();
        let read = criterion.select_group(&inputs, &mut decisions, &mut selection)?;
        for (j, decision) in decisions.iter().enumerate() {
            let h = g * group + j;
            let Some(p) = probes.iter_mut().find(|p| p.head == h) else {
                continue;
            };
            p.log_bulk_hat = match decision.log_local_share {
                Some(r) if r < 0.0 => p.log_local + (-r).exp_m1().ln(),
                // the whole mass local: no bulk mass at all
                Some(0.0) => f64::NEG_INFINITY,
                Some(_) => f64::NAN,
                // no mass computed (window, static): the label itself, at every tau
                None if decision.local => f64::NEG_INFINITY,
                None => f64::INFINITY,
            };
            p.log_missed = match read {
                GroupRead::Local => p.log_bulk,
                _ if decision.local => p.log_bulk,
                GroupRead::Full => f64::NEG_INFINITY,
                GroupRead::Selected => {
                    // the bulk's scores with the rows of the head's pages set to -inf
                    bulk.resize(k.bulk_len(), 0.0);
                    scores(inputs[j].query, k.bulk_keys, scale, &mut bulk);
                    for (page, mask) in selection.pages() {
                        if j < 64 && mask & (1 << j) != 0 {
                            let (r0, r1) = selection.rows(page, k.bulk_len());
                            bulk[r0..r1].fill(f32::NEG_INFINITY);
                        }
                    }
                    lse(&bulk)
                }
            };
        }
    }
    Ok(probes)
}

/// Mean, median, quartiles and standard deviation of a sample (NaN for an empty one), by
/// `statrs`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// Arithmetic mean.
    pub mean: f64,
    /// Median (the mean of the two middle values for an even count).
    pub median: f64,
    /// Lower quartile (`statrs`' quantile 0.25: the median-unbiased estimator, R's type 8).
    pub q25: f64,
    /// Upper quartile (quantile 0.75, the same estimator).
    pub q75: f64,
    /// Population standard deviation.
    pub std: f64,
    /// Sample size (finite values only).
    pub count: usize,
}

impl Summary {
    /// Summarize the finite values of `xs`.
    pub fn of(xs: impl IntoIterator<Item = f64>) -> Self {
        let v: Vec<f64> = xs.into_iter().filter(|x| x.is_finite()).collect();
        let n = v.len();
        if n == 0 {
            return Summary {
                mean: f64::NAN,
                median: f64::NAN,
                q25: f64::NAN,
                q75: f64::NAN,
                std: f64::NAN,
                count: 0,
            };
        }
        let (mean, std) = (v.iter().mean(), v.iter().population_std_dev());
        let mut data = Data::new(v);
        Summary {
            mean,
            median: data.median(),
            q25: data.lower_quartile(),
            q75: data.upper_quartile(),
            std,
            count: n,
        }
    }
}

/// How QAdA's labels agree with the oracle's; the positive class is long-context.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Agreement {
    /// Both long.
    pub both_long: u64,
    /// Both local.
    pub both_local: u64,
    /// Oracle long, approx local (a missed long-context head).
    pub missed_long: u64,
    /// Oracle local, approx long (a lost saving).
    pub false_long: u64,
}

impl Agreement {
    /// Fraction of equal labels.
    pub fn accuracy(&self) -> f64 {
        ratio(self.both_long + self.both_local, self.total())
    }
    /// Of the oracle's long-context labels, the fraction approx also calls long.
    pub fn recall_long(&self) -> f64 {
        ratio(self.both_long, self.both_long + self.missed_long)
    }
    /// Of approx's long-context labels, the fraction the oracle also calls long.
    pub fn precision_long(&self) -> f64 {
        ratio(self.both_long, self.both_long + self.false_long)
    }
    /// Labels compared.
    pub fn total(&self) -> u64 {
        self.both_long + self.both_local + self.missed_long + self.false_long
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    ratio_f(a as f64, b)
}

fn ratio_f(a: f64, b: u64) -> f64 {
    if b == 0 {
        f64::NAN
    } else {
        a / b as f64
    }
}

/// Everything `qada analyze` reports, from probes at one `tau`.
#[derive(Clone, Debug)]
pub struct Report {
    /// The threshold.
    pub tau: f64,
    /// Probes scored.
    pub count: usize,
    /// Fraction labeled local by the oracle.
    pub frac_local_oracle: f64,
    /// Fraction labeled local by QAdA.
    pub frac_local_approx: f64,
    /// Label agreement.
    pub agreement: Agreement,
    /// `|log A_bulk - log A_bulk_hat|`.
    pub log_error_gauss: Summary,
    /// `|log A_bulk - log A_local|`.
    pub log_gap_bulk_local: Summary,
    /// Per layer, fraction local by the oracle.
    pub per_layer_frac_local_oracle: Vec<f64>,
    /// Per layer, fraction local by QAdA.
    pub per_layer_frac_local_approx: Vec<f64>,
    /// Per (layer, head), long-context frequency by the oracle (layer-major).
    pub per_head_frac_long_oracle: Vec<f64>,
    /// Per (layer, head), long-context frequency by QAdA (layer-major).
    pub per_head_frac_long_approx: Vec<f64>,
    /// Per (layer, head), fraction of probes where QAdA's label equals the oracle's
    /// (layer-major).
    pub per_head_agreement: Vec<f64>,
    /// The share of each head's exact softmax mass its read leaves out
    /// ([`HeadProbe::missed_share`]).
    pub missed_share: Summary,
    /// The largest missed share.
    pub missed_share_max: f64,
    /// Fraction of probes whose missed share exceeds `1 - tau`: the budget broken.
    pub frac_over_budget: f64,
    /// Per layer, the mean missed share.
    pub per_layer_missed_share: Vec<f64>,
    /// Layers and heads per layer of the per-head tables.
    pub shape: (usize, usize),
}

impl Report {
    /// Score probes at `tau` for a model of `n_layers x n_heads` query heads.
    pub fn new(probes: &[HeadProbe], tau: Tau, n_layers: usize, n_heads: usize) -> Self {
        let mut ag = Agreement::default();
        let mut n = vec![0u64; n_layers * n_heads];
        let mut long_o = vec![0u64; n_layers * n_heads];
        let mut long_a = vec![0u64; n_layers * n_heads];
        let mut same = vec![0u64; n_layers * n_heads];
        let mut missed_sum = vec![0f64; n_layers];
        let mut missed_n = vec![0u64; n_layers];
        let missed: Vec<f64> = probes.iter().map(|p| p.missed_share(tau)).collect();
        for (p, &m) in probes.iter().zip(&missed) {
            if p.layer < n_layers && m.is_finite() {
                missed_sum[p.layer] += m;
                missed_n[p.layer] += 1;
            }
        }
        let budget = 1.0 - tau.get();
        let over = missed.iter().filter(|&&m| m > budget).count();
        for p in probes {
            let (o, a) = (p.oracle_local(tau), p.approx_local(tau));
            match (o, a) {
                (false, false) => ag.both_long += 1,
                (true, true) => ag.both_local += 1,
                (false, true) => ag.missed_long += 1,
                (true, false) => ag.false_long += 1,
            }
            if let Some(i) =
                (p.layer < n_layers && p.head < n_heads).then(|| p.layer * n_heads + p.head)
            {
                n[i] += 1;
                long_o[i] += !o as u64;
                long_a[i] += !a as u64;
                same[i] += (o == a) as u64;
            }
        }
        let frac = |c: &[u64], t: &[u64]| -> f64 {
            let (c, t): (u64, u64) = (c.iter().sum(), t.iter().sum());
            if t == 0 {
                f64::NAN
            } else {
                c as f64 / t as f64
            }
        };
        let per_head = |c: &[u64]| -> Vec<f64> {
            c.iter()
                .zip(&n)
                .map(|(&c, &t)| {
                    if t == 0 {
                        f64::NAN
                    } else {
                        c as f64 / t as f64
                    }
                })
                .collect()
        };
        let per_layer_local = |long: &[u64]| -> Vec<f64> {
            (0..n_layers)
                .map(|l| {
                    let r = l * n_heads..(l + 1) * n_heads;
                    1.0 - frac(&long[r.clone()], &n[r])
                })
                .collect()
        };
        Report {
            tau: tau.get(),
            count: probes.len(),
            frac_local_oracle: 1.0 - frac(&long_o, &n),
            frac_local_approx: 1.0 - frac(&long_a, &n),
            agreement: ag,
            log_error_gauss: Summary::of(
                probes.iter().map(|p| (p.log_bulk - p.log_bulk_hat).abs()),
            ),
            log_gap_bulk_local: Summary::of(
                probes.iter().map(|p| (p.log_bulk - p.log_local).abs()),
            ),
            per_layer_frac_local_oracle: per_layer_local(&long_o),
            per_layer_frac_local_approx: per_layer_local(&long_a),
            per_head_frac_long_oracle: per_head(&long_o),
            per_head_frac_long_approx: per_head(&long_a),
            per_head_agreement: per_head(&same),
            missed_share: Summary::of(missed.iter().copied()),
            missed_share_max: missed
                .iter()
                .copied()
                .filter(|m| m.is_finite())
                .fold(f64::NAN, f64::max),
            frac_over_budget: ratio(over as u64, probes.len() as u64),
            per_layer_missed_share: missed_sum
                .iter()
                .zip(&missed_n)
                .map(|(&s, &n)| ratio_f(s, n))
                .collect(),
            shape: (n_layers, n_heads),
        }
    }
}

/// A layer-major table of `shape.0 x shape.1` values as an array (NaN where it is short).
fn table(shape: (usize, usize), v: &[f64], f: impl Fn(f64) -> f64) -> Array2<f64> {
    Array2::from_shape_fn(shape, |(l, h)| {
        v.get(l * shape.1 + h).map_or(f64::NAN, |&x| f(x))
    })
}

impl Report {
    /// Per (layer, head), the fraction of probes the oracle labels local (`layers x heads`;
    /// NaN for a head never probed).
    pub fn oracle_local_fraction(&self) -> Array2<f64> {
        table(self.shape, &self.per_head_frac_long_oracle, |x| 1.0 - x)
    }
    /// Per (layer, head), the fraction of probes QAdA labels local.
    pub fn approx_local_fraction(&self) -> Array2<f64> {
        table(self.shape, &self.per_head_frac_long_approx, |x| 1.0 - x)
    }
    /// Per (layer, head), the fraction of probes where QAdA agrees with the oracle.
    pub fn agreement_per_head(&self) -> Array2<f64> {
        table(self.shape, &self.per_head_agreement, |x| x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_a_known_sample() {
        let s = Summary::of([3.0, 1.0, 2.0, f64::NAN, 4.0]);
        assert_eq!((s.mean, s.median, s.count), (2.5, 2.5, 4));
        assert!((s.std - 1.25f64.sqrt()).abs() < 1e-12);
        assert!(Summary::of([]).mean.is_nan());
        // type-8 quartiles of 1..=4: h = (n + 1/3) p + 1/3
        assert!((s.q25 - 17.0 / 12.0).abs() < 1e-12, "{}", s.q25);
        assert!((s.q75 - 43.0 / 12.0).abs() < 1e-12, "{}", s.q75);
        let odd = Summary::of([5.0, -1.0, 2.0]);
        assert_eq!((odd.median, odd.mean, odd.count), (2.0, 2.0, 3));
        assert!((odd.std - 6.0f64.sqrt()).abs() < 1e-12);
    }

    /// The hand-written summary statrs replaced: sorted median, two-pass population variance.
    fn summary_by_hand(xs: &[f64]) -> (f64, f64, f64) {
        let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
        let n = v.len();
        v.sort_by(f64::total_cmp);
        let mean = v.iter().sum::<f64>() / n as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            0.5 * (v[n / 2 - 1] + v[n / 2])
        };
        (mean, median, var.sqrt())
    }

    proptest::proptest! {
        #[test]
        fn summary_equals_the_hand_written_one(
            xs in proptest::collection::vec(-1e3f64..1e3, 1..60),
        ) {
            let s = Summary::of(xs.iter().copied());
            let (mean, median, std) = summary_by_hand(&xs);
            proptest::prop_assert_eq!(s.median, median);
            proptest::prop_assert!((s.mean - mean).abs() <= 1e-9 * (1.0 + mean.abs()));
            proptest::prop_assert!((s.std - std).abs() <= 1e-9 * (1.0 + std));
            proptest::prop_assert!(s.q25 <= s.median && s.median <= s.q75);
        }
    }

    #[test]
    fn report_counts_agreement_with_long_as_positive() {
        let p = |layer, head, log_local: f64, log_bulk: f64, log_bulk_hat: f64| HeadProbe {
            layer,
            head,
            bulk_len: 10,
            log_local,
            log_bulk,
            log_bulk_hat,
            log_missed: f64::NAN,
        };
        let tau = Tau::new(0.5).unwrap();
        let probes = [
            p(0, 0, 0.0, -5.0, -5.0), // both local
            p(0, 1, 0.0, 5.0, 5.0),   // both long
            p(1, 0, 0.0, 5.0, -5.0),  // approx misses a long head
            p(1, 1, 0.0, -5.0, 5.0),  // approx calls a local head long
        ];
        let r = Report::new(&probes, tau, 2, 2);
        assert_eq!(
            r.agreement,
            Agreement {
                both_long: 1,
                both_local: 1,
                missed_long: 1,
                false_long: 1
            }
        );
        assert_eq!(r.agreement.accuracy(), 0.5);
        assert_eq!(r.agreement.recall_long(), 0.5);
        assert_eq!(r.agreement.precision_long(), 0.5);
        assert_eq!(r.frac_local_oracle, 0.5);
        assert_eq!(r.per_layer_frac_local_oracle, vec![0.5, 0.5]);
        assert_eq!(r.per_layer_frac_local_approx, vec![0.5, 0.5]);
        assert_eq!(r.per_head_frac_long_oracle, vec![0.0, 1.0, 1.0, 0.0]);
        assert_eq!(r.log_error_gauss.median, 5.0);
        assert_eq!(r.log_gap_bulk_local.mean, 5.0);
        // QAdA's labels: the local heads miss their bulk, e^-5 / (1 + e^-5) and
        // e^5 / (1 + e^5) of their mass; the second breaks the budget of 0.5
        let (small, large) = (1.0 / (1.0 + 5f64.exp()), 1.0 / (1.0 + (-5f64).exp()));
        assert_eq!(r.frac_over_budget, 0.25);
        assert!((r.missed_share_max - large).abs() < 1e-12);
        assert!((r.per_layer_missed_share[0] - small / 2.0).abs() < 1e-12);
        assert!((r.per_layer_missed_share[1] - large / 2.0).abs() < 1e-12);
        let o = r.oracle_local_fraction();
        assert_eq!(o.dim(), (2, 2));
        assert_eq!(
            o.iter().copied().collect::<Vec<_>>(),
            vec![1.0, 0.0, 0.0, 1.0]
        );
        let a = r.approx_local_fraction();
        assert_eq!(
            a.iter().copied().collect::<Vec<_>>(),
            vec![1.0, 0.0, 1.0, 0.0]
        );
        assert_eq!(
            r.agreement_per_head().iter().copied().collect::<Vec<_>>(),
            vec![1.0, 1.0, 0.0, 0.0]
        );
    }

    #[test]
    fn per_head_tables_are_nan_for_heads_never_probed() {
        let tau = Tau::new(0.5).unwrap();
        let r = Report::new(&[], tau, 2, 3);
        let o = r.oracle_local_fraction();
        assert_eq!(o.dim(), (2, 3));
        assert!(o.iter().all(|x| x.is_nan()));
    }
}
