//! The fidelity task: after a dense prefill of `T` tokens of text, `N` teacher-forced steps
//! (the true next token is fed whatever the model predicted) under a criterion, each compared
//! with the dense step at the same position:
//!
//! - `NLL = -log q(x_{t+1})`, and `delta NLL = -log q(x_{t+1}) + log p(x_{t+1})`,
//! - top-1 agreement `argmax q = argmax p`,
//! - `KL(p || q)`,
//!
//! where `p` is the dense distribution and `q` the one under test (see [`crate::metrics`]).

use qada_model::{ModelError, Result, Session, SessionCheckpoint};

use crate::metrics::{kl_divergence, log_softmax, nll, top1_agreement};

/// The dense side of the comparison for one text: the checkpoint after its dense prefill and
/// the dense log-probabilities at each teacher-forced step.
pub struct FidelityReference {
    checkpoint: SessionCheckpoint,
    /// Prefill length `T`.
    len: usize,
    /// The `N + 1` tokens after the prefill: `N` fed, each predicting the next.
    continuation: Vec<u32>,
    /// Dense log-probabilities after feeding each of the first `N` continuation tokens.
    dense: Vec<Vec<f64>>,
}

/// One teacher-forced step under test, against dense.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FidelityStep {
    /// `-log q(x)` of the true next token `x`.
    pub nll: f64,
    /// `-log q(x) + log p(x)`: the NLL above dense's.
    pub delta_nll: f64,
    /// `argmax q = argmax p`.
    pub top1_agreement: bool,
    /// `KL(p || q)`, clamped at 0 (rounding can leave it a few ulps below).
    pub kl: f64,
}

/// Sums of [`FidelityStep`]s over any number of steps and texts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FidelityTotals {
    /// Sum of `nll`.
    pub nll: f64,
    /// Sum of `delta_nll`.
    pub delta_nll: f64,
    /// Number of steps whose top-1 token agreed with dense.
    pub top1_agreement: f64,
    /// Sum of `kl`.
    pub kl: f64,
    /// Steps added.
    pub steps: u64,
}

/// Means of the per-step metrics (see [`FidelityStep`]); the top-1 agreement is a rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FidelityMeans {
    /// Mean NLL of the true tokens.
    pub nll: f64,
    /// Mean NLL above dense's.
    pub delta_nll: f64,
    /// Share of steps whose top-1 token agreed with dense.
    pub top1_agreement: f64,
    /// Mean `KL(dense || sparse)`.
    pub kl: f64,
}

impl FidelityTotals {
    /// Add one step.
    pub fn add(&mut self, s: &FidelityStep) {
        self.nll += s.nll;
        self.delta_nll += s.delta_nll;
        self.top1_agreement += s.top1_agreement as u8 as f64;
        self.kl += s.kl;
        self.steps += 1;
    }

    /// The means over the steps added (0 if none).
    pub fn means(&self) -> FidelityMeans {
        let n = self.steps.max(1) as f64;
        FidelityMeans {
            nll: self.nll / n,
            delta_nll: self.delta_nll / n,
            top1_agreement: self.top1_agreement / n,
            kl: self.kl / n,
        }
    }
}

fn out_of_vocabulary(token: u32, vocab: usize) -> ModelError {
    ModelError::Input(format!(
        "token {token} of the fidelity text is outside the model's vocabulary of {vocab}"
    ))
}

impl FidelityReference {
    /// Prefill `ids[..len]` densely on `session`, then decode `steps` teacher-forced tokens
    /// densely and keep their log-probabilities. `ids` needs `len + steps + 1` tokens.
    pub fn new(session: &mut Session<'_>, ids: &[u32], len: usize, steps: usize) -> Result<Self> {
        if ids.len() < len + steps + 1 {
            return Err(ModelError::Input(format!(
                "the fidelity text has {} tokens; a prefill of {len} and {steps} steps need {}",
                ids.len(),
                len + steps + 1
            )));
        }
        let checkpoint = super::dense_prefill(session, &ids[..len])?;
        let continuation = ids[len..len + steps + 1].to_vec();
        let mut dense = Vec::with_capacity(steps);
        for &t in &continuation[..steps] {
            dense.push(log_softmax(session.step(t)?));
        }
        Ok(FidelityReference {
            checkpoint,
            len,
            continuation,
            dense,
        })
    }

    /// The session state after the dense prefill: restore it (and set the criterion under
    /// test) before [`FidelityReference::compare`].
    pub fn checkpoint(&self) -> &SessionCheckpoint {
        &self.checkpoint
    }

    /// Teacher-forced steps `N`.
    pub fn steps(&self) -> usize {
        self.dense.len()
    }

    /// Decode the `N` teacher-forced steps on `session`, which must stand at the checkpoint
    /// (restored, with the criterion under test), and compare each with dense.
    pub fn compare(&self, session: &mut Session<'_>) -> Result<Vec<FidelityStep>> {
        if session.len() != self.len {
            return Err(ModelError::Input(format!(
                "the session holds {} tokens; restore the fidelity checkpoint ({}) first",
                session.len(),
                self.len
            )));
        }
        let mut out = Vec::with_capacity(self.steps());
        for (j, d) in self.dense.iter().enumerate() {
            let lp = log_softmax(session.step(self.continuation[j])?);
            let x = self.continuation[j + 1];
            let oov = || out_of_vocabulary(x, lp.len());
            let (q_nll, p_nll) = (
                nll(&lp, x as usize).ok_or_else(oov)?,
                nll(d, x as usize).ok_or_else(oov)?,
            );
            out.push(FidelityStep {
                nll: q_nll,
                delta_nll: q_nll - p_nll,
                top1_agreement: top1_agreement(&lp, d),
                kl: kl_divergence(d, &lp).max(0.0),
            });
        }
        Ok(out)
    }
}
