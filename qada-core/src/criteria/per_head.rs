//! Per-head thresholds: any criterion that estimates the local share, compared with a
//! threshold `tau_{l,h}` of its own for each (layer, query head).
//!
//! A criterion reports `r = ln(A_local / (A_local + A_bulk))` (estimated, paper eq. 7, or
//! exact); [`PerHead`] labels the head local iff `r >= ln tau_{l,h}` (paper eq. 3 with one
//! `tau` per head). The table [`HeadTaus`] comes from calibration prompts
//! ([`calibrate_head_taus`]): a head whose estimate is biased high gets a higher `tau_{l,h}`,
//! so that at most a chosen share of the queries the oracle calls long-context are labeled
//! local.

use std::path::Path;

use qada_stats::codec::{self, Encoder, Format};
use qada_stats::{BulkSummaries, ModelSignature, StatsError};

use crate::selection::{GroupRead, PageSelection};
use crate::{CoreError, Decision, DecisionCost, HeadInput, LocalityCriterion, Result, Tau};

const FORMAT: Format = Format {
    name: "qada head thresholds",
    magic: *b"QADAHTAU",
    version: 1,
};

/// One threshold `tau_{l,h}` per (layer, query head), for one model.
#[derive(Clone, Debug, PartialEq)]
pub struct HeadTaus {
    signature: ModelSignature,
    n_heads: usize,
    /// The threshold calibration started from (every head's when uncalibrated).
    base: Tau,
    /// Layer-major: `layer * n_heads + head`.
    taus: Vec<Tau>,
}

impl HeadTaus {
    /// Every head at `base`, for a model with `n_heads` query heads per layer.
    pub fn uniform(signature: ModelSignature, n_heads: usize, base: Tau) -> Self {
        let n = signature.n_layers as usize * n_heads;
        HeadTaus {
            signature,
            n_heads,
            base,
            taus: vec![base; n],
        }
    }

    fn index(&self, layer: usize, head: usize) -> Result<usize> {
        let n_layers = self.n_layers();
        if layer >= n_layers {
            return Err(CoreError::OutOfRange {
                what: "layer of the head thresholds",
                index: layer,
                count: n_layers,
            });
        }
        if head >= self.n_heads {
            return Err(CoreError::OutOfRange {
                what: "head of the head thresholds",
                index: head,
                count: self.n_heads,
            });
        }
        Ok(layer * self.n_heads + head)
    }

    /// `tau_{l,h}`.
    pub fn get(&self, layer: usize, head: usize) -> Result<Tau> {
        Ok(self.taus[self.index(layer, head)?])
    }
    /// Set `tau_{l,h}`.
    pub fn set(&mut self, layer: usize, head: usize, tau: Tau) -> Result<()> {
        let i = self.index(layer, head)?;
        self.taus[i] = tau;
        Ok(())
    }
    /// The model this table was made for.
    pub fn signature(&self) -> &ModelSignature {
        &self.signature
    }
    /// Layers.
    pub fn n_layers(&self) -> usize {
        self.signature.n_layers as usize
    }
    /// Query heads per layer.
    pub fn n_heads(&self) -> usize {
        self.n_heads
    }
    /// The threshold calibration started from.
    pub fn base(&self) -> Tau {
        self.base
    }
    /// The thresholds of one layer, by head.
    pub fn layer(&self, layer: usize) -> Result<&[Tau]> {
        let i = self.index(layer, 0)?;
        Ok(&self.taus[i..i + self.n_heads])
    }

    /// Encode as a file.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        self.signature.encode(&mut e);
        e.u64(self.n_heads as u64);
        e.f64(self.base.get());
        for t in &self.taus {
            e.f64(t.get());
        }
        e.finish(&FORMAT)
    }

    /// Decode a file; with `expected`, also refuse a table made for another model.
    pub fn from_bytes(bytes: &[u8], expected: Option<&ModelSignature>) -> Result<Self> {
        let (mut dec, signature) = codec::open_for_model(bytes, &FORMAT, expected)?;
        let at = dec.offset();
        let n_heads = dec.u64("head count")?;
        let n = (signature.n_layers as u64).saturating_mul(n_heads);
        let tau = |dec: &mut codec::Decoder<'_>, what: &'static str| -> Result<Tau> {
            let at = dec.offset();
            let t = dec.f64(what)?;
            Tau::new(t).map_err(|_| {
                StatsError::Invalid {
                    what,
                    offset: at,
                    reason: format!("{t} is not in (0, 1]"),
                }
                .into()
            })
        };
        let base = tau(&mut dec, "base tau")?;
        if n.saturating_mul(8) != dec.remaining() as u64 {
            return Err(StatsError::Invalid {
                what: "head thresholds",
                offset: at,
                reason: format!(
                    "{} layers x {n_heads} heads need {} bytes, {} remain",
                    signature.n_layers,
                    n.saturating_mul(8),
                    dec.remaining()
                ),
            }
            .into());
        }
        let taus = (0..n)
            .map(|_| tau(&mut dec, "head tau"))
            .collect::<Result<Vec<_>>>()?;
        dec.finish()?;
        Ok(HeadTaus {
            signature,
            n_heads: n_heads as usize,
            base,
            taus,
        })
    }

    /// Write to a file.
    pub fn save(&self, path: &Path) -> Result<()> {
        Ok(codec::write_file(path, &self.to_bytes())?)
    }

    /// Read from a file; with `expected`, refuse a table made for another model.
    pub fn load(path: &Path, expected: Option<&ModelSignature>) -> Result<Self> {
        Self::from_bytes(&codec::read_file(path)?, expected)
    }
}

/// A criterion with one threshold per head: local iff the inner criterion's
/// `log_local_share >= ln tau_{l,h}`.
///
/// Where the inner criterion reports no finite share (dense, window, static; NaN), its
/// decision stands; with no bulk every head is local, as for every criterion. The hybrid's
/// share is QAdA's or the bound's, whichever decided: `tau_{l,h}` is applied to it.
#[derive(Clone, Debug)]
pub struct PerHead<C> {
    inner: C,
    taus: HeadTaus,
    name: String,
}

impl<C: LocalityCriterion> PerHead<C> {
    /// `inner` with the thresholds of `taus`.
    pub fn new(inner: C, taus: HeadTaus) -> Self {
        let name = format!("{}+heads", inner.name());
        PerHead { inner, taus, name }
    }
    /// The wrapped criterion.
    pub fn inner(&self) -> &C {
        &self.inner
    }
    /// The thresholds.
    pub fn taus(&self) -> &HeadTaus {
        &self.taus
    }
}

impl<C: LocalityCriterion> PerHead<C> {
    /// The inner criterion's decision `d` of `input`'s head, labeled by the head's own tau
    /// where it reports a finite share.
    fn relabel(&self, input: &HeadInput<'_>, d: Decision) -> Result<Decision> {
        let tau = self.taus.get(input.layer, input.head)?;
        Ok(match d.log_local_share {
            Some(share) if share.is_finite() && input.bulk_len > 0 => Decision {
                local: tau.is_local(share),
                log_local_share: Some(share),
            },
            _ => d,
        })
    }
}

impl<C: LocalityCriterion> LocalityCriterion for PerHead<C> {
    fn decide(&self, input: &HeadInput<'_>) -> Result<Decision> {
        let d = self.inner.decide(input)?;
        self.relabel(input, d)
    }
    /// The inner criterion's group decision (batched where it batches: QAdA reads a KV head's
    /// covariance once for its group), each head then labeled by its own tau.
    fn decide_group(&self, inputs: &[HeadInput<'_>], out: &mut [Decision]) -> Result<bool> {
        self.inner.decide_group(inputs, out)?;
        let mut any_long = false;
        for (input, o) in inputs.iter().zip(out.iter_mut()) {
            *o = self.relabel(input, *o)?;
            any_long |= !o.local;
        }
        Ok(any_long)
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn decision_cost(&self, d: usize, bulk_len: usize, context: usize) -> DecisionCost {
        self.inner.decision_cost(d, bulk_len, context)
    }
    fn bulk_summaries(&self) -> BulkSummaries {
        self.inner.bulk_summaries()
    }
    fn tau(&self) -> Option<Tau> {
        self.inner.tau()
    }
    fn reuse(&self) -> Option<crate::Reuse> {
        self.inner.reuse()
    }
    fn choose_pages(
        &self,
        inputs: &[HeadInput<'_>],
        out: &mut [Decision],
        selection: &mut PageSelection,
    ) -> Result<GroupRead> {
        self.inner.choose_pages(inputs, out, selection)
    }
}

/// One calibration query of one head: the oracle's exact `ln` local share and the
/// criterion's estimate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HeadObservation {
    /// Layer index.
    pub layer: usize,
    /// Query head index within the layer.
    pub head: usize,
    /// `ln(A_local / (A_local + A_bulk))`, exact.
    pub exact: f64,
    /// The criterion's estimate of it (NaN or infinite: never local).
    pub estimate: f64,
}

/// Per-head thresholds from calibration observations.
///
/// For each head, among its observations the oracle calls long (`exact < ln tau`): the
/// smallest `tau_h >= tau`, `tau_h < 1`, such that the share of them the criterion labels local
/// (`estimate >= ln tau_h`) is at most `max_false_local`. Heads without such observations keep
/// `tau`. Non-finite estimates count as long. An estimate of 0 (no bulk mass at all) stays
/// local at every `tau_h < 1`: its head gets the largest `tau_h` below 1.
pub fn calibrate_head_taus(
    observations: &[HeadObservation],
    signature: ModelSignature,
    n_heads: usize,
    tau: Tau,
    max_false_local: f64,
) -> Result<HeadTaus> {
    if !(0.0..=1.0).contains(&max_false_local) {
        return Err(CoreError::InvalidParameter {
            what: "the share of false local labels allowed per head",
            expected: "in [0, 1]",
            found: max_false_local,
        });
    }
    let mut table = HeadTaus::uniform(signature, n_heads, tau);
    // the estimates of the long observations of each head, layer-major
    let mut long: Vec<Vec<f64>> = vec![Vec::new(); table.taus.len()];
    for o in observations {
        let i = table.index(o.layer, o.head)?;
        if !tau.is_local(o.exact) {
            long[i].push(if o.estimate.is_finite() {
                o.estimate
            } else {
                f64::NEG_INFINITY
            });
        }
    }
    for (t, mut est) in table.taus.iter_mut().zip(long) {
        let n = est.len();
        // largest count of false local labels within the allowed share
        let allowed = (0..=n)
            .rev()
            .find(|&k| k as f64 <= max_false_local * n as f64)
            .unwrap_or(0);
        if allowed >= n {
            continue;
        }
        est.sort_by(|a, b| b.total_cmp(a));
        // every estimate >= ln tau_h is labeled local: ln tau_h must exceed the
        // (allowed + 1)-th largest
        let cut = est[allowed];
        if !tau.is_local(cut) {
            continue;
        }
        *t = smallest_tau_above(cut);
    }
    Ok(table)
}

/// The smallest `tau` in (0, 1) with `ln tau > log_share` as `Tau::is_local` computes it, or
/// the largest `tau` below 1 when there is none.
fn smallest_tau_above(log_share: f64) -> Tau {
    const BELOW_ONE: f64 = 1.0 - f64::EPSILON / 2.0;
    let mut t = log_share.exp().clamp(f64::MIN_POSITIVE, BELOW_ONE);
    // exp and ln round: step down while a smaller tau still clears the share, then up until
    // it does
    while t > f64::MIN_POSITIVE && (f64::from_bits(t.to_bits() - 1)).ln() > log_share {
        t = f64::from_bits(t.to_bits() - 1);
    }
    while t < BELOW_ONE && t.ln() <= log_share {
        t = f64::from_bits(t.to_bits() + 1);
    }
    Tau::new(t).unwrap_or(Tau::new(BELOW_ONE).expect("1 - eps/2 is in (0, 1)"))
}
