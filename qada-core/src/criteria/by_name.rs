//! Criteria by name: the table-free criteria of this crate from a short name and their
//! parameters, as a command line or a Python call names them.
//!
//! `dense`, `window`, `oracle`, `approx` (QAdA), `bound`, `mixture`, `hybrid`, and the page
//! selections: `pages` (QAdA's gate, then top-p pages by their Gaussian estimate),
//! `certified` (QAdA's gate, then pages until the bounds prove the rest below `1 - tau`) and
//! `quest` (no gate: a fixed number of pages of largest bound), and their ceiling,
//! `pages-oracle` (the oracle's gate, then top-p pages by their exact mass), `channels`
//! (QAdA's gate, then top-p pages by scores from a few channels of the keys), and
//! `channels-ungated` (the same pages behind no gate: every head scored, a head whose window
//! holds `tau` of the estimated mass reads no page), `channels-union` (the `channels` pages,
//! each long head computing over its group's union of them: the same bytes). `static`
//! needs a calibrated table ([`StaticTable`](crate::StaticTable)), so it is built apart with
//! [`Static::from_table`](crate::Static::from_table); its name is an error here that says so.

use crate::criteria::{bound::DEFAULT_PAGE, hybrid::DEFAULT_MARGIN, mixture::DEFAULT_CLUSTERS};
use crate::{
    Approx, Bound, CoreError, Dense, HeadPages, Hybrid, LocalityCriterion, Mixture, Oracle,
    PageRule, Pages, Result, Window,
};

/// Tokens of the bulk Quest reads per head by default (its paper's smallest budget).
pub const DEFAULT_QUEST_TOKENS: usize = 1024;

/// Key channels the `channels` selection scores with by default: 8 of Qwen2.5-0.5B's 64
/// chose pages as well as the exact scores at 16k (docs/RESULTS.md).
pub const DEFAULT_CHANNELS: usize = 8;

/// The names [`by_name`] builds, in the order reports list them.
pub const CRITERION_NAMES: &[&str] = &[
    "dense",
    "window",
    "oracle",
    "approx",
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

/// The names of [`CRITERION_NAMES`] that select pages of the bulk per KV group (their
/// decisions come with a [`crate::PageSelection`]).
pub const SELECTING_NAMES: &[&str] = &[
    "pages",
    "certified",
    "quest",
    "pages-oracle",
    "channels",
    "channels-ungated",
    "channels-union",
];

/// What the accepted names are, for errors.
const EXPECTED: &str = "dense, window, oracle, approx, bound, mixture, hybrid, pages, certified, \
                        quest, pages-oracle, channels, channels-ungated or channels-union \
                        (static needs a \
                        table from `qada calibrate static`: StaticTable::load and \
                        Static::from_table)";

/// The parameters a criterion may read; each criterion takes the ones it has.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CriterionParams {
    /// Threshold on the local share, in (0, 1] (every criterion but dense and window).
    pub tau: f64,
    /// Bulk keys per page of the page bound or selection (bound, hybrid, pages, certified,
    /// quest).
    pub page: usize,
    /// Clusters of the bulk keys (mixture).
    pub clusters: usize,
    /// Nats of bulk mass within which QAdA's local call is checked by the bound (hybrid).
    pub margin: f64,
    /// Bulk tokens Quest reads per head (rounded up to whole pages).
    pub quest_tokens: usize,
    /// Key channels the `channels` selection scores every bulk key with.
    pub channels: usize,
}

impl Default for CriterionParams {
    /// `tau = 0.6` (the paper's), pages of [`DEFAULT_PAGE`], [`DEFAULT_CLUSTERS`] clusters,
    /// a margin of [`DEFAULT_MARGIN`].
    fn default() -> Self {
        CriterionParams {
            tau: 0.6,
            page: DEFAULT_PAGE,
            clusters: DEFAULT_CLUSTERS,
            margin: DEFAULT_MARGIN,
            quest_tokens: DEFAULT_QUEST_TOKENS,
            channels: DEFAULT_CHANNELS,
        }
    }
}

/// The criterion called `name`, with the parameters of `p` it reads.
///
/// # Errors
/// [`CoreError::UnknownName`] for a name not in [`CRITERION_NAMES`] (listing them);
/// [`CoreError::InvalidTau`] and [`CoreError::InvalidParameter`] for parameters out of range
/// (checked only for the criteria that read them).
pub fn by_name(name: &str, p: &CriterionParams) -> Result<Box<dyn LocalityCriterion>> {
    Ok(match name {
        "dense" => Box::new(Dense),
        "window" => Box::new(Window),
        "oracle" => Box::new(Oracle::new(p.tau)?),
        "approx" => Box::new(Approx::new(p.tau)?),
        "bound" => Box::new(Bound::new(p.tau, p.page)?),
        "mixture" => Box::new(Mixture::new(p.tau, p.clusters)?),
        "hybrid" => Box::new(Hybrid::new(p.tau, p.margin, p.page)?),
        // QAdA's gate (the oracle's for the ceiling), then pages by the rule
        "pages" => gated(Approx::new(p.tau)?, p, PageRule::Estimate)?,
        "certified" => gated(Approx::new(p.tau)?, p, PageRule::Certified)?,
        "channels" => gated(Approx::new(p.tau)?, p, PageRule::Channels(p.channels))?,
        "channels-ungated" => gated(Dense, p, PageRule::Channels(p.channels))?,
        "channels-union" => gated_over(
            Approx::new(p.tau)?,
            p,
            PageRule::Channels(p.channels),
            HeadPages::Union,
        )?,
        "pages-oracle" => gated(Oracle::new(p.tau)?, p, PageRule::Exact)?,
        "quest" => {
            if p.quest_tokens == 0 || p.page == 0 {
                return Err(CoreError::InvalidParameter {
                    what: "quest's tokens per head and page size",
                    expected: "at least 1",
                    found: 0.0,
                });
            }
            Box::new(Pages::new(
                Dense,
                p.tau,
                p.page,
                PageRule::TopK(p.quest_tokens.div_ceil(p.page)),
            )?)
        }
        other => {
            return Err(CoreError::UnknownName {
                what: "criterion",
                found: other.to_string(),
                expected: EXPECTED,
            })
        }
    })
}

/// `gate`, then pages of `p.page` keys chosen by `rule` at `p.tau`, each long head computing
/// over its own.
fn gated<C: LocalityCriterion + 'static>(
    gate: C,
    p: &CriterionParams,
    rule: PageRule,
) -> Result<Box<dyn LocalityCriterion>> {
    gated_over(gate, p, rule, HeadPages::Own)
}

/// [`gated`], each long head computing over `heads`' pages.
fn gated_over<C: LocalityCriterion + 'static>(
    gate: C,
    p: &CriterionParams,
    rule: PageRule,
    heads: HeadPages,
) -> Result<Box<dyn LocalityCriterion>> {
    Ok(Box::new(
        Pages::new(gate, p.tau, p.page, rule)?.computing_over(heads),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of the criteria with a threshold: all but dense and window.
    const WITH_TAU: &[&str] = &[
        "oracle",
        "approx",
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

    #[test]
    fn every_listed_name_builds_the_criterion_of_that_name() {
        for &name in CRITERION_NAMES {
            let c = by_name(name, &CriterionParams::default()).unwrap();
            assert_eq!(c.name(), name);
        }
    }

    #[test]
    fn the_selecting_names_are_criteria_with_pages() {
        for &name in SELECTING_NAMES {
            assert!(CRITERION_NAMES.contains(&name), "{name}");
            let c = by_name(name, &CriterionParams::default()).unwrap();
            assert!(c.bulk_summaries().page.is_some(), "{name} keeps no pages");
        }
    }

    #[test]
    fn parameters_reach_the_criterion() {
        let p = CriterionParams {
            tau: 0.3,
            page: 8,
            clusters: 2,
            margin: 0.5,
            quest_tokens: 64,
            channels: 4,
        };
        for &name in WITH_TAU {
            let c = by_name(name, &p).unwrap();
            assert_eq!(c.tau().map(|t| t.get()), Some(0.3), "{name}");
        }
        assert_eq!(by_name("bound", &p).unwrap().bulk_summaries().page, Some(8));
        assert_eq!(
            by_name("mixture", &p).unwrap().bulk_summaries().clusters,
            Some(2)
        );
        assert_eq!(
            by_name("hybrid", &p).unwrap().bulk_summaries().page,
            Some(8)
        );
        assert_eq!(by_name("dense", &p).unwrap().tau(), None);
    }

    #[test]
    fn unknown_names_list_the_known_ones_and_static_says_it_needs_a_table() {
        for name in ["magic", "static", "", "Approx"] {
            let e = by_name(name, &CriterionParams::default())
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains(&format!("{name:?}")), "{e}");
            for known in CRITERION_NAMES {
                assert!(e.contains(known), "{e} lacks {known}");
            }
            assert!(e.contains("static needs a table"), "{e}");
        }
    }

    #[test]
    fn parameters_out_of_range_are_errors_of_the_criteria_that_read_them() {
        let bad_tau = CriterionParams {
            tau: 1.5,
            ..CriterionParams::default()
        };
        for &name in WITH_TAU {
            assert!(matches!(
                by_name(name, &bad_tau),
                Err(CoreError::InvalidTau(_))
            ));
        }
        // dense and window have no threshold to check
        assert!(by_name("dense", &bad_tau).is_ok());
        assert!(by_name("window", &bad_tau).is_ok());
        let no_page = CriterionParams {
            page: 0,
            ..CriterionParams::default()
        };
        for name in [
            "bound",
            "pages",
            "certified",
            "quest",
            "pages-oracle",
            "channels",
            "channels-ungated",
            "channels-union",
        ] {
            assert!(matches!(
                by_name(name, &no_page),
                Err(CoreError::InvalidParameter { .. })
            ));
        }
        let no_clusters = CriterionParams {
            clusters: 0,
            ..CriterionParams::default()
        };
        assert!(by_name("mixture", &no_clusters).is_err());
        let no_channels = CriterionParams {
            channels: 0,
            ..CriterionParams::default()
        };
        assert!(by_name("channels", &no_channels).is_err());
        assert!(by_name("channels-ungated", &no_channels).is_err());
        assert!(by_name("channels-union", &no_channels).is_err());
        let bad_margin = CriterionParams {
            margin: -1.0,
            ..CriterionParams::default()
        };
        assert!(by_name("hybrid", &bad_margin).is_err());
    }
}
