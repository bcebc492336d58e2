//! The configurations a sweep compares: dense and window (the two ends), the oracle and QAdA
//! (with current moments, and with calibration moments) over `tau`, static heads over
//! `alpha`. Dense is always first: every other configuration is judged against it.
//! `dense-int8` is dense decoding with int8 activations (what `generate` and `bench` run by
//! default) from the same f32 checkpoint: the fast path's own drift from the exact one, the
//! floor beside which a criterion's drift reads.

use std::sync::Arc;

use qada_core::{
    by_name, Approx, Bound, CriterionParams, Dense, GroupMode, Grouped, Hybrid, LocalityCriterion,
    Mixture, Oracle, Reuse, ReusePages, Static, StaticTable, Window, SELECTING_NAMES,
};
use qada_core::{DEFAULT_CLUSTERS, DEFAULT_MARGIN, DEFAULT_QUEST_TOKENS};
use qada_kv::MomentsMode;
use qada_model::{ActPrecision, Session, SessionCheckpoint};
use qada_stats::MomentTable;

use crate::common::{fail, CliResult};

/// Dense decoding with int8 activations from the f32 checkpoint (the fast path's drift; the
/// yardstick of `calibrate tau --fidelity-rule int8`).
pub const DENSE_INT8: &str = "dense-int8";

/// Every method `--methods` may name, in sweep order.
pub const METHODS: &[&str] = &[
    "dense",
    DENSE_INT8,
    "window",
    "oracle",
    "approx-current",
    "approx-calibration",
    "static",
    "bound",
    "mixture",
    "hybrid",
    "pages",
    "certified",
    "quest",
    "pages-oracle",
    "channels",
    "channels-ungated",
    "channels-union",
];

/// Bulk tokens per head the `quest` method sweeps (its paper's budgets).
pub const QUEST_TOKENS: &[usize] = &[512, 1024, 2048, 4096];

/// One point of a sweep.
pub struct Config {
    /// The method's name, with `@all` or `@mass` when its heads decide per GQA group.
    pub method: String,
    pub param: Option<f64>,
    pub criterion: Arc<dyn LocalityCriterion>,
    /// QAdA with the calibration table's moments instead of the current bulk's.
    pub calibrated: bool,
    /// Activations of the decoding steps, when not the model's (`dense-int8`).
    pub activations: Option<ActPrecision>,
}

/// The methods of a comma-separated `--methods` list, in sweep order, dense always included.
pub fn parse_methods(list: &str) -> CliResult<Vec<&'static str>> {
    let asked: Vec<&str> = list.split(',').map(str::trim).collect();
    if let Some(bad) = asked.iter().find(|m| !METHODS.contains(m)) {
        return fail(format!(
            "--methods: unknown method {bad:?}; use some of {}",
            METHODS.join(", ")
        ));
    }
    Ok(METHODS
        .iter()
        .copied()
        .filter(|m| *m == "dense" || asked.contains(m))
        .collect())
}

/// A configuration before the group modes: method, criterion, parameter, calibrated.
type BaseConfig = (&'static str, Arc<dyn LocalityCriterion>, Option<f64>, bool);

/// The configurations of `methods`, over `taus` and `alphas`, each adaptive method once per
/// group mode of `groups` (`head` keeps the method's name; `all` and `mass` add `@all`,
/// `@mass`). Dense and window read the same bytes in every mode: they run once. `channels`
/// is the channel rule's `r`, `page` the keys per page of bound, hybrid and the page
/// selections (an error for 0).
pub fn configs(
    methods: &[&'static str],
    taus: &[f64],
    alphas: &[f64],
    statics: Option<&StaticTable>,
    groups: &[GroupMode],
    channels: usize,
    page: usize,
) -> CliResult<Vec<Config>> {
    if page == 0 {
        return fail("--page 0: a page holds at least one key; use 16 to 128 (default 32)");
    }
    let mut base: Vec<BaseConfig> = Vec::new();
    for &m in methods {
        match m {
            "dense" | DENSE_INT8 => base.push((m, Arc::new(Dense), None, false)),
            "window" => base.push((m, Arc::new(Window), None, false)),
            "oracle" => {
                for &t in taus {
                    base.push((m, Arc::new(Oracle::new(t)?), Some(t), false));
                }
            }
            "approx-current" | "approx-calibration" => {
                for &t in taus {
                    let calibrated = m == "approx-calibration";
                    base.push((m, Arc::new(Approx::new(t)?), Some(t), calibrated));
                }
            }
            "bound" => {
                for &t in taus {
                    base.push((m, Arc::new(Bound::new(t, page)?), Some(t), false));
                }
            }
            "mixture" => {
                for &t in taus {
                    base.push((
                        m,
                        Arc::new(Mixture::new(t, DEFAULT_CLUSTERS)?),
                        Some(t),
                        false,
                    ));
                }
            }
            "hybrid" => {
                for &t in taus {
                    let h = Hybrid::new(t, DEFAULT_MARGIN, page)?;
                    base.push((m, Arc::new(h), Some(t), false));
                }
            }
            m if SELECTING_NAMES.contains(&m) => {
                // the page selections as `by_name` builds them, at the selection's page: quest
                // over its token budgets (its tau is unused), the others over --taus
                let at = |tau, quest_tokens| CriterionParams {
                    tau,
                    page,
                    quest_tokens,
                    channels,
                    ..CriterionParams::default()
                };
                let points: Vec<(CriterionParams, f64)> = if m == "quest" {
                    QUEST_TOKENS
                        .iter()
                        .map(|&k| (at(0.5, k), k as f64))
                        .collect()
                } else {
                    let k = DEFAULT_QUEST_TOKENS;
                    taus.iter().map(|&t| (at(t, k), t)).collect()
                };
                for (p, param) in points {
                    base.push((m, Arc::from(by_name(m, &p)?), Some(param), false));
                }
            }
            "static" => {
                let Some(table) = statics else {
                    return fail("the static method needs a static table");
                };
                for &a in alphas {
                    base.push((m, Arc::new(Static::from_table(table, a)?), Some(a), false));
                }
            }
            _ => return fail(format!("unknown method {m}")),
        }
    }
    let mut v = Vec::new();
    for (method, criterion, param, calibrated) in base {
        let modes: &[GroupMode] = match method {
            "dense" | DENSE_INT8 | "window" | "quest" => &[GroupMode::Head],
            _ => groups,
        };
        for &g in modes {
            v.push(Config {
                method: match g {
                    GroupMode::Head => method.to_string(),
                    g => format!("{method}@{g}"),
                },
                param,
                criterion: match g {
                    GroupMode::Head => criterion.clone(),
                    g => Arc::new(Grouped::new(criterion.clone(), g)),
                },
                calibrated,
                activations: (method == DENSE_INT8).then_some(ActPrecision::Int8),
            });
        }
    }
    Ok(v)
}

/// `cfgs`, each page selection among them followed by the same selection with its choices
/// reused as each of `reuses` says ([`ReusePages`]), named as [`reuse_name`] says.
pub fn with_reuse(cfgs: Vec<Config>, reuses: &[Reuse]) -> Vec<Config> {
    let mut v = Vec::with_capacity(cfgs.len() * (1 + reuses.len()));
    for c in cfgs {
        let base = c.method.split('@').next().unwrap_or_default();
        let selecting = SELECTING_NAMES.contains(&base);
        let copies: Vec<Config> = reuses
            .iter()
            .filter(|_| selecting)
            .map(|&r| Config {
                method: reuse_name(&c.method, r),
                param: c.param,
                criterion: Arc::new(ReusePages::new(c.criterion.clone(), r)),
                calibrated: c.calibrated,
                activations: c.activations,
            })
            .collect();
        v.push(c);
        v.extend(copies);
    }
    v
}

/// `method` with its choices reused as `r` says: `METHOD+reuseN` (`N` steps), then `cC` for
/// the cosine `C` and `dX` for a drift `X` other than any.
fn reuse_name(method: &str, r: Reuse) -> String {
    let mut name = format!("{method}+reuse{}c{}", r.max_steps(), r.min_cosine());
    if r.max_drift() != f64::INFINITY {
        name += &format!("d{}", r.max_drift());
    }
    name
}

/// The reuses of a comma-separated `--reuse` list of `STEPS:COSINE` or
/// `STEPS:COSINE:DRIFT` (drift: any where none is given).
pub fn parse_reuses(list: &str) -> CliResult<Vec<Reuse>> {
    let mut v = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let bad = || {
            format!("--reuse: {item:?} is not STEPS:COSINE or STEPS:COSINE:DRIFT (4:0.95, 4:-1:2)")
        };
        let parts: Vec<&str> = item.split(':').map(str::trim).collect();
        let (steps, cosine, drift) = match parts[..] {
            [s, c] => (s, c, None),
            [s, c, x] => (s, c, Some(x)),
            _ => return fail(bad()),
        };
        let steps: u32 = steps.parse().map_err(|_| bad())?;
        let cosine: f64 = cosine.parse().map_err(|_| bad())?;
        let drift: f64 = match drift {
            None => f64::INFINITY,
            Some(x) => x.parse().map_err(|_| bad())?,
        };
        if steps == 0 {
            return fail(format!(
                "--reuse: {item:?} reuses for 0 steps; the selection without --reuse runs anyway"
            ));
        }
        v.push(Reuse::new(steps, cosine, drift).map_err(|e| format!("--reuse {item:?}: {e}"))?);
    }
    Ok(v)
}

/// Offset into the calibration table for a prompt of `t` tokens: the paper's 1024, or a
/// quarter of the prompt for prompts too short for it.
fn table_offset(t: usize) -> usize {
    1024.min(t / 4)
}

/// Restore `cp` and prepare the session for configuration `c`.
pub fn setup(
    session: &mut Session<'_>,
    cp: &SessionCheckpoint,
    c: &Config,
    table: Option<&Arc<MomentTable>>,
) -> CliResult<()> {
    session.restore(cp)?;
    let model = session.model().activations();
    session.set_decode_activations(c.activations.unwrap_or(model));
    session.set_criterion(Box::new(c.criterion.clone()))?;
    if c.calibrated {
        let Some(table) = table else {
            return fail("approx-calibration needs a moment table");
        };
        let offset = table_offset(session.len());
        session.set_moments_mode(MomentsMode::Calibration {
            table: table.clone(),
            offset,
        })?;
    }
    Ok(())
}

/// The group modes of a comma-separated `--groups` list, each once, in the order given.
pub fn parse_groups(list: &str) -> CliResult<Vec<GroupMode>> {
    let mut v: Vec<GroupMode> = Vec::new();
    for g in list.split(',').map(str::trim) {
        let g: GroupMode = g.parse().map_err(|e| format!("--groups: {e}"))?;
        if !v.contains(&g) {
            v.push(g);
        }
    }
    Ok(v)
}

/// Comma-separated numbers (`--taus`, `--alphas`, `--lengths`).
pub fn parse_list<T: std::str::FromStr>(flag: &str, list: &str) -> CliResult<Vec<T>> {
    list.split(',')
        .map(|x| {
            x.trim()
                .parse()
                .map_err(|_| format!("{flag}: {x:?} is not a number").into())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use qada_core::{DEFAULT_CHANNELS, DEFAULT_SELECT_PAGE};

    const P: usize = DEFAULT_SELECT_PAGE;

    #[test]
    fn reuses_follow_each_page_selection_and_bad_entries_say_why() {
        let r = parse_reuses("4:0.95, 8:-1:2").unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[1].max_steps(), r[1].min_cosine(), r[1].max_drift()),
            (8, -1.0, 2.0)
        );
        for bad in ["4", "0:0.9", "4:1.5", "4:0.9:-1", "x:0.9", "4:0.9:1:2"] {
            assert!(parse_reuses(bad).is_err(), "{bad}");
        }
        let all = [GroupMode::All];
        let c = configs(
            &["approx-current", "channels"],
            &[0.9],
            &[],
            None,
            &all,
            8,
            P,
        )
        .unwrap();
        let names: Vec<_> = with_reuse(c, &r).into_iter().map(|c| c.method).collect();
        assert_eq!(
            names,
            [
                "approx-current@all",
                "channels@all",
                "channels@all+reuse4c0.95",
                "channels@all+reuse8c-1d2"
            ]
        );
    }

    #[test]
    fn methods_keep_sweep_order_and_dense_and_reject_unknown_names() {
        assert_eq!(
            parse_methods("static,oracle").unwrap(),
            ["dense", "oracle", "static"]
        );
        assert!(parse_methods("approx")
            .unwrap_err()
            .to_string()
            .contains("unknown method \"approx\""));
        let head = [GroupMode::Head];
        let c = configs(
            &["dense", "window", "oracle"],
            &[0.5, 0.9],
            &[],
            None,
            &head,
            DEFAULT_CHANNELS,
            P,
        )
        .unwrap();
        let names: Vec<_> = c.iter().map(|c| (c.method.as_str(), c.param)).collect();
        assert_eq!(
            names,
            [
                ("dense", None),
                ("window", None),
                ("oracle", Some(0.5)),
                ("oracle", Some(0.9))
            ]
        );
        assert!(configs(&["static"], &[], &[0.5], None, &head, DEFAULT_CHANNELS, P).is_err());
        // dense-int8: dense's criterion, int8 decoding, once whatever the group modes
        let modes = [GroupMode::Head, GroupMode::All];
        let c = configs(&["dense", "dense-int8"], &[0.5], &[], None, &modes, 8, P).unwrap();
        let v: Vec<_> = c
            .iter()
            .map(|c| (c.method.as_str(), c.activations))
            .collect();
        assert_eq!(
            v,
            [("dense", None), ("dense-int8", Some(ActPrecision::Int8))]
        );
        assert_eq!(c[1].criterion.name(), "dense");
        // group modes: dense and window once, every adaptive setting once per mode
        let modes = [GroupMode::Head, GroupMode::All, GroupMode::Mass];
        let c = configs(
            &["dense", "window", "oracle"],
            &[0.5],
            &[],
            None,
            &modes,
            DEFAULT_CHANNELS,
            P,
        )
        .unwrap();
        let names: Vec<_> = c.iter().map(|c| c.method.as_str()).collect();
        assert_eq!(
            names,
            ["dense", "window", "oracle", "oracle@all", "oracle@mass"]
        );
        assert_eq!(
            parse_list::<usize>("--lengths", "1024, 2048").unwrap(),
            [1024, 2048]
        );
        assert!(parse_list::<f64>("--taus", "0.5,x").is_err());
    }

    #[test]
    fn page_selections_are_the_named_criteria_at_the_selection_page() {
        let c = configs(
            SELECTING_NAMES,
            &[0.8, 0.9],
            &[],
            None,
            &[GroupMode::Head],
            DEFAULT_CHANNELS,
            P,
        )
        .unwrap();
        for cfg in &c {
            assert_eq!(cfg.criterion.name(), cfg.method);
            assert_eq!(
                cfg.criterion.bulk_summaries().page,
                Some(DEFAULT_SELECT_PAGE)
            );
            let expected: Vec<Option<f64>> = if cfg.method == "quest" {
                QUEST_TOKENS.iter().map(|&k| Some(k as f64)).collect()
            } else {
                vec![Some(0.8), Some(0.9)]
            };
            assert!(
                expected.contains(&cfg.param),
                "{} {:?}",
                cfg.method,
                cfg.param
            );
            if cfg.method != "quest" {
                assert_eq!(cfg.criterion.tau().map(|t| t.get()), cfg.param);
            }
        }
        // every selection: quest once per budget, the others once per tau
        assert_eq!(
            c.len(),
            QUEST_TOKENS.len() + 2 * (SELECTING_NAMES.len() - 1)
        );
    }

    #[test]
    fn every_paged_method_runs_at_the_page_asked_and_page_0_is_refused() {
        let mut methods = vec!["bound", "hybrid"];
        methods.extend_from_slice(SELECTING_NAMES);
        for page in [16, 64] {
            let head = [GroupMode::Head];
            let c = configs(&methods, &[0.9], &[], None, &head, 16, page).unwrap();
            assert_eq!(c.len(), methods.len() - 1 + QUEST_TOKENS.len());
            for cfg in &c {
                assert_eq!(
                    cfg.criterion.bulk_summaries().page,
                    Some(page),
                    "{}",
                    cfg.method
                );
            }
        }
        let err = configs(&["channels"], &[0.9], &[], None, &[GroupMode::Head], 16, 0)
            .err()
            .map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("--page 0")));
    }
}
