//! A decoding setting: which criterion decides, its threshold and parameters, and the
//! evidence that it keeps quality within a budget of dense attention.
//!
//! `qada calibrate tau --budget B` writes one from calibration text only; `generate` and
//! `bench` take it with `--setting FILE`. Each model the setup script fetches ships one
//! (`qada-cli/settings/NAME.json`, compiled in): `generate` uses it when no `--criterion` is
//! given, and says so. Where calibration found no setting within the budget, the shipped
//! setting is dense, so the default never loses quality silently.

use serde::{Deserialize, Serialize};

use qada_model::Model;

use crate::error::{fail, CliResult};

/// The `format` field this build reads and writes.
pub const FORMAT: &str = "qada-setting/1";

/// The settings shipped per model: short name and file contents.
pub const SHIPPED: &[(&str, &str)] = &[
    (
        "smollm2-135m",
        include_str!("../settings/smollm2-135m.json"),
    ),
    (
        "qwen2.5-0.5b",
        include_str!("../settings/qwen2.5-0.5b.json"),
    ),
    ("gemma3-270m", include_str!("../settings/gemma3-270m.json")),
    (
        "qwen2.5-1.5b",
        include_str!("../settings/qwen2.5-1.5b.json"),
    ),
];

/// The facts that decide whether a setting was made for a model.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ModelId {
    pub architecture: String,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
}

impl ModelId {
    pub fn of(model: &Model) -> Self {
        let c = model.config();
        ModelId {
            architecture: c.family.name.to_string(),
            n_layers: c.n_layers,
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            head_dim: c.head_dim,
            vocab_size: c.vocab_size,
        }
    }
}

/// How a setting did on one calibration task, over the lengths where dense reaches the gate.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Evidence {
    pub task: String,
    /// `accuracy` for answer-scored tasks, `top1_agreement` for fidelity.
    pub metric: String,
    pub dense: f64,
    pub value: f64,
    /// The lower confidence bound the budget was checked on, where it was not `value`.
    #[serde(default)]
    pub lower: Option<f64>,
    /// K/V bytes read relative to dense.
    pub kv_bytes: f64,
    /// Answers or steps behind the value.
    pub count: u64,
    /// Fidelity's mean `KL(dense || setting)` a step, where recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kl: Option<f64>,
    /// What fidelity was judged against instead of dense alone (`--fidelity-rule int8`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub yardstick: Option<Yardstick>,
}

/// The path a setting's fidelity was held to: its top-1 agreement with dense and mean KL on
/// the same steps (int8 activations: `dense-int8`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Yardstick {
    pub method: String,
    pub top1_agreement: f64,
    pub kl: f64,
}

impl Evidence {
    /// Whether the evidence keeps `budget`: against the yardstick where there is one (KL at
    /// most its, top-1 agreement at least its less the budget), else the checked value (the
    /// lower bound, or the value) at least dense's less the budget.
    pub fn keeps(&self, budget: f64) -> bool {
        match (&self.yardstick, self.kl) {
            (Some(y), Some(kl)) => kl <= y.kl && self.value >= y.top1_agreement - budget,
            (Some(_), None) => false,
            (None, _) => self.lower.unwrap_or(self.value) >= self.dense - budget,
        }
    }
}

fn default_min_saving() -> f64 {
    0.05
}

fn default_channels() -> usize {
    qada_core::DEFAULT_CHANNELS
}

/// One method's cheapest threshold within the budget.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct MethodBest {
    /// The sweep's name: `hybrid`, `mixture@all`, `approx-current`, ...
    pub method: String,
    /// `None` where no threshold tried kept the budget.
    pub tau: Option<f64>,
    pub kv_bytes: Option<f64>,
}

/// A criterion with its parameters, and why it was chosen.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Setting {
    pub format: String,
    /// Short name or file name of the model it was calibrated on.
    pub model_name: String,
    pub model: ModelId,
    /// A `--criterion` name: dense, approx, bound, mixture, hybrid, pages, certified,
    /// channels, channels-ungated or channels-union.
    pub criterion: String,
    pub tau: Option<f64>,
    /// A `--group` mode: head, all or mass.
    pub group: String,
    pub page: usize,
    /// Key channels the channel rule scores with (files older than it have none: the
    /// default).
    #[serde(default = "default_channels")]
    pub channels: usize,
    pub clusters: usize,
    pub margin: f64,
    /// The context length from which the criterion decides; dense below it (`None`: from
    /// the first token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dense_below: Option<usize>,
    pub sink: usize,
    pub local: usize,
    /// Largest drop below dense allowed on any calibration task.
    pub budget: f64,
    /// Smallest share of dense's K/V bytes a setting had to save to be chosen over dense.
    #[serde(default = "default_min_saving")]
    pub min_saving: f64,
    /// K/V bytes read relative to dense, mean over the calibration tasks.
    pub kv_bytes: f64,
    pub evidence: Vec<Evidence>,
    /// Settings tried, dense included.
    pub tried: usize,
    /// Every method's cheapest threshold within the budget.
    pub per_method: Vec<MethodBest>,
    /// How it was made: command, corpus part, lengths, samples.
    pub made_by: String,
}

impl Setting {
    /// Parse a setting file's text; `source` names it in errors.
    pub fn parse(text: &str, source: &str) -> CliResult<Self> {
        let s: Setting = serde_json::from_str(text)
            .map_err(|e| format!("{source}: not a qada setting file: {e}"))?;
        if s.format != FORMAT {
            return fail(format!(
                "{source}: format {:?}, this build reads {FORMAT:?}; make it again with `qada \
                 calibrate tau`",
                s.format
            ));
        }
        Ok(s)
    }

    /// Read a setting file made for `model`.
    pub fn load(path: &std::path::Path, model: &Model) -> CliResult<Self> {
        let source = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read setting file {source}: {e}"))?;
        let s = Self::parse(&text, &source)?;
        s.check_model(model, &source)?;
        Ok(s)
    }

    /// Refuse a setting calibrated on another model.
    pub fn check_model(&self, model: &Model, source: &str) -> CliResult<()> {
        let id = ModelId::of(model);
        if self.model != id {
            return fail(format!(
                "{source}: calibrated for {} ({:?}), the model is {id:?}: calibrate this model \
                 with `qada calibrate tau`",
                self.model_name, self.model
            ));
        }
        Ok(())
    }

    /// The setting shipped for `model`, if one is.
    pub fn shipped(model: &Model) -> CliResult<Option<(&'static str, Self)>> {
        let id = ModelId::of(model);
        for (name, text) in SHIPPED {
            let s = Self::parse(text, &format!("shipped setting {name}"))?;
            if s.model == id {
                return Ok(Some((name, s)));
            }
        }
        Ok(None)
    }

    /// One line: the criterion and its parameters.
    pub fn describe(&self) -> String {
        let what = self.describe_criterion();
        match self.dense_below {
            Some(n) if self.criterion != "dense" => {
                format!("dense below {n} tokens of context, then {what}")
            }
            _ => what,
        }
    }

    /// The criterion and its parameters, without the context it starts at.
    fn describe_criterion(&self) -> String {
        match (self.criterion.as_str(), self.tau) {
            ("dense", _) | (_, None) => self.criterion.clone(),
            (c @ ("channels" | "channels-ungated" | "channels-union"), Some(t)) => format!(
                "{c} at tau {t}, group {}, pages of {} keys scored from {} channels",
                self.group, self.page, self.channels
            ),
            ("pages" | "certified", Some(t)) => format!(
                "{} at tau {t}, group {}, pages of {} keys",
                self.criterion, self.group, self.page
            ),
            (c, Some(t)) => format!("{c} at tau {t}, group {}", self.group),
        }
    }

    /// Why this setting: what calibration measured.
    pub fn why(&self) -> String {
        let evidence: Vec<String> = self
            .evidence
            .iter()
            .map(|e| match (&e.yardstick, e.lower) {
                (Some(y), _) => format!(
                    "{} {} {:.3}, KL {:.2e} a step ({} {:.3}, KL {:.2e})",
                    e.task,
                    e.metric,
                    e.value,
                    e.kl.unwrap_or(f64::NAN),
                    y.method,
                    y.top1_agreement,
                    y.kl
                ),
                (None, Some(l)) => format!(
                    "{} {} {:.3}, lower bound {l:.3} (dense {:.3})",
                    e.task, e.metric, e.value, e.dense
                ),
                (None, None) => format!(
                    "{} {} {:.3} (dense {:.3})",
                    e.task, e.metric, e.value, e.dense
                ),
            })
            .collect();
        if self.criterion == "dense" {
            let cheapest = self
                .per_method
                .iter()
                .filter_map(|m| Some((m, m.tau?, m.kv_bytes?)))
                .min_by(|a, b| a.2.total_cmp(&b.2));
            match cheapest {
                Some((m, t, kv)) => format!(
                    "the cheapest of {} settings tried {} on calibration text ({} at tau {t}) \
                     reads {kv:.3}x dense: less than the {} saving a setting must bring",
                    self.tried.saturating_sub(1),
                    self.kept(),
                    m.method,
                    self.min_saving
                ),
                None => format!(
                    "none of {} settings tried stayed {} on calibration text",
                    self.tried.saturating_sub(1),
                    self.kept()
                ),
            }
        } else {
            format!(
                "the fewest K/V bytes ({:.3}x dense) of {} settings tried {} on calibration \
                 text: {}",
                self.kv_bytes,
                self.tried.saturating_sub(1),
                self.kept(),
                evidence.join(", ")
            )
        }
    }

    /// What the settings tried had to keep: within the budget of dense, or, where fidelity
    /// was held to a yardstick (`--fidelity-rule int8`), dense's answers within the budget
    /// and a fidelity at least the yardstick's.
    pub fn kept(&self) -> String {
        match self.evidence.iter().find_map(|e| e.yardstick.as_ref()) {
            Some(y) => format!(
                "within {} of dense on answers and as close to dense as {} on fidelity \
                 (KL at most its, top-1 agreement within {} of its)",
                self.budget, y.method, self.budget
            ),
            None => format!("within {} of dense", self.budget),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_settings_parse_and_name_a_known_criterion() {
        for (name, text) in SHIPPED {
            let s = Setting::parse(text, name).unwrap();
            assert!(
                qada_core::CRITERION_NAMES.contains(&s.criterion.as_str()),
                "{name}: {}",
                s.criterion
            );
            assert!(s.kv_bytes > 0.0 && s.kv_bytes <= 1.0 + 1e-9, "{name}");
            for e in &s.evidence {
                let checked = e.lower.unwrap_or(e.value);
                assert!(checked <= e.value, "{name}: {e:?}");
                assert!(e.keeps(s.budget + 1e-12), "{name}: {e:?}");
            }
        }
    }

    #[test]
    fn why_names_the_rule_the_evidence_was_held_to() {
        let text = SHIPPED
            .iter()
            .find(|(n, _)| *n == "qwen2.5-0.5b")
            .unwrap()
            .1;
        let mut s = Setting::parse(text, "qwen").unwrap();
        let why = s.why();
        assert!(
            why.contains("as close to dense as dense-int8 on fidelity")
                && why.contains("top-1 agreement within 0.02"),
            "{why}"
        );
        for e in &mut s.evidence {
            e.yardstick = None;
        }
        let why = s.why();
        assert!(
            why.contains("tried within 0.02 of dense on calibration text") && !why.contains("int8"),
            "{why}"
        );
    }

    #[test]
    fn a_wrong_format_is_refused_with_what_to_do() {
        let e = Setting::parse(r#"{"format": "x"}"#, "f.json")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("f.json: not a qada setting"), "{e}");
    }
}
