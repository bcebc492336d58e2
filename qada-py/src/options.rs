//! The decoding options `Model.generate`, `Model.analyze` and `Model.session` take as keyword
//! arguments: criterion and its parameters, GQA grouping, the context length from which it
//! decides (dense below), sink and window, bulk moments and the cache's element type, each
//! checked and named in its error. A setting file of `qada calibrate tau` holds the same
//! fields: `qada.setting_options(path)` reads them.

use pyo3::prelude::*;
use qada_core::{by_name, CriterionParams, DenseBelow, GroupMode, Grouped, LocalityCriterion};
use qada_kv::{KvDtype, MomentsMode, MomentsSource, WindowConfig};
use qada_model::Model;
use qada_stats::DEFAULT_TABLE_OFFSET;

use crate::errors::{arg_err, bad_arg, check_tau};

/// Decoding options, as given.
pub struct Decoding<'a> {
    pub criterion: &'a str,
    pub tau: f64,
    pub group: &'a str,
    pub page: usize,
    pub channels: usize,
    pub clusters: usize,
    pub margin: f64,
    pub dense_below: Option<usize>,
    pub sink: usize,
    pub local: usize,
    pub kv: &'a str,
    pub moments: &'a str,
}

impl Decoding<'_> {
    /// The criterion, deciding per GQA group as `group` says (`head`: each head alone), and
    /// dense below `dense_below` keys of context when given (at most `ctx`, the model's
    /// context length).
    pub fn criterion(&self, ctx: usize) -> PyResult<Box<dyn LocalityCriterion>> {
        let params = CriterionParams {
            tau: check_tau(self.tau)?,
            page: self.page,
            clusters: self.clusters,
            margin: self.margin,
            quest_tokens: qada_core::DEFAULT_QUEST_TOKENS,
            channels: self.channels,
        };
        let c = by_name(self.criterion, &params).map_err(|e| arg_err("criterion", e))?;
        let mode: GroupMode = self.group.parse().map_err(|e| arg_err("group", e))?;
        let c: Box<dyn LocalityCriterion> = match mode {
            GroupMode::Head => c,
            m => Box::new(Grouped::new(c, m)),
        };
        let Some(n) = self.dense_below else {
            return Ok(c);
        };
        if n == 0 || n > ctx {
            return Err(bad_arg(
                "dense_below",
                format!("1 to {ctx} keys (the model's context length), or None"),
                n,
            ));
        }
        Ok(Box::new(
            DenseBelow::new(c, n).map_err(|e| arg_err("dense_below", e))?,
        ))
    }

    /// Sink `T_sink` and local window `T_local` (sink included).
    pub fn window(&self) -> PyResult<WindowConfig> {
        WindowConfig::new(self.sink, self.local).map_err(|e| arg_err("sink, local", e))
    }

    /// The cache's element type.
    pub fn kv_dtype(&self) -> PyResult<KvDtype> {
        self.kv.parse().map_err(|e| arg_err("kv", e))
    }

    /// Where bulk moments come from: `current` (kept up to date), `frozen` (after prefill) or
    /// `calibration:PATH` (a moment table of this model from `qada calibrate moments`).
    pub fn moments(&self, model: &Model) -> PyResult<MomentsMode> {
        let source: MomentsSource = self.moments.parse().map_err(|e| arg_err("moments", e))?;
        source
            .mode(&model.signature(), DEFAULT_TABLE_OFFSET)
            .map_err(|e| arg_err("moments", e))
    }
}
