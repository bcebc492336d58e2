//! `qada.Model`: a GGUF model (a path, or a short name the setup script fetches) with its
//! tokenizer; `generate` (the GIL released, Ctrl-C checked between tokens and between blocks
//! of the prompt), `analyze` (the per-head report of `qada analyze` as numpy arrays) and
//! `session` (see `session.rs`).

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use pyo3::exceptions::PyFileNotFoundError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use qada_core::{CriterionParams, Tau};
use qada_eval::probe::probe_decode;
use qada_eval::{ProbeOptions, Report};
use qada_model::known_models::{repo_roots, resolve_model_file};
use qada_model::ActPrecision;
use qada_model::{
    generate_after_prefill, GenerateConfig, LoadOptions, Model, Sampler, SamplingParams, Session,
    SessionOptions, WeightFormat,
};

use crate::analyze::report_dict;
use crate::arrays::token_ids;
use crate::errors::{bad_arg, check_tau, qada_err};
use crate::interrupt::{check_signals, prefill_checking_signals};
use crate::options::Decoding;
use crate::session::PySession;

/// A GGUF model and its tokenizer, loaded once and shared by every call and session.
#[pyclass(name = "Model", module = "qada", frozen)]
pub struct PyModel {
    pub(crate) model: Arc<Model>,
    path: PathBuf,
}

impl PyModel {
    /// Token ids of a prompt: a string (wrapped in the chat template when `chat`), or ids.
    fn prompt_ids(
        &self,
        prompt: &Bound<'_, PyAny>,
        chat: bool,
        system: Option<&str>,
    ) -> PyResult<Vec<u32>> {
        if let Ok(text) = prompt.cast::<PyString>() {
            return self.encode(&text.to_cow()?, chat, system);
        }
        let ids: Vec<i64> = prompt.extract().map_err(|_| {
            bad_arg(
                "prompt",
                "a string or a list of token ids",
                prompt
                    .get_type()
                    .name()
                    .map_or_else(|_| "another type".to_string(), |n| n.to_string()),
            )
        })?;
        if chat {
            return Err(bad_arg(
                "chat",
                "False with token ids (the template applies to text)",
                true,
            ));
        }
        token_ids("prompt", &ids, self.model.config().vocab_size)
    }

    fn encode(&self, text: &str, chat: bool, system: Option<&str>) -> PyResult<Vec<u32>> {
        let tok = &self.model.tokenizer();
        let text = match (chat, tok.chat_template()) {
            (false, _) => text.to_string(),
            (true, Some(t)) => t.render_user(text, system).map_err(qada_err)?,
            (true, None) => {
                return Err(bad_arg(
                    "chat",
                    "False: the model file has no chat template this build understands",
                    true,
                ))
            }
        };
        tok.encode(&text).map_err(qada_err)
    }
}

/// What `Model.generate` returns: the text, the ids and what the criterion saved.
#[pyclass(name = "Generation", module = "qada", frozen, get_all)]
pub struct PyGeneration {
    /// The generated text (up to a stop string).
    text: String,
    /// The generated token ids (end of generation excluded).
    ids: Vec<u32>,
    /// The prompt's token ids.
    prompt_ids: Vec<u32>,
    /// Why generation stopped: eos, max_tokens, stop_string, context_full.
    stop_reason: &'static str,
    /// The criterion that decided.
    criterion: String,
    /// Fraction of (step, global layer, head) decisions that were local.
    sparsity: f64,
    /// Attention FLOPs relative to dense (decisions included).
    flops_ratio: f64,
    /// K/V bytes read relative to dense (decisions included).
    kv_bytes_ratio: f64,
    /// Seconds of prefill and of decoding.
    prefill_secs: f64,
    decode_secs: f64,
}

#[pymethods]
impl PyGeneration {
    fn __repr__(&self) -> String {
        format!(
            "Generation(text={:?}, tokens={}, stop_reason={:?}, criterion={:?}, sparsity={:.3}, kv_bytes_ratio={:.3})",
            self.text,
            self.ids.len(),
            self.stop_reason,
            self.criterion,
            self.sparsity,
            self.kv_bytes_ratio
        )
    }
    fn __str__(&self) -> &str {
        &self.text
    }
}

/// Defaults of the criterion parameters, for the signatures.
const P: CriterionParams = CriterionParams {
    tau: 0.6,
    page: qada_core::DEFAULT_PAGE,
    clusters: qada_core::DEFAULT_CLUSTERS,
    margin: qada_core::DEFAULT_MARGIN,
    quest_tokens: qada_core::DEFAULT_QUEST_TOKENS,
    channels: qada_core::DEFAULT_CHANNELS,
};

#[pymethods]
impl PyModel {
    /// Load a GGUF model: a path, or a short name (smollm2-135m, qwen2.5-0.5b, gemma3-270m,
    /// qwen2.5-1.5b) found under `$QADA_REPO` or the current directory and its ancestors, as
    /// `scripts/setup.sh --model NAME` puts it.
    #[new]
    #[pyo3(signature = (path_or_name, weights="native", activations="f32", ctx=None))]
    fn new(
        py: Python<'_>,
        path_or_name: PathBuf,
        weights: &str,
        activations: &str,
        ctx: Option<usize>,
    ) -> PyResult<Self> {
        let path = resolve_model_file(&path_or_name, &repo_roots())
            .map_err(|e| PyFileNotFoundError::new_err(e.to_string()))?;
        let weights = match weights {
            "native" => WeightFormat::Native,
            "f32" => WeightFormat::F32,
            w => {
                return Err(bad_arg(
                    "weights",
                    "\"native\" or \"f32\"",
                    format!("{w:?}"),
                ))
            }
        };
        let activations = match activations {
            "f32" => ActPrecision::F32,
            "int8" => ActPrecision::Int8,
            a => {
                return Err(bad_arg(
                    "activations",
                    "\"f32\" or \"int8\"",
                    format!("{a:?}"),
                ))
            }
        };
        let opts = LoadOptions {
            rope_base: None,
            weights,
            activations,
        };
        let mut model = py
            .detach(|| Model::load(&path, &opts))
            .map_err(|e| qada_err(format!("{}: {e}", path.display())))?;
        if let Some(n) = ctx {
            let file = model.config().context_length;
            if n == 0 || n > file {
                return Err(bad_arg(
                    "ctx",
                    format!("1..={file} (the file's context length)"),
                    n,
                ));
            }
            model.limit_context(n).map_err(qada_err)?;
        }
        Ok(PyModel {
            model: Arc::new(model),
            path,
        })
    }

    /// The GGUF file.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }
    /// Transformer layers.
    #[getter]
    fn n_layers(&self) -> usize {
        self.model.config().n_layers
    }
    /// Query heads per layer.
    #[getter]
    fn n_heads(&self) -> usize {
        self.model.config().n_heads
    }
    /// KV heads per layer.
    #[getter]
    fn n_kv_heads(&self) -> usize {
        self.model.config().n_kv_heads
    }
    /// Head dimension `d`.
    #[getter]
    fn head_dim(&self) -> usize {
        self.model.config().head_dim
    }
    /// Most tokens a sequence may hold.
    #[getter]
    fn context_length(&self) -> usize {
        self.model.config().context_length
    }
    /// Vocabulary size.
    #[getter]
    fn vocab_size(&self) -> usize {
        self.model.config().vocab_size
    }
    /// The layers that attend to the whole context (the others slide a window): the layers a
    /// criterion decides in.
    #[getter]
    fn global_layers(&self) -> Vec<usize> {
        self.model.config().global_layers().collect()
    }
    /// The attention scale of the model's heads (`1 / sqrt(d)` unless the family says
    /// otherwise).
    #[getter]
    fn attention_scale(&self) -> f32 {
        self.model.config().attention_scale
    }

    /// Token ids of `text` (a BOS first where the model adds one); with `chat`, the text is a
    /// user message in the model's chat template.
    #[pyo3(signature = (text, chat=false, system=None))]
    fn tokenize(&self, text: &str, chat: bool, system: Option<&str>) -> PyResult<Vec<u32>> {
        self.encode(text, chat, system)
    }

    /// The text of token ids (a leading BOS dropped).
    fn detokenize(&self, ids: Vec<i64>) -> PyResult<String> {
        let ids = token_ids("ids", &ids, self.model.config().vocab_size)?;
        Ok(self.model.tokenizer().decode(&ids))
    }

    /// Generate text after `prompt` (a string, or token ids) with `criterion` deciding every
    /// head of every global layer at every step. Greedy at temperature 0. Ctrl-C stops it
    /// between tokens and between blocks of the prompt (KeyboardInterrupt).
    #[pyo3(signature = (
        prompt, max_tokens=64, criterion="dense", tau=P.tau, temperature=0.0, top_k=0,
        top_p=1.0, seed=0, chat=false, system=None, stop=Vec::new(), ignore_eos=false,
        sink=16, local=128, kv="f16", moments="current", group="head", page=P.page,
        clusters=P.clusters, margin=P.margin, channels=P.channels, dense_below=None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn generate(
        &self,
        py: Python<'_>,
        prompt: &Bound<'_, PyAny>,
        max_tokens: usize,
        criterion: &str,
        tau: f64,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        seed: u64,
        chat: bool,
        system: Option<&str>,
        stop: Vec<String>,
        ignore_eos: bool,
        sink: usize,
        local: usize,
        kv: &str,
        moments: &str,
        group: &str,
        page: usize,
        clusters: usize,
        margin: f64,
        channels: usize,
        dense_below: Option<usize>,
    ) -> PyResult<PyGeneration> {
        let ids = self.prompt_ids(prompt, chat, system)?;
        let ctx = self.model.config().context_length;
        if ids.is_empty() || ids.len() >= ctx {
            return Err(bad_arg(
                "prompt",
                format!("1 to {} tokens (the context length is {ctx})", ctx - 1),
                format!("{} tokens", ids.len()),
            ));
        }
        let d = Decoding {
            criterion,
            tau,
            group,
            page,
            channels,
            clusters,
            margin,
            dense_below,
            sink,
            local,
            kv,
            moments,
        };
        let opts = SessionOptions {
            criterion: d.criterion(ctx)?,
            window: d.window()?,
            moments: d.moments(&self.model)?,
            capacity: None,
            kv_dtype: d.kv_dtype()?,
        };
        let cfg = GenerateConfig {
            max_new_tokens: max_tokens,
            stop_at_eos: !ignore_eos,
            stop_strings: stop,
            sampling: SamplingParams {
                temperature,
                top_k,
                top_p,
                seed,
            },
        };
        let model = &*self.model;
        // the sampling parameters checked before the prompt runs
        Sampler::new(cfg.sampling.clone()).map_err(qada_err)?;
        let outcome = py.detach(|| -> qada_model::Result<ControlFlow<PyErr, PyGeneration>> {
            let mut session = Session::new(model, opts)?;
            let t0 = Instant::now();
            if let ControlFlow::Break(e) = prefill_checking_signals(&mut session, &ids)? {
                return Ok(ControlFlow::Break(e));
            }
            let mut interrupt = None;
            let g = generate_after_prefill(
                &mut session,
                &ids,
                t0.elapsed().as_secs_f64(),
                &cfg,
                &mut |_| match check_signals() {
                    ControlFlow::Continue(()) => ControlFlow::Continue(()),
                    ControlFlow::Break(e) => {
                        interrupt = Some(e);
                        ControlFlow::Break(())
                    }
                },
            )?;
            if let Some(e) = interrupt {
                return Ok(ControlFlow::Break(e));
            }
            let acc = session.accounting();
            Ok(ControlFlow::Continue(PyGeneration {
                text: g.text,
                ids: g.generated_ids,
                prompt_ids: g.prompt_ids,
                stop_reason: g.stop.as_str(),
                criterion: session.criterion().name().to_string(),
                sparsity: acc.sparsity(),
                flops_ratio: acc.flops_ratio(),
                kv_bytes_ratio: acc.kv_bytes_ratio(),
                prefill_secs: g.prefill_secs,
                decode_secs: g.decode_secs,
            }))
        });
        match outcome.map_err(qada_err)? {
            ControlFlow::Continue(g) => Ok(g),
            ControlFlow::Break(interrupted) => Err(interrupted),
        }
    }

    /// How a criterion (QAdA by default) labels every head against the oracle, as
    /// `qada analyze` reports it: decode `steps` greedy tokens densely after `prompt` and probe
    /// every global layer's heads at the last prompt position and every generated one. Returns
    /// a dict of numpy arrays (per head: layers x heads) and numbers.
    #[pyo3(signature = (
        prompt, tau=P.tau, criterion="approx", steps=16, chat=false, system=None, sink=16,
        local=128, kv="f16", moments="current", page=P.page, clusters=P.clusters,
        margin=P.margin, channels=P.channels,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn analyze<'py>(
        &self,
        py: Python<'py>,
        prompt: &Bound<'py, PyAny>,
        tau: f64,
        criterion: &str,
        steps: usize,
        chat: bool,
        system: Option<&str>,
        sink: usize,
        local: usize,
        kv: &str,
        moments: &str,
        page: usize,
        clusters: usize,
        margin: f64,
        channels: usize,
    ) -> PyResult<Bound<'py, PyDict>> {
        let ids = self.prompt_ids(prompt, chat, system)?;
        let tau = Tau::new(check_tau(tau)?).map_err(qada_err)?;
        let d = Decoding {
            criterion,
            tau: tau.get(),
            group: "head",
            page,
            channels,
            clusters,
            margin,
            dense_below: None,
            sink,
            local,
            kv,
            moments,
        };
        // approx keeps the Gaussian probe (tau-free), as `qada analyze` does
        let estimator = match criterion {
            "approx" => None,
            _ => Some(d.criterion(self.model.config().context_length)?),
        };
        let opts = ProbeOptions {
            window: d.window()?,
            moments: d.moments(&self.model)?,
            kv_dtype: d.kv_dtype()?,
            steps,
        };
        let model = &*self.model;
        let run = py
            .detach(|| probe_decode(model, &ids, opts, estimator, &mut |_, _| {}))
            .map_err(qada_err)?;
        let c = &self.model.config();
        let r = Report::new(&run.probes, tau, c.n_layers, c.n_heads);
        let out = report_dict(py, &r, &run)?;
        out.set_item("criterion", criterion)?;
        out.set_item("prompt_tokens", ids.len())?;
        out.set_item("steps", steps)?;
        Ok(out)
    }

    /// A decoding session on this model for your own loop: `prefill`, `step`, and the cache's
    /// rotated keys and values and the last step's rotated queries per layer.
    #[pyo3(signature = (
        criterion="dense", tau=P.tau, sink=16, local=128, kv="f32", moments="current",
        group="head", page=P.page, clusters=P.clusters, margin=P.margin, capacity=None,
        channels=P.channels, dense_below=None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn session(
        &self,
        criterion: &str,
        tau: f64,
        sink: usize,
        local: usize,
        kv: &str,
        moments: &str,
        group: &str,
        page: usize,
        clusters: usize,
        margin: f64,
        capacity: Option<usize>,
        channels: usize,
        dense_below: Option<usize>,
    ) -> PyResult<PySession> {
        let d = Decoding {
            criterion,
            tau,
            group,
            page,
            channels,
            clusters,
            margin,
            dense_below,
            sink,
            local,
            kv,
            moments,
        };
        let ctx = self.model.config().context_length;
        if let Some(n) = capacity {
            if n == 0 || n > ctx {
                return Err(bad_arg(
                    "capacity",
                    format!("1..={ctx} (the context length)"),
                    n,
                ));
            }
        }
        let opts = SessionOptions {
            criterion: d.criterion(ctx)?,
            window: d.window()?,
            moments: d.moments(&self.model)?,
            capacity,
            kv_dtype: d.kv_dtype()?,
        };
        PySession::new(Arc::clone(&self.model), opts)
    }

    fn __repr__(&self) -> String {
        let c = &self.model.config();
        format!(
            "Model({:?}, family={}, layers={}, heads={}, kv_heads={}, head_dim={})",
            self.path.display().to_string(),
            c.family.name,
            c.n_layers,
            c.n_heads,
            c.n_kv_heads,
            c.head_dim
        )
    }
}
