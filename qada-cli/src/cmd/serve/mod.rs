//! `qada serve`: an OpenAI-compatible HTTP server (`/v1/chat/completions`,
//! `/v1/completions`, `/v1/models`, `/health`, `/metrics`) with a prefix cache.
//!
//! - [`api`]: the request format, checked field by field, and OpenAI's error shape;
//! - [`engine`]: tokens and settings per request, sessions, generation on blocking threads;
//! - [`prefix`]: kept sessions and their marks, least recently used out first;
//! - [`http`]: routes, the API key, the queue, JSON and server-sent-event answers;
//! - [`metrics`]: the Prometheus text format.

mod api;
mod engine;
mod http;
mod metrics;
mod prefix;

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use qada_model::ActPrecision;
use tokio::sync::Semaphore;

use crate::common::{fail, load_model, CliResult, CriterionArgs, Fallback, ModelArgs};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// The setting requests decode with unless their `qada` object names another (as for
    /// `generate`: the model's shipped setting by default).
    #[command(flatten)]
    criterion: CriterionArgs,
    /// Address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port (0: any free one, printed on standard error).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Require `Authorization: Bearer KEY` on /v1/* and /metrics.
    #[arg(long)]
    api_key: Option<String>,
    /// Generations that run at once (each a session; they share the cores).
    #[arg(long, default_value_t = 1)]
    parallel: usize,
    /// Most requests waiting for a session; more are answered 429 with Retry-After.
    #[arg(long, default_value_t = 16)]
    queue: u64,
    /// Megabytes of K/V cache that running and kept sessions may hold. A request that could
    /// need more alone is refused; kept sessions (the prefix cache) are dropped, least
    /// recently used first, to stay within it. Default: room for one full context per
    /// session and one more for the prefix cache.
    #[arg(long)]
    cache_mb: Option<f64>,
    /// Most sessions kept for their prompt's prefix after their request (0: no prefix
    /// cache); the least recently used goes first.
    #[arg(long, default_value_t = 8)]
    keep: usize,
    /// Largest request body, in megabytes.
    #[arg(long, default_value_t = 8.0)]
    body_mb: f64,
    /// Name `/v1/models` lists and requests give (default: the --model short name, else the
    /// file's name without `.gguf`).
    #[arg(long)]
    name: Option<String>,
}

pub fn run(mut a: Args) -> CliResult<()> {
    if a.parallel == 0 {
        return fail("--parallel 0: at least one session must run");
    }
    if !(a.body_mb > 0.0 && a.body_mb.is_finite()) {
        return fail(format!(
            "--body-mb {}: must be a positive number",
            a.body_mb
        ));
    }
    let model = load_model(&a.model, ActPrecision::Int8)?;
    // the server's own setting, checked now so that a bad flag fails at start
    let mut base = a.criterion.clone();
    if let Some(why) = base.resolve(&model, Fallback::Shipped)? {
        eprintln!("{why}");
    }
    base.criterion(&model)?;
    base.window()?;
    // every session holds a share of the model, so it may live on any thread
    let model = Arc::new(model);
    let c = model.config();
    let per_token = engine::kv_bytes_per_token(&model, base.kv);
    let limit = match a.cache_mb {
        Some(mb) if mb > 0.0 && mb.is_finite() => (mb * 1e6) as u64,
        Some(mb) => return fail(format!("--cache-mb {mb}: must be a positive number")),
        None => (a.parallel + 1) as u64 * c.context_length as u64 * per_token,
    };
    let name = a.name.take().unwrap_or_else(|| served_name(&a.model));
    let context_length = c.context_length;
    let engine = Arc::new(engine::Engine::new(
        model,
        name.clone(),
        a.criterion,
        limit,
        a.keep,
    ));
    let app = Arc::new(http::App {
        engine,
        sessions: Arc::new(Semaphore::new(a.parallel)),
        queue: a.queue,
        api_key: a.api_key.clone(),
        next_id: AtomicU64::new(1),
    });
    let router = http::router(app, (a.body_mb * 1e6) as usize);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let addr = format!("{}:{}", a.host, a.port);
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        let local: SocketAddr = listener.local_addr()?;
        eprintln!(
            "qada serve: {name} ({} tokens of context), {} session(s) at once, queue {}, \
             {:.0} MB of K/V cache",
            context_length,
            a.parallel,
            a.queue,
            limit as f64 / 1e6
        );
        eprintln!("listening on http://{local}");
        axum::serve(listener, router)
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .map_err(|e| format!("the server stopped: {e}"))?;
        Ok::<(), Box<dyn std::error::Error>>(())
    })
}

/// The model's name for clients: the short name given to --model, else the file's stem.
fn served_name(m: &ModelArgs) -> String {
    let given = m.model.as_deref().map(|p| p.to_string_lossy().into_owned());
    match given {
        Some(g)
            if qada_model::known_models::KNOWN_MODELS
                .iter()
                .any(|(n, _)| *n == g) =>
        {
            g
        }
        Some(g) => std::path::Path::new(&g)
            .file_stem()
            .map_or(g.clone(), |s| s.to_string_lossy().into_owned()),
        None => qada_model::known_models::KNOWN_MODELS[0].0.to_string(),
    }
}
