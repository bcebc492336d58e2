//! Probing a criterion against the oracle on a real model: what `qada analyze` and the
//! Python `Model.analyze` run.
//!
//! Decode greedily with dense attention (the cache keeping whatever bulk summaries the probed
//! criterion reads) and, at the last prompt position and at every generated one, probe every
//! global layer and query head: exact `ln A_bulk`, the criterion's `ln A_bulk_hat` (QAdA's
//! Gaussian one, `ln T_bulk + mu_s + sigma_s^2 / 2`, by default) and `ln A_local`
//! ([`HeadProbe`]). Labels at any `tau` follow from the probes ([`crate::Report`]).

use qada_core::{Decision, HeadInput, KvSegments, LocalityCriterion, Result as CoreResult};
use qada_kv::{KvDtype, MomentsMode, WindowConfig};
use qada_model::{
    Model, ModelError, Result, Sampler, SamplingParams, Session, SessionOptions, StepObserver,
};
use qada_stats::BulkSummaries;

use crate::analysis::{probe_layer, probe_layer_with, HeadProbe};

/// Collects the probes of every global layer at every observed step: QAdA's estimate, or
/// that of `estimator` when given.
#[derive(Default)]
pub struct Prober {
    /// The probes so far, in order of step, layer and head.
    pub probes: Vec<HeadProbe>,
    /// The criterion whose estimate is probed; QAdA's Gaussian estimate when `None`.
    pub estimator: Option<Box<dyn LocalityCriterion>>,
}

impl StepObserver for Prober {
    fn observe_layer(
        &mut self,
        layer: usize,
        q: &[f32],
        kv: &[KvSegments<'_>],
        scale: f32,
        _d: &[Decision],
    ) -> Result<()> {
        match &self.estimator {
            None => self.probes.extend(probe_layer(layer, q, kv, scale)?),
            Some(c) => self
                .probes
                .extend(probe_layer_with(layer, q, kv, scale, c.as_ref())?),
        }
        Ok(())
    }
}

/// Dense attention that has the cache keep the bulk summaries another criterion reads, so
/// that criterion can be probed while decoding stays dense.
pub struct DenseKeeping(pub BulkSummaries);

impl LocalityCriterion for DenseKeeping {
    fn decide(&self, _input: &HeadInput<'_>) -> CoreResult<Decision> {
        Ok(Decision::LONG)
    }
    fn name(&self) -> &str {
        "dense"
    }
    fn bulk_summaries(&self) -> BulkSummaries {
        self.0
    }
}

/// How a probing run decodes.
pub struct ProbeOptions {
    /// Sink and window sizes.
    pub window: WindowConfig,
    /// Where bulk moments come from.
    pub moments: MomentsMode,
    /// Element type of the cache.
    pub kv_dtype: KvDtype,
    /// Tokens decoded after the prompt (positions probed: the last prompt token and these).
    pub steps: usize,
}

/// What a probing run saw.
#[derive(Clone, Debug)]
pub struct ProbeRun {
    /// Every probe, in order of position, layer and head.
    pub probes: Vec<HeadProbe>,
    /// The greedy tokens decoded after the prompt (`steps` of them).
    pub generated: Vec<u32>,
}

/// Prefill all of `tokens` but the last, then decode it and `steps` greedy tokens densely,
/// probing `estimator` (QAdA's Gaussian estimate when `None`) against the oracle at every
/// position. `progress(done, total)` is called during prefill.
///
/// # Errors
/// [`ModelError::Input`] when the prompt has fewer than 2 tokens, when it and `steps` exceed
/// the context length, or when it is no longer than the local window (every head local:
/// nothing to probe); the session's errors otherwise.
pub fn probe_decode(
    model: &Model,
    tokens: &[u32],
    opts: ProbeOptions,
    estimator: Option<Box<dyn LocalityCriterion>>,
    progress: &mut (dyn FnMut(usize, usize) + Send),
) -> Result<ProbeRun> {
    let ctx = model.config().context_length;
    if tokens.len() < 2 {
        return Err(ModelError::Input(
            "the prompt needs at least 2 tokens (the last one is probed after the others are \
             prefilled)"
                .into(),
        ));
    }
    if tokens.len() + opts.steps > ctx {
        return Err(ModelError::Input(format!(
            "the prompt ({} tokens) plus {} steps exceed the context length {ctx}",
            tokens.len(),
            opts.steps
        )));
    }
    if tokens.len() <= opts.window.local() {
        return Err(ModelError::Input(format!(
            "the prompt has {} tokens, no more than the local window of {}: every head is \
             local, there is nothing to analyze (use a longer prompt)",
            tokens.len(),
            opts.window.local()
        )));
    }
    let summaries = estimator
        .as_ref()
        .map_or(BulkSummaries::default(), |c| c.bulk_summaries());
    let mut session = Session::new(
        model,
        SessionOptions {
            criterion: Box::new(DenseKeeping(summaries)),
            window: opts.window,
            moments: opts.moments,
            capacity: None,
            kv_dtype: opts.kv_dtype,
        },
    )?;
    let (head, last) = tokens.split_at(tokens.len() - 1);
    session.prefill(head, progress)?;
    let mut prober = Prober {
        probes: Vec::new(),
        estimator,
    };
    let mut sampler = Sampler::new(SamplingParams::default())?;
    let mut next = last[0];
    let mut generated = Vec::new();
    for _ in 0..=opts.steps {
        let logits = session.step_observed(next, Some(&mut prober))?;
        next = sampler.sample(logits)?;
        generated.push(next);
    }
    generated.pop();
    Ok(ProbeRun {
        probes: prober.probes,
        generated,
    })
}
