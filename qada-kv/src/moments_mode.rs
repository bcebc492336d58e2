//! Where a cache's bulk moments `(mu_K, Sigma_K)` come from, and how they follow the keys:
//! option 1 of the paper kept current (keys fold into the moments as they leave the window) or
//! frozen at the end of prefill, or option 2 (moments looked up in a calibration table for the
//! prompt length). Fixed moments are also kept factored ([`FACTOR_TOLERANCE`]).
//!
//! Sliding layers ([`LayerSpan::Sliding`]) have no bulk: their moments stay empty in every
//! mode, whatever a calibration table holds for them.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use qada_stats::{FactoredMoments, KeyMoments, ModelSignature, MomentTable};

use crate::{KvCache, KvDtype, KvError, LayerSpan, Result};

/// Share of the covariance trace a factored form may leave out (see [`FactoredMoments`]).
pub const FACTOR_TOLERANCE: f64 = 1e-3;

/// Where the bulk moments `(mu_K, Sigma_K)` come from.
#[derive(Clone, Debug, Default)]
pub enum MomentsMode {
    /// Option 1, kept current: every key that leaves the window joins the bulk moments.
    #[default]
    Update,
    /// Option 1 as in the paper: moments of the prompt's bulk, frozen by
    /// [`KvCache::finish_prefill`].
    Frozen,
    /// Option 2: moments of the first `T - offset` keys of a calibration run, looked up in the
    /// table for the prompt length `T` at [`KvCache::finish_prefill`].
    Calibration {
        /// Calibration moments per layer and KV head at checkpoints.
        table: Arc<MomentTable>,
        /// The checkpoint used holds at most `T - offset` keys.
        offset: usize,
    },
}

/// A [`MomentsMode`] as a user names it: `current`, `frozen` or `calibration:PATH` (a moment
/// table from `qada calibrate moments`), before the table is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MomentsSource {
    /// [`MomentsMode::Update`].
    Current,
    /// [`MomentsMode::Frozen`].
    Frozen,
    /// [`MomentsMode::Calibration`] with the table at this path.
    Calibration(PathBuf),
}

impl FromStr for MomentsSource {
    type Err = KvError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "current" => Ok(MomentsSource::Current),
            "frozen" => Ok(MomentsSource::Frozen),
            _ => match s.strip_prefix("calibration:") {
                Some(path) if !path.is_empty() => Ok(MomentsSource::Calibration(path.into())),
                _ => Err(KvError::UnknownName {
                    what: "moments source",
                    found: s.to_string(),
                    expected: "current, frozen or calibration:PATH",
                }),
            },
        }
    }
}

impl fmt::Display for MomentsSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MomentsSource::Current => f.write_str("current"),
            MomentsSource::Frozen => f.write_str("frozen"),
            MomentsSource::Calibration(p) => write!(f, "calibration:{}", p.display()),
        }
    }
}

impl MomentsSource {
    /// The mode: a calibration table is read from its file and must be of the model
    /// `signature` names; `offset` as in [`MomentsMode::Calibration`].
    pub fn mode(&self, signature: &ModelSignature, offset: usize) -> Result<MomentsMode> {
        Ok(match self {
            MomentsSource::Current => MomentsMode::Update,
            MomentsSource::Frozen => MomentsMode::Frozen,
            MomentsSource::Calibration(path) => MomentsMode::Calibration {
                table: Arc::new(MomentTable::load(path, Some(signature)).map_err(|e| {
                    KvError::Table {
                        path: path.clone(),
                        source: e,
                    }
                })?),
                offset,
            },
        })
    }
}

impl KvCache {
    /// True when the moments track the cache's own bulk keys as they arrive.
    pub(crate) fn follows_bulk(&self) -> bool {
        !self.moments_fixed && !matches!(self.mode, MomentsMode::Calibration { .. })
    }

    /// Fold the keys of `layer` that left the window since the last fold into its moments
    /// (none in a sliding layer: it has no bulk).
    pub(crate) fn fold_layer(&mut self, layer: usize) -> Result<()> {
        if self.spans[layer] != LayerSpan::Full {
            return Ok(());
        }
        let (nh, d) = (self.shape.n_kv_heads, self.shape.head_dim);
        let bulk = self.window.split(self.lens[layer]).bulk;
        let q8 = self.shape.dtype == KvDtype::Q8;
        for store in &mut self.heads[layer * nh..(layer + 1) * nh] {
            let from = bulk.start + store.folded;
            if bulk.end > from {
                if q8 {
                    // the f32 keys where they were kept, the stored blocks before that
                    let held = store.exact.range(d);
                    let mid = held.start.clamp(from, bulk.end);
                    if mid > from {
                        store
                            .bulk
                            .push_rows_of(store.keys.rows().slice(from, mid, d))?;
                    }
                    if bulk.end > mid {
                        store.bulk.push_rows(store.exact.rows(mid..bulk.end, d))?;
                    }
                } else {
                    store
                        .bulk
                        .push_rows_of(store.keys.rows().slice(from, bulk.end, d))?;
                }
                store.folded = bulk.end - bulk.start;
            }
            if q8 {
                store.exact.drop_before(bulk.start + store.folded, d);
            }
        }
        Ok(())
    }

    /// Replace every head's moments by those of its current bulk keys (two passes).
    fn recompute_own_moments(&mut self) -> Result<()> {
        let d = self.shape.head_dim;
        for h in &mut self.heads {
            h.bulk = KeyMoments::new(d);
            h.folded = 0;
        }
        for layer in 0..self.shape.n_layers {
            self.fold_layer(layer)?;
        }
        Ok(())
    }

    /// In calibration mode, take every head's moments from the table's checkpoint for the
    /// current length; they are fixed from then on. Sliding layers keep empty moments (a
    /// table built from a cache with sliding layers has empty moments there).
    pub(crate) fn apply_calibration(&mut self) -> Result<()> {
        if let MomentsMode::Calibration { table, offset } = &self.mode {
            let checkpoint = table.lookup(self.seq_len(), *offset)?;
            let nh = self.shape.n_kv_heads;
            let d = self.shape.head_dim;
            for (i, store) in self.heads.iter_mut().enumerate() {
                store.folded = 0;
                if self.spans[i / nh] != LayerSpan::Full {
                    store.bulk = KeyMoments::new(d);
                    continue;
                }
                let m = checkpoint
                    .moments(i / nh, i % nh)
                    .expect("table shape checked at construction");
                store.bulk.clone_from(m);
            }
            self.moments_fixed = true;
        }
        Ok(())
    }

    /// Factor every head's moments (they are fixed from now on), or drop the factors.
    pub(crate) fn refactor(&mut self) -> Result<()> {
        let fixed = self.moments_fixed;
        for h in &mut self.heads {
            h.factored = if fixed && !h.bulk.is_empty() {
                Some(FactoredMoments::new(&h.bulk, FACTOR_TOLERANCE)?)
            } else {
                None
            };
        }
        Ok(())
    }

    /// Change where the bulk moments come from, from now on. Update resumes folding keys that
    /// leave the window; frozen stops (after prefill); calibration looks up the table for the
    /// current length (after prefill). Leaving calibration recomputes the moments of the
    /// cache's own bulk keys.
    pub fn set_moments_mode(&mut self, mode: MomentsMode) -> Result<()> {
        if let MomentsMode::Calibration { table, .. } = &mode {
            self.check_table(table)?;
        }
        let had_own = !matches!(self.mode, MomentsMode::Calibration { .. });
        self.mode = mode;
        self.moments_fixed = false;
        match self.mode {
            MomentsMode::Calibration { .. } => {
                if self.prefill_done {
                    self.apply_calibration()?;
                }
            }
            MomentsMode::Update | MomentsMode::Frozen => {
                if had_own {
                    for layer in 0..self.shape.n_layers {
                        self.fold_layer(layer)?;
                    }
                } else {
                    self.recompute_own_moments()?;
                }
                self.moments_fixed = self.prefill_done && matches!(self.mode, MomentsMode::Frozen);
            }
        }
        self.refactor()
    }

    /// Refuse a calibration table made for another shape of cache. Only the shape counts:
    /// what the table holds for sliding layers (typically empty moments) is never read.
    pub(crate) fn check_table(&self, table: &MomentTable) -> Result<()> {
        let sig = table.signature();
        let shape = self.shape;
        if sig.n_layers as usize != shape.n_layers
            || sig.n_kv_heads as usize != shape.n_kv_heads
            || sig.head_dim as usize != shape.head_dim
        {
            return Err(KvError::Stats(qada_stats::StatsError::ModelMismatch {
                field: "layers x KV heads x head dimension",
                found: format!("{} x {} x {}", sig.n_layers, sig.n_kv_heads, sig.head_dim),
                expected: format!(
                    "{} x {} x {}",
                    shape.n_layers, shape.n_kv_heads, shape.head_dim
                ),
            }));
        }
        Ok(())
    }
}

#[cfg(test)]
mod names {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cache_types_read_back_their_names_and_unknown_ones_list_the_names() {
        for t in KvDtype::ALL {
            assert_eq!(t.to_string().parse::<KvDtype>().unwrap(), t);
        }
        let e = "bf16".parse::<KvDtype>().unwrap_err().to_string();
        assert!(
            e.contains("\"bf16\"") && e.contains("f32, f16 or q8"),
            "{e}"
        );
    }

    #[test]
    fn a_moments_source_names_what_it_takes() {
        for bad in ["", "calibration:", "Current", "table.qmom"] {
            let e = bad.parse::<MomentsSource>().unwrap_err().to_string();
            assert!(e.contains("calibration:PATH"), "{bad}: {e}");
        }
        let sig = ModelSignature {
            architecture: "llama".into(),
            n_layers: 1,
            n_kv_heads: 1,
            head_dim: 2,
            rope_base: 10_000.0,
        };
        let missing = MomentsSource::Calibration("/nonexistent/m.qmom".into());
        let e = missing.mode(&sig, 0).unwrap_err().to_string();
        assert!(e.starts_with("/nonexistent/m.qmom: "), "{e}");
        assert!(matches!(
            MomentsSource::Frozen.mode(&sig, 0).unwrap(),
            MomentsMode::Frozen
        ));
    }

    proptest! {
        #[test]
        fn moments_sources_read_back_what_they_display(path in "[^\u{0}]{1,40}") {
            for m in [
                MomentsSource::Current,
                MomentsSource::Frozen,
                MomentsSource::Calibration(path.clone().into()),
            ] {
                prop_assert_eq!(m.to_string().parse::<MomentsSource>().unwrap(), m);
            }
        }
    }
}
