//! Static: a fixed label per (layer, head), the same for every query.
//!
//! Calibration: run prompts with the oracle at `tau_static` (the paper's 0.6) and count, per
//! head, the fraction of queries labeled local ([`StaticCalibrator`] -> [`StaticTable`]). At use
//! time the `alpha` fraction of heads with the highest fractions are local ([`Static`]).

use std::path::Path;

use qada_stats::codec::{self, Encoder, Format};
use qada_stats::{ModelSignature, StatsError};

use crate::{CoreError, Decision, HeadInput, LocalityCriterion, Result};

const FORMAT: Format = Format {
    name: "qada static table",
    magic: *b"QADASTAT",
    version: 1,
};

/// Local frequencies per (layer, query head) from a calibration run, for one model.
#[derive(Clone, Debug, PartialEq)]
pub struct StaticTable {
    signature: ModelSignature,
    n_heads: usize,
    tau_static: f64,
    /// Layer-major: `layer * n_heads + head`.
    local: Vec<u64>,
    total: Vec<u64>,
}

/// Counts oracle labels per head during calibration.
#[derive(Clone, Debug)]
pub struct StaticCalibrator {
    table: StaticTable,
}

impl StaticCalibrator {
    /// Start counting for a model with `n_heads` query heads per layer, labels taken at
    /// `tau_static`.
    pub fn new(signature: ModelSignature, n_heads: usize, tau_static: f64) -> Result<Self> {
        crate::Tau::new(tau_static)?;
        let n = signature.n_layers as usize * n_heads;
        Ok(StaticCalibrator {
            table: StaticTable {
                signature,
                n_heads,
                tau_static,
                local: vec![0; n],
                total: vec![0; n],
            },
        })
    }

    /// Record one oracle label.
    pub fn observe(&mut self, layer: usize, head: usize, local: bool) -> Result<()> {
        let i = self.table.index(layer, head)?;
        self.table.total[i] += 1;
        self.table.local[i] += local as u64;
        Ok(())
    }

    /// The threshold labels are taken at.
    pub fn tau_static(&self) -> f64 {
        self.table.tau_static
    }

    /// The frequencies counted so far.
    pub fn finish(self) -> StaticTable {
        self.table
    }
}

impl StaticTable {
    fn index(&self, layer: usize, head: usize) -> Result<usize> {
        let n_layers = self.signature.n_layers as usize;
        if layer >= n_layers {
            return Err(CoreError::OutOfRange {
                what: "layer",
                index: layer,
                count: n_layers,
            });
        }
        if head >= self.n_heads {
            return Err(CoreError::OutOfRange {
                what: "head",
                index: head,
                count: self.n_heads,
            });
        }
        Ok(layer * self.n_heads + head)
    }

    /// The model this table was made for.
    pub fn signature(&self) -> &ModelSignature {
        &self.signature
    }
    /// Query heads per layer.
    pub fn n_heads(&self) -> usize {
        self.n_heads
    }
    /// Threshold the oracle labels were taken at.
    pub fn tau_static(&self) -> f64 {
        self.tau_static
    }
    /// Fraction of calibration queries for which a head was local (0 when never observed).
    pub fn local_frequency(&self, layer: usize, head: usize) -> Result<f64> {
        let i = self.index(layer, head)?;
        Ok(if self.total[i] == 0 {
            0.0
        } else {
            self.local[i] as f64 / self.total[i] as f64
        })
    }
    /// Local frequencies, layer-major.
    pub fn frequencies(&self) -> Vec<f64> {
        self.local
            .iter()
            .zip(&self.total)
            .map(|(&l, &t)| if t == 0 { 0.0 } else { l as f64 / t as f64 })
            .collect()
    }

    /// Which heads calibration observed at least once, layer-major. Heads in layers no
    /// criterion decides (sliding-window layers) are never observed.
    pub fn observed(&self) -> Vec<bool> {
        self.total.iter().map(|&t| t > 0).collect()
    }

    /// Encode as a file.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        self.signature.encode(&mut e);
        e.u64(self.n_heads as u64);
        e.f64(self.tau_static);
        for (&l, &t) in self.local.iter().zip(&self.total) {
            e.u64(l);
            e.u64(t);
        }
        e.finish(&FORMAT)
    }

    /// Decode a file; with `expected`, also refuse a table made for another model.
    pub fn from_bytes(bytes: &[u8], expected: Option<&ModelSignature>) -> Result<Self> {
        let (mut dec, signature) = codec::open_for_model(bytes, &FORMAT, expected)?;
        let at = dec.offset();
        let n_heads = dec.u64("head count")?;
        let tau_static = dec.f64("tau_static")?;
        let n = (signature.n_layers as u64).saturating_mul(n_heads);
        if n.saturating_mul(16) != dec.remaining() as u64 {
            return Err(StatsError::Invalid {
                what: "head counts",
                offset: at,
                reason: format!(
                    "{} layers x {n_heads} heads need {} bytes, {} remain",
                    signature.n_layers,
                    n.saturating_mul(16),
                    dec.remaining()
                ),
            }
            .into());
        }
        if !(tau_static > 0.0 && tau_static <= 1.0) {
            return Err(StatsError::Invalid {
                what: "tau_static",
                offset: at + 8,
                reason: format!("{tau_static} is not in (0, 1]"),
            }
            .into());
        }
        let mut local = Vec::with_capacity(n as usize);
        let mut total = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let at = dec.offset();
            let l = dec.u64("local count")?;
            let t = dec.u64("query count")?;
            if l > t {
                return Err(StatsError::Invalid {
                    what: "local count",
                    offset: at,
                    reason: format!("{l} local labels out of {t} queries"),
                }
                .into());
            }
            local.push(l);
            total.push(t);
        }
        dec.finish()?;
        Ok(StaticTable {
            signature,
            n_heads: n_heads as usize,
            tau_static,
            local,
            total,
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

/// Fixed labels: the `alpha` fraction of the calibrated heads with the highest local
/// frequency are local.
#[derive(Clone, Debug)]
pub struct Static {
    n_heads: usize,
    /// Layer-major labels.
    local: Vec<bool>,
    alpha: f64,
}

impl Static {
    /// Label as local the `round(alpha * n)` heads with the highest local frequencies among the
    /// `n` heads calibration observed (ties broken by lower layer, then lower head). A head
    /// never observed is never labeled: on a model with sliding-window layers (Gemma 3) only
    /// the global layers' heads are decided, so `alpha` is a fraction of those, not of every
    /// head. A table that observed no head is an error.
    pub fn from_table(table: &StaticTable, alpha: f64) -> Result<Self> {
        if !(0.0..=1.0).contains(&alpha) {
            return Err(CoreError::InvalidAlpha(alpha));
        }
        let freq = table.frequencies();
        let observed = table.observed();
        let mut order: Vec<usize> = (0..freq.len()).filter(|&i| observed[i]).collect();
        if order.is_empty() {
            return Err(CoreError::EmptyStaticTable);
        }
        order.sort_by(|&a, &b| freq[b].total_cmp(&freq[a]).then(a.cmp(&b)));
        let k = (alpha * order.len() as f64).round() as usize;
        let mut local = vec![false; freq.len()];
        for &i in &order[..k] {
            local[i] = true;
        }
        Ok(Static {
            n_heads: table.n_heads,
            local,
            alpha,
        })
    }

    /// Number of heads labeled local.
    pub fn local_count(&self) -> usize {
        self.local.iter().filter(|&&l| l).count()
    }

    /// The fraction of heads labeled local.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// The label of one head.
    pub fn is_local(&self, layer: usize, head: usize) -> Result<bool> {
        if head >= self.n_heads {
            return Err(CoreError::OutOfRange {
                what: "head",
                index: head,
                count: self.n_heads,
            });
        }
        self.local
            .get(layer * self.n_heads + head)
            .copied()
            .ok_or(CoreError::OutOfRange {
                what: "layer",
                index: layer,
                count: self.local.len() / self.n_heads.max(1),
            })
    }
}

impl LocalityCriterion for Static {
    fn decide(&self, input: &HeadInput<'_>) -> Result<Decision> {
        let local = input.bulk_len == 0 || self.is_local(input.layer, input.head)?;
        Ok(Decision {
            local,
            log_local_share: None,
        })
    }
    fn name(&self) -> &str {
        "static"
    }
}
