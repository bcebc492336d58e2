//! The model side of the server: a request becomes tokens and a setting ([`Engine::prepare`],
//! cheap), then runs on a blocking thread ([`Engine::run`]): a kept session with the longest
//! shared prefix is restored (or a new one made), the rest of the prompt prefilled in whole
//! blocks with marks for later prompts, and tokens generated and sent as they become text.
//! The client going away (its channel closed) stops prefill between blocks and generation
//! at the next token.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use qada_core::Accounting;
use qada_model::{
    generate_after_prefill, GenerateConfig, Generation, Model, SamplingParams, Session,
    SessionCheckpoint, SessionOptions, StopReason,
};
use serde_json::{json, Value};
use tokio::sync::mpsc::Sender;

use super::api::{ApiError, GenRequest, Prompt};
use super::metrics::Metrics;
use super::prefix::{keeps_mark, Kept, PrefixCache};
use crate::common::{CriterionArgs, Fallback};

/// What a running generation sends its client.
#[derive(Debug)]
pub enum Event {
    /// Text that became final (never empty).
    Text(String),
    /// The end, with the counts and qada's accounting.
    Done(Box<Summary>),
    /// It failed.
    Failed(ApiError),
}

/// How a generation ended.
#[derive(Clone, Debug)]
pub struct Summary {
    /// OpenAI's `finish_reason`: `stop` or `length`.
    pub finish_reason: &'static str,
    /// The `usage` object (token counts, cached tokens, qada's accounting).
    pub usage: Value,
}

/// A request ready to run: its tokens, the setting it decodes with, how it stops.
pub struct Prepared {
    /// Prompt tokens.
    pub tokens: Vec<u32>,
    /// The criterion, window, moments and cache type, as the CLI's flags.
    args: CriterionArgs,
    /// The setting's identity, for the prefix cache.
    key: String,
    /// When generation stops and how it samples.
    cfg: GenerateConfig,
    /// K/V bytes the request may hold at most (prompt and new tokens).
    bytes: u64,
}

/// A request's reservation of cache bytes, with the kept session it starts from (if any):
/// made by [`Engine::admit`], consumed by [`Engine::run`].
pub struct Admitted(Option<(KeptSession, usize)>);

/// A session kept for its prefix, with its marks.
type KeptSession = Kept<Session<'static>, SessionCheckpoint>;

/// Checkpoints inside a prompt: `(tokens before, checkpoint)`.
type Marks = Vec<(usize, SessionCheckpoint)>;

/// The model, the setting the server was started with, the kept sessions.
pub struct Engine {
    model: Arc<Model>,
    /// The name `/v1/models` lists and requests may give.
    pub name: String,
    /// The server's flags (a request's `qada` fields override them).
    base: CriterionArgs,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// Bytes of K/V (and marks) all sessions, running and kept, may hold.
    limit: u64,
    /// Bytes the running generations reserved.
    running: AtomicU64,
    kept: Mutex<PrefixCache<Session<'static>, SessionCheckpoint>>,
}

/// The lock, whatever a panicking holder left (the cache stays consistent: entries are
/// taken out whole and put back whole).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Engine {
    /// An engine for `model`, deciding as `base` says (resolved per request), holding at most
    /// `limit` bytes of caches.
    /// `keep` sessions at most kept for their prefix.
    pub fn new(
        model: Arc<Model>,
        name: String,
        base: CriterionArgs,
        limit: u64,
        keep: usize,
    ) -> Self {
        Engine {
            model,
            name,
            base,
            metrics: Arc::new(Metrics::default()),
            limit,
            running: AtomicU64::new(0),
            kept: Mutex::new(PrefixCache::new(keep)),
        }
    }

    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Bytes a mark after `pos` tokens holds, estimated: every KV head's moments (mean and
    /// covariance in f64, and their factored copy), and for criteria that keep page summaries
    /// a copy of them (taken as half the f16 K/V of `pos` tokens; with `d = 64` and pages
    /// of 32 they are 3/8 of it: the keys by channel in 8 bits and the page rows).
    fn mark_bytes(&self, pos: usize, per_token: u64, pages: bool) -> u64 {
        let c = &self.model.config();
        let d = c.head_dim as u64;
        let moments = (c.n_layers * c.n_kv_heads) as u64 * (2 * d * d + 2 * d) * 8;
        moments + if pages { pos as u64 * per_token / 2 } else { 0 }
    }

    /// Check a request against the model and the server and make its tokens and setting.
    pub fn prepare(&self, req: &GenRequest) -> Result<Prepared, ApiError> {
        if let Some(m) = req.model.as_deref() {
            if m != self.name {
                return Err(ApiError::status(
                    404,
                    "invalid_request_error",
                    format!(
                        "the model {m:?} does not exist on this server: it serves {:?} \
                         (GET /v1/models lists it)",
                        self.name
                    ),
                )
                .code("model_not_found"));
            }
        }
        let args = self.request_args(req)?;
        let tokens = self.tokens(&req.prompt)?;
        let ctx = self.model.config().context_length;
        let n = tokens.len();
        if n >= ctx {
            return Err(ApiError::invalid(
                "messages",
                format!(
                    "the prompt has {n} tokens and the model's context holds {ctx}: at most \
                     {} leave room for one new token; shorten the prompt",
                    ctx - 1
                ),
            )
            .code("context_length_exceeded"));
        }
        let max = match req.max_tokens {
            Some(m) if n + m > ctx => {
                return Err(ApiError::invalid(
                    "max_tokens",
                    format!(
                        "the context holds {ctx} tokens, and this request asks for {n} of \
                         prompt plus {m} new ones ({}); ask for at most {} new tokens",
                        n + m,
                        ctx - n
                    ),
                )
                .code("context_length_exceeded"))
            }
            Some(m) => m,
            None => ctx - n,
        };
        let per_token = kv_bytes_per_token(&self.model, args.kv);
        let bytes = (n + max) as u64 * per_token;
        if bytes > self.limit {
            return Err(ApiError::invalid(
                "max_tokens",
                format!(
                    "this request may hold {:.1} MB of K/V cache ({n} prompt and {max} new \
                     tokens at {per_token} bytes each), more than the server's --cache-mb of \
                     {:.1} MB; ask for fewer tokens (max_tokens), or start the server with a \
                     larger --cache-mb",
                    bytes as f64 / 1e6,
                    self.limit as f64 / 1e6
                ),
            )
            .code("cache_limit_exceeded"));
        }
        let cfg = GenerateConfig {
            max_new_tokens: max,
            stop_at_eos: true,
            stop_strings: req.stop.clone(),
            sampling: SamplingParams {
                temperature: req.temperature,
                top_k: req.top_k,
                top_p: req.top_p,
                seed: req.seed.unwrap_or_else(rand::random),
            },
        };
        Ok(Prepared {
            tokens,
            key: format!("{args:?}"),
            args,
            cfg,
            bytes,
        })
    }

    /// The server's flags with the request's `qada` fields, resolved as `qada generate`
    /// resolves its flags (the shipped setting when no criterion is named).
    fn request_args(&self, req: &GenRequest) -> Result<CriterionArgs, ApiError> {
        let mut a = self.base.clone();
        let q = &req.qada;
        match q.criterion.as_deref() {
            Some("shipped") => {
                a.setting = Some("shipped".into());
                a.criterion = None;
            }
            Some(c) => {
                a.setting = None;
                a.criterion = Some(c.to_string());
            }
            None => {}
        }
        if q.tau.is_some() {
            a.tau = q.tau;
        }
        if let Some(kv) = &q.kv {
            a.kv = kv
                .parse()
                .map_err(|e| ApiError::invalid("qada", format!("qada: --kv: {e}")))?;
        }
        if q.page.is_some() {
            a.page = q.page;
        }
        if q.channels.is_some() {
            a.channels = q.channels;
        }
        let bad = |e: Box<dyn std::error::Error>| ApiError::invalid("qada", format!("qada: {e}"));
        a.resolve(&self.model, Fallback::Shipped).map_err(bad)?;
        // build once, so that a bad value is refused now and not on the worker
        a.criterion(&self.model).map_err(bad)?;
        a.window().map_err(bad)?;
        a.moments(&self.model).map_err(bad)?;
        Ok(a)
    }

    /// The prompt's tokens: chat messages through the model's template, text as
    /// `qada generate --raw` encodes it, ids checked against the vocabulary.
    fn tokens(&self, prompt: &Prompt) -> Result<Vec<u32>, ApiError> {
        let tok = &self.model.tokenizer();
        let tokens = match prompt {
            Prompt::Messages(m) => {
                let t = tok.chat_template().ok_or_else(|| {
                    ApiError::invalid(
                        "messages",
                        format!(
                            "this model has no usable chat template ({}): send a raw prompt \
                             to /v1/completions",
                            tok.chat_template_problem().unwrap_or("the file has none")
                        ),
                    )
                })?;
                let text = t
                    .render(m, true)
                    .map_err(|e| ApiError::invalid("messages", format!("chat template: {e}")))?;
                tok.encode(&text)
            }
            Prompt::Text(s) => tok.encode(s),
            Prompt::Tokens(ids) => {
                let vocab = self.model.config().vocab_size;
                if let Some(bad) = ids.iter().find(|&&i| i as usize >= vocab) {
                    return Err(ApiError::invalid(
                        "prompt",
                        format!("token id {bad} is outside the vocabulary of {vocab}"),
                    ));
                }
                Ok(ids.clone())
            }
        }
        .map_err(|e| ApiError::invalid("prompt", format!("tokenizing the prompt: {e}")))?;
        if tokens.is_empty() {
            return Err(ApiError::invalid(
                "prompt",
                "the prompt has no tokens: send some text",
            ));
        }
        Ok(tokens)
    }

    /// Run an admitted request, sending its text and its end on `tx`.
    pub fn run(&self, p: Prepared, admitted: Admitted, tx: &Sender<Event>) {
        let m = &self.metrics;
        m.active.fetch_add(1, Relaxed);
        let mut kept = None;
        let out = self.generate_admitted(&p, admitted.0, &mut kept, tx);
        self.keep(kept, p.bytes);
        let end = match out {
            Ok(s) => Event::Done(Box::new(s)),
            Err(e) => Event::Failed(e),
        };
        m.active.fetch_sub(1, Relaxed);
        // the client may be gone: nobody to tell
        let _ = tx.blocking_send(end);
    }

    /// Reserve the request's bytes, and take the kept session with its longest prefix;
    /// kept sessions are dropped, least recently used first, to make room. A 429 when the
    /// running requests hold too much, before any byte of the answer is sent. The
    /// reservation is released by [`Engine::run`].
    pub fn admit(&self, p: &Prepared) -> Result<Admitted, ApiError> {
        self.reserve(p).map(Admitted)
    }

    fn reserve(&self, p: &Prepared) -> Result<Option<(KeptSession, usize)>, ApiError> {
        let mut kept = lock(&self.kept);
        let found = kept.take(&p.key, &p.tokens);
        let running = self.running.load(Relaxed);
        if running + p.bytes > self.limit {
            if let Some((k, _)) = found {
                kept.put(k);
            }
            return Err(ApiError {
                retry_after: Some(2),
                ..ApiError::status(
                    429,
                    "rate_limit_error",
                    format!(
                        "the running requests hold {:.1} MB of the server's {:.1} MB of K/V \
                         cache and this one may need {:.1} MB: retry shortly",
                        running as f64 / 1e6,
                        self.limit as f64 / 1e6,
                        p.bytes as f64 / 1e6
                    ),
                )
            });
        }
        self.running.fetch_add(p.bytes, Relaxed);
        let budget = self.limit - running - p.bytes;
        let dropped = kept.evict_to(budget);
        let m = &self.metrics;
        m.evictions.fetch_add(dropped as u64, Relaxed);
        m.idle.store(kept.len() as u64, Relaxed);
        m.cache_bytes
            .store(kept.bytes() + running + p.bytes, Relaxed);
        Ok(found)
    }

    /// Keep a session after its request, and release the request's reservation.
    fn keep(&self, k: Option<KeptSession>, reserved: u64) {
        let mut kept = lock(&self.kept);
        let running = self.running.fetch_sub(reserved, Relaxed) - reserved;
        if let Some(k) = k {
            kept.put(k);
        }
        let dropped = kept.evict_to(self.limit.saturating_sub(running));
        let m = &self.metrics;
        m.evictions.fetch_add(dropped as u64, Relaxed);
        m.idle.store(kept.len() as u64, Relaxed);
        m.cache_bytes.store(kept.bytes() + running, Relaxed);
    }

    /// A request once admitted: `found` the kept session to start from; the
    /// session is left in `kept` whatever happens, for the prefix cache.
    fn generate_admitted(
        &self,
        p: &Prepared,
        found: Option<(KeptSession, usize)>,
        kept: &mut Option<KeptSession>,
        tx: &Sender<Event>,
    ) -> Result<Summary, ApiError> {
        let (mut session, mut marks, from) = self.session_for(p, found)?;
        let m = &self.metrics;
        m.prompt_tokens.fetch_add(p.tokens.len() as u64, Relaxed);
        m.cached_tokens.fetch_add(from as u64, Relaxed);
        let t0 = Instant::now();
        let prefilled = prefill_rest(&mut session, &p.tokens, from, &mut marks, tx);
        let prefill_secs = t0.elapsed().as_secs_f64();
        m.prefill_us.fetch_add((prefill_secs * 1e6) as u64, Relaxed);
        let g = match prefilled {
            Ok(true) => Some(generate_after_prefill(
                &mut session,
                &p.tokens,
                prefill_secs,
                &p.cfg,
                &mut |piece| {
                    let sent = piece.is_empty()
                        || tx.blocking_send(Event::Text(piece.to_string())).is_ok();
                    if sent {
                        ControlFlow::Continue(())
                    } else {
                        ControlFlow::Break(())
                    }
                },
            )),
            Ok(false) => None,
            Err(e) => Some(Err(e)),
        };
        // kept whatever happened: its marks hold
        let acc = session.accounting().clone();
        let done = session.len().min(p.tokens.len());
        let bytes = self.kept_bytes(&session, &marks, &p.args)?;
        let tokens = p.tokens[..done].to_vec();
        *kept = Some(Kept::new(session, p.key.clone(), tokens, marks, bytes));
        let left = || {
            m.disconnects.fetch_add(1, Relaxed);
            ApiError::status(499, "client_closed", "the client went away")
        };
        let g = g.ok_or_else(left)?.map_err(internal)?;
        m.decode_us.fetch_add((g.decode_secs * 1e6) as u64, Relaxed);
        m.generated_tokens
            .fetch_add(g.generated_ids.len() as u64, Relaxed);
        let finish_reason = match g.stop {
            StopReason::Eos | StopReason::StopString => "stop",
            StopReason::MaxTokens | StopReason::ContextFull => "length",
            StopReason::Interrupted => return Err(left()),
        };
        Ok(Summary {
            finish_reason,
            usage: usage(&p.args, &g, from, &acc),
        })
    }

    /// The session a request starts from: the kept one restored to its mark, or a new one;
    /// with its marks and the tokens it holds.
    fn session_for(
        &self,
        p: &Prepared,
        found: Option<(KeptSession, usize)>,
    ) -> Result<(Session<'static>, Marks, usize), ApiError> {
        if let Some((k, m)) = found {
            let (mut session, mut marks) = (k.state, k.marks);
            marks.truncate(m + 1);
            // same setting (the cache's key), so the session's criterion is the request's
            session.restore(&marks[m].1).map_err(internal)?;
            let from = marks[m].0;
            return Ok((session, marks, from));
        }
        let bad = |e: Box<dyn std::error::Error>| ApiError::invalid("qada", e.to_string());
        let a = &p.args;
        let opts = SessionOptions {
            criterion: a.criterion(&self.model).map_err(bad)?,
            window: a.window().map_err(bad)?,
            moments: a.moments(&self.model).map_err(bad)?,
            capacity: None,
            kv_dtype: a.kv,
        };
        let session = Session::new(Arc::clone(&self.model), opts).map_err(internal)?;
        Ok((session, Vec::new(), 0))
    }

    /// Bytes a kept session holds: its K/V and its marks (estimated, see
    /// [`Engine::mark_bytes`]).
    fn kept_bytes(
        &self,
        s: &Session<'static>,
        marks: &[(usize, SessionCheckpoint)],
        args: &CriterionArgs,
    ) -> Result<u64, ApiError> {
        let per_token = kv_bytes_per_token(&self.model, args.kv);
        let pages = s.criterion().bulk_summaries().page.is_some();
        let own = s.cache().stored_bytes() as u64;
        Ok(own
            + marks
                .iter()
                .map(|(pos, _)| self.mark_bytes(*pos, per_token, pages))
                .sum::<u64>())
    }
}

/// K/V bytes a token takes in every layer of `model` in a cache of `dtype` (sliding layers
/// counted in full: an upper bound); the unit of `--cache-mb`'s accounting.
pub fn kv_bytes_per_token(model: &Model, dtype: qada_kv::KvDtype) -> u64 {
    let c = model.config();
    (2 * c.n_layers * dtype.bytes_for(c.n_kv_heads * c.head_dim)) as u64
}

/// A model failure, as a 500.
fn internal(e: qada_model::ModelError) -> ApiError {
    ApiError::status(500, "server_error", format!("the model failed: {e}"))
}

/// Run the prompt from `from` (a mark, or 0, where the session stands) in whole blocks,
/// keeping marks; the last part ends prefill. `Ok(false)` when the client left between blocks.
fn prefill_rest(
    session: &mut Session<'static>,
    tokens: &[u32],
    from: usize,
    marks: &mut Marks,
    tx: &Sender<Event>,
) -> qada_model::Result<bool> {
    let n = tokens.len();
    let flow = session.prefill_in_parts(&tokens[from..], |s| {
        if keeps_mark(s.len(), n) {
            marks.push((s.len(), s.checkpoint()));
        }
        if tx.is_closed() {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })?;
    Ok(flow.is_continue())
}

/// OpenAI's `usage`, with the prompt tokens from the cache and qada's accounting.
fn usage(a: &CriterionArgs, g: &Generation, cached: usize, acc: &Accounting) -> Value {
    let (n, completion) = (g.prompt_ids.len(), g.generated_ids.len());
    json!({
        "prompt_tokens": n,
        "completion_tokens": completion,
        "total_tokens": n + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "qada": {
            "setting": a.describe(),
            "criterion": a.name(),
            "tau": a.tau(),
            "kv": a.kv.name(),
            "decisions": acc.total().decisions,
            "sparsity": acc.sparsity(),
            "kv_bytes_ratio": acc.kv_bytes_ratio(),
            "attention_flops_ratio": acc.flops_ratio(),
            "prefill_seconds": g.prefill_secs,
            "decode_seconds": g.decode_secs,
            "decode_tokens_per_second": g.decode_steps as f64 / g.decode_secs.max(1e-9),
        },
    })
}
