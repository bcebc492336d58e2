//! The configurations a sweep compares: dense and window (the two ends), the oracle and QAdA
//! (with current moments, and with calibration moments) over `tau`, static heads over
//! `alpha`. Dense is always first: every other configuration is judged against it.

use std::sync::Arc;

use qada_core::{Approx, Dense, LocalityCriterion, Oracle, Static, StaticTable, Window};
use qada_kv::MomentsMode;
use qada_model::{Session, SessionCheckpoint};
use qada_stats::MomentTable;

use crate::common::{fail, CliResult};

/// Every method `--methods` may name, in sweep order.
pub const METHODS: &[&str] = &[
    "dense",
    "window",
    "oracle",
    "approx-current",
    "approx-calibration",
    "static",
];

/// One point of a sweep.
pub struct Config {
    pub method: &'static str,
    pub param: Option<f64>,
    pub criterion: Arc<dyn LocalityCriterion>,
    /// QAdA with the calibration table's moments instead of the current bulk's.
    pub calibrated: bool,
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

/// The configurations of `methods`, over `taus` and `alphas`.
pub fn configs(
    methods: &[&'static str],
    taus: &[f64],
    alphas: &[f64],
    statics: Option<&StaticTable>,
) -> CliResult<Vec<Config>> {
    let one = |method, criterion: Arc<dyn LocalityCriterion>, param, calibrated| Config {
        method,
        param,
        criterion,
        calibrated,
    };
    let mut v = Vec::new();
    for &m in methods {
        match m {
            "dense" => v.push(one(m, Arc::new(Dense), None, false)),
            "window" => v.push(one(m, Arc::new(Window), None, false)),
            "oracle" => {
                for &t in taus {
                    v.push(one(m, Arc::new(Oracle::new(t)?), Some(t), false));
                }
            }
            "approx-current" | "approx-calibration" => {
                for &t in taus {
                    let calibrated = m == "approx-calibration";
                    v.push(one(m, Arc::new(Approx::new(t)?), Some(t), calibrated));
                }
            }
            "static" => {
                let Some(table) = statics else {
                    return fail("the static method needs a static table");
                };
                for &a in alphas {
                    v.push(one(
                        m,
                        Arc::new(Static::from_table(table, a)?),
                        Some(a),
                        false,
                    ));
                }
            }
            _ => return fail(format!("unknown method {m}")),
        }
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
        let c = configs(&["dense", "window", "oracle"], &[0.5, 0.9], &[], None).unwrap();
        let names: Vec<_> = c.iter().map(|c| (c.method, c.param)).collect();
        assert_eq!(
            names,
            [
                ("dense", None),
                ("window", None),
                ("oracle", Some(0.5)),
                ("oracle", Some(0.9))
            ]
        );
        assert!(configs(&["static"], &[], &[0.5], None).is_err());
        assert_eq!(
            parse_list::<usize>("--lengths", "1024, 2048").unwrap(),
            [1024, 2048]
        );
        assert!(parse_list::<f64>("--taus", "0.5,x").is_err());
    }
}
