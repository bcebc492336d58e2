//! Calibration moment tables (the paper's option 2).
//!
//! A calibration prompt (the paper's best: random words drawn from real text) is run through
//! the model; for every layer and KV head, the moments of its first `m` keys are stored at
//! checkpoints `m = stride, 2 stride, ...`. A prompt of length `T` then uses the largest
//! checkpoint `m <= T - offset` (default offset 1024): moments from a calibration prompt longer
//! than the actual prompt hurt badly in the paper, shorter ones are robust.

use std::path::Path;

use crate::codec::{self, Decoder, Encoder, Format};
use crate::{KeyMoments, ModelSignature, Result, Rows, StatsError};

/// Default distance between prompt length and the checkpoint used (the paper's 1024).
pub const DEFAULT_TABLE_OFFSET: usize = 1024;

const FORMAT: Format = Format {
    name: "qada moment table",
    magic: *b"QADAMOMT",
    version: 1,
};

/// Largest dimensions a table file may announce; a hostile file cannot make us allocate more.
const MAX_HEAD_DIM: u32 = 4096;
const MAX_HEADS: u64 = 1 << 20;

/// Moments of the first `tokens` keys of every layer and KV head.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    /// Number of calibration keys the moments cover.
    pub tokens: u64,
    /// Layer-major: index `layer * n_kv_heads + kv_head`.
    moments: Vec<KeyMoments>,
    n_kv_heads: usize,
}

impl Checkpoint {
    /// Moments of one layer and KV head.
    pub fn moments(&self, layer: usize, kv_head: usize) -> Option<&KeyMoments> {
        if kv_head >= self.n_kv_heads {
            return None;
        }
        self.moments.get(layer * self.n_kv_heads + kv_head)
    }
}

/// Calibration moments at checkpoints, for one model.
#[derive(Clone, Debug, PartialEq)]
pub struct MomentTable {
    signature: ModelSignature,
    stride: u64,
    checkpoints: Vec<Checkpoint>,
}

impl MomentTable {
    /// An empty table for a model; checkpoints are meant every `stride` tokens.
    pub fn new(signature: ModelSignature, stride: u64) -> Self {
        MomentTable {
            signature,
            stride,
            checkpoints: Vec::new(),
        }
    }

    /// Build the whole table from the keys of a calibration run: `keys(layer, kv_head)` returns
    /// that head's keys, row-major, in token order (f32, f16 or q8, dequantized). Checkpoints
    /// at every multiple of `stride` up to the shortest non-empty key run; an empty run (a
    /// layer that keeps no bulk, such as a sliding-window layer) has empty moments at every
    /// checkpoint.
    pub fn from_keys<'a, F, R>(signature: ModelSignature, stride: u64, mut keys: F) -> Result<Self>
    where
        F: FnMut(usize, usize) -> R,
        R: Into<Rows<'a>>,
    {
        if stride == 0 {
            return Err(StatsError::Invalid {
                what: "stride",
                offset: 0,
                reason: "must be at least 1".into(),
            });
        }
        let (nl, nh, d) = (
            signature.n_layers as usize,
            signature.n_kv_heads as usize,
            signature.head_dim as usize,
        );
        let mut table = MomentTable::new(signature, stride);
        let runs: Vec<Rows<'a>> = (0..nl)
            .flat_map(|l| (0..nh).map(move |h| (l, h)))
            .map(|(l, h)| keys(l, h).into())
            .collect();
        for r in &runs {
            if d == 0 || r.len() % d != 0 {
                return Err(StatsError::DimensionMismatch {
                    expected: d,
                    found: r.len() % d.max(1),
                });
            }
        }
        let shortest = runs
            .iter()
            .filter(|r| !r.is_empty())
            .map(|r| r.len() / d)
            .min()
            .unwrap_or(0) as u64;
        let mut running: Vec<KeyMoments> = vec![KeyMoments::new(d); runs.len()];
        let mut done = 0u64;
        let mut m = stride;
        while m <= shortest {
            for (acc, r) in running.iter_mut().zip(&runs) {
                if !r.is_empty() {
                    acc.push_rows_of(r.slice(done as usize, m as usize, d))?;
                }
            }
            table.push_checkpoint(m, running.clone())?;
            done = m;
            m += stride;
        }
        Ok(table)
    }

    /// Append a checkpoint (layer-major moments, one per layer and KV head).
    pub fn push_checkpoint(&mut self, tokens: u64, moments: Vec<KeyMoments>) -> Result<()> {
        let expected = self.signature.n_layers as usize * self.signature.n_kv_heads as usize;
        if moments.len() != expected {
            return Err(StatsError::ShapeMismatch {
                what: "moments per checkpoint (layers x KV heads)",
                expected,
                found: moments.len(),
            });
        }
        for m in &moments {
            if m.dim() != self.signature.head_dim as usize {
                return Err(StatsError::DimensionMismatch {
                    expected: self.signature.head_dim as usize,
                    found: m.dim(),
                });
            }
        }
        if let Some(last) = self.checkpoints.last() {
            if tokens <= last.tokens {
                return Err(StatsError::CheckpointOrder {
                    tokens,
                    previous: last.tokens,
                });
            }
        }
        self.checkpoints.push(Checkpoint {
            tokens,
            moments,
            n_kv_heads: self.signature.n_kv_heads as usize,
        });
        Ok(())
    }

    /// The model this table was made for.
    pub fn signature(&self) -> &ModelSignature {
        &self.signature
    }

    /// Distance between checkpoints, in tokens.
    pub fn stride(&self) -> u64 {
        self.stride
    }

    /// All checkpoints, shortest first.
    pub fn checkpoints(&self) -> &[Checkpoint] {
        &self.checkpoints
    }

    /// The checkpoint for a prompt of `prompt_len` tokens: the largest `m <= prompt_len -
    /// offset`.
    pub fn lookup(&self, prompt_len: usize, offset: usize) -> Result<&Checkpoint> {
        let limit = prompt_len.checked_sub(offset).map(|v| v as u64);
        let found =
            limit.and_then(|limit| self.checkpoints.iter().rev().find(|c| c.tokens <= limit));
        found.ok_or(StatsError::NoCheckpoint {
            prompt_len,
            offset,
            smallest: self.checkpoints.first().map_or(0, |c| c.tokens),
        })
    }

    /// Encode as a file.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        self.signature.encode(&mut e);
        e.u64(self.stride);
        e.u64(self.checkpoints.len() as u64);
        for c in &self.checkpoints {
            e.u64(c.tokens);
            for m in &c.moments {
                e.u64(m.count());
                e.f64s(m.mean());
                e.f64s(m.m2_packed());
            }
        }
        e.finish(&FORMAT)
    }

    /// Decode a file; with `expected`, also refuse a table made for another model.
    pub fn from_bytes(bytes: &[u8], expected: Option<&ModelSignature>) -> Result<Self> {
        let (mut dec, signature) = codec::open_for_model(bytes, &FORMAT, expected)?;
        let table = Self::decode_body(&mut dec, signature)?;
        dec.finish()?;
        Ok(table)
    }

    fn decode_body(dec: &mut Decoder<'_>, signature: ModelSignature) -> Result<Self> {
        let at = dec.offset();
        if signature.head_dim > MAX_HEAD_DIM
            || signature.n_layers as u64 * signature.n_kv_heads as u64 > MAX_HEADS
        {
            return Err(StatsError::Invalid {
                what: "model signature",
                offset: at,
                reason: format!(
                    "{} layers x {} KV heads of dimension {} is beyond any supported model",
                    signature.n_layers, signature.n_kv_heads, signature.head_dim
                ),
            });
        }
        let d = signature.head_dim as u64;
        let stride = dec.u64("stride")?;
        let at = dec.offset();
        let n_checkpoints = dec.u64("checkpoint count")?;
        let heads = signature.n_layers as u64 * signature.n_kv_heads as u64;
        let per_checkpoint = 8 + heads * (8 + 8 * d + 8 * d * (d + 1) / 2);
        if n_checkpoints.saturating_mul(per_checkpoint) > dec.remaining() as u64 {
            return Err(StatsError::Truncated {
                what: "checkpoints",
                offset: at,
                needed: n_checkpoints.saturating_mul(per_checkpoint),
                available: dec.remaining(),
            });
        }
        let mut table = MomentTable::new(signature, stride);
        for _ in 0..n_checkpoints {
            let at = dec.offset();
            let tokens = dec.u64("checkpoint tokens")?;
            let mut moments = Vec::with_capacity(heads as usize);
            for _ in 0..heads {
                let count = dec.u64("key count")?;
                let mean = dec.f64s("mean", d)?;
                let m2 = dec.f64s("covariance", d * (d + 1) / 2)?;
                moments.push(KeyMoments::from_parts(count, mean, m2)?);
            }
            table
                .push_checkpoint(tokens, moments)
                .map_err(|e| StatsError::Invalid {
                    what: "checkpoint",
                    offset: at,
                    reason: e.to_string(),
                })?;
        }
        Ok(table)
    }

    /// Write to a file.
    pub fn save(&self, path: &Path) -> Result<()> {
        codec::write_file(path, &self.to_bytes())
    }

    /// Read from a file; with `expected`, refuse a table made for another model.
    pub fn load(path: &Path, expected: Option<&ModelSignature>) -> Result<Self> {
        Self::from_bytes(&codec::read_file(path)?, expected)
    }
}
