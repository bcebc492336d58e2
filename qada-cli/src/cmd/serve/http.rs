//! The HTTP side: routes, the API key, the queue in front of the sessions, and the answers
//! (one JSON body, or server-sent events).
//!
//! A request is parsed and prepared (tokenized, checked) on a blocking thread, waits for one
//! of the `--parallel` sessions in a queue of at most `--queue` (full: 429 with
//! Retry-After), then runs on a blocking thread of its own, so no decoding ever runs on the
//! async executor.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event as Sse, KeepAlive};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_stream::wrappers::ReceiverStream;

use super::api::{self, ApiError, Endpoint};
use super::engine::{Engine, Event, Summary};

/// What every handler shares.
pub struct App {
    /// The model and the kept sessions.
    pub engine: Arc<Engine>,
    /// One permit per session that may run at once (`--parallel`).
    pub sessions: Arc<Semaphore>,
    /// Most requests waiting for a session (`--queue`).
    pub queue: u64,
    /// `--api-key`: the bearer token `/v1/*` and `/metrics` require.
    pub api_key: Option<String>,
    /// Numbers the response ids.
    pub next_id: AtomicU64,
}

/// The routes, with a body limit of `body_limit` bytes.
pub fn router(app: Arc<App>, body_limit: usize) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .fallback(not_found)
        .layer(axum::extract::DefaultBodyLimit::max(body_limit))
        .with_state(app)
}

/// An error as a response: its status, OpenAI's body, `Retry-After` when it has one.
fn error_response(e: &ApiError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = (status, axum::Json(e.body())).into_response();
    if let Some(s) = e.retry_after {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    r
}

/// 401 unless the request carries the server's key (when it has one).
fn authorize(app: &App, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(key) = &app.api_key else {
        return Ok(());
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if given == Some(key.as_str()) {
        return Ok(());
    }
    Err(ApiError::status(
        401,
        "invalid_request_error",
        "missing or wrong API key: send the server's --api-key as `Authorization: Bearer KEY`",
    )
    .code("invalid_api_key"))
}

async fn health() -> Response {
    axum::Json(json!({"status": "ok"})).into_response()
}

async fn not_found() -> Response {
    error_response(&ApiError::status(
        404,
        "invalid_request_error",
        "no such endpoint: this server answers /v1/chat/completions, /v1/completions, \
         /v1/models, /health and /metrics",
    ))
}

async fn metrics(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&app, &headers) {
        return error_response(&e);
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.engine.metrics.render(),
    )
        .into_response()
}

async fn models(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&app, &headers) {
        return error_response(&e);
    }
    axum::Json(json!({
        "object": "list",
        "data": [{
            "id": app.engine.name,
            "object": "model",
            "created": now(),
            "owned_by": "qada",
            "context_length": app.engine.model().config().context_length,
        }],
    }))
    .into_response()
}

async fn chat(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let r = complete(&app, &headers, body, Endpoint::Chat).await;
    answered(&app, "chat", r)
}

async fn completions(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let r = complete(&app, &headers, body, Endpoint::Completion).await;
    answered(&app, "completions", r)
}

/// Count the answer and turn an error into its response.
fn answered(app: &App, endpoint: &'static str, r: Result<Response, ApiError>) -> Response {
    let response = r.unwrap_or_else(|e| error_response(&e));
    app.engine
        .metrics
        .answered(endpoint, response.status().as_u16());
    response
}

/// Seconds since the epoch.
fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Takes a place in the queue; gives it back when dropped (the client may leave while it
/// waits).
struct InQueue<'a>(&'a App);

impl Drop for InQueue<'_> {
    fn drop(&mut self) {
        self.0.engine.metrics.queued.fetch_sub(1, Relaxed);
    }
}

/// Wait for a session, or 429 when the queue is full.
async fn session_permit(app: &App) -> Result<OwnedSemaphorePermit, ApiError> {
    if let Ok(p) = app.sessions.clone().try_acquire_owned() {
        return Ok(p);
    }
    let m = &app.engine.metrics;
    if m.queued.fetch_add(1, Relaxed) >= app.queue {
        m.queued.fetch_sub(1, Relaxed);
        return Err(ApiError {
            retry_after: Some(5),
            ..ApiError::status(
                429,
                "rate_limit_error",
                format!(
                    "every session is busy and {} requests already wait (--queue): retry later",
                    app.queue
                ),
            )
        });
    }
    let _place = InQueue(app);
    app.sessions
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| ApiError::status(503, "server_error", "the server is shutting down"))
}

async fn complete(
    app: &Arc<App>,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    endpoint: Endpoint,
) -> Result<Response, ApiError> {
    authorize(app, headers)?;
    let body = body.map_err(|r| {
        ApiError::status(
            r.status().as_u16(),
            "invalid_request_error",
            format!("the request body could not be read: {}", r.body_text()),
        )
    })?;
    let req = api::parse(endpoint, &body)?;
    let engine = app.engine.clone();
    let (req, prepared) = tokio::task::spawn_blocking(move || {
        let p = engine.prepare(&req);
        (req, p)
    })
    .await
    .map_err(|e| ApiError::status(500, "server_error", format!("preparing failed: {e}")))?;
    let prepared = prepared?;
    let permit = session_permit(app).await?;
    // brief (a lock and a lookup): a refusal is answered before the stream starts
    let admitted = app.engine.admit(&prepared)?;
    let (tx, rx) = mpsc::channel(64);
    let engine = app.engine.clone();
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        engine.run(prepared, admitted, &tx);
    });
    let id = app.next_id.fetch_add(1, Relaxed);
    let head = Head {
        id: match endpoint {
            Endpoint::Chat => format!("chatcmpl-qada-{id}"),
            Endpoint::Completion => format!("cmpl-qada-{id}"),
        },
        created: now(),
        model: app.engine.name.clone(),
        endpoint,
    };
    if req.stream {
        Ok(stream(head, rx, req.include_usage))
    } else {
        whole(head, rx).await
    }
}

/// What every body and chunk of one response repeats.
struct Head {
    id: String,
    created: u64,
    model: String,
    endpoint: Endpoint,
}

impl Head {
    /// A body or chunk with these `choices` (and `usage`, when given).
    fn object(&self, chunk: bool, choices: Value, usage: Option<&Value>) -> Value {
        let object = match (self.endpoint, chunk) {
            (Endpoint::Chat, false) => "chat.completion",
            (Endpoint::Chat, true) => "chat.completion.chunk",
            (Endpoint::Completion, _) => "text_completion",
        };
        let mut v = json!({
            "id": self.id,
            "object": object,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": concat!("qada-", env!("CARGO_PKG_VERSION")),
            "choices": choices,
        });
        if let Some(u) = usage {
            v["usage"] = u.clone();
        }
        v
    }

    /// One choice: the text so far (or this chunk's), and why it ended.
    fn choice(&self, chunk: bool, text: &str, finish: Option<&str>, first: bool) -> Value {
        match (self.endpoint, chunk) {
            (Endpoint::Chat, false) => json!({
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": null,
                "finish_reason": finish,
            }),
            (Endpoint::Chat, true) => {
                let mut delta = json!({});
                if first {
                    delta["role"] = json!("assistant");
                }
                if !text.is_empty() || first {
                    delta["content"] = json!(text);
                }
                json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
            }
            (Endpoint::Completion, _) => json!({
                "index": 0,
                "text": text,
                "logprobs": null,
                "finish_reason": finish,
            }),
        }
    }
}

/// The whole answer as one JSON body.
async fn whole(head: Head, mut rx: mpsc::Receiver<Event>) -> Result<Response, ApiError> {
    let mut text = String::new();
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Text(t) => text.push_str(&t),
            Event::Failed(e) => return Err(e),
            Event::Done(s) => {
                let Summary {
                    finish_reason,
                    usage,
                } = *s;
                let choice = head.choice(false, &text, Some(finish_reason), false);
                return Ok(
                    axum::Json(head.object(false, json!([choice]), Some(&usage))).into_response(),
                );
            }
        }
    }
    Err(ApiError::status(
        500,
        "server_error",
        "the generation ended without an answer",
    ))
}

/// The answer as server-sent events: a first chunk (the role, for chat), one per piece of
/// text, a last one with the finish reason, the usage when asked, then `[DONE]`. An error
/// after the stream began is sent as an `error` object.
fn stream(head: Head, rx: mpsc::Receiver<Event>, include_usage: bool) -> Response {
    let head = Arc::new(head);
    let first = {
        let h = head.clone();
        let chunk = h.object(true, json!([h.choice(true, "", None, true)]), None);
        futures_util::stream::iter([data(&chunk)])
    };
    let body = ReceiverStream::new(rx).flat_map(move |ev| {
        let h = &head;
        let events: Vec<Result<Sse, Infallible>> = match ev {
            Event::Text(t) => vec![data(&h.object(
                true,
                json!([h.choice(true, &t, None, false)]),
                None,
            ))],
            Event::Failed(e) => vec![data(&e.body()), Ok(Sse::default().data("[DONE]"))],
            Event::Done(s) => {
                let last = h.choice(true, "", Some(s.finish_reason), false);
                let mut v = vec![data(&h.object(true, json!([last]), None))];
                if include_usage {
                    v.push(data(&h.object(true, json!([]), Some(&s.usage))));
                }
                v.push(Ok(Sse::default().data("[DONE]")));
                v
            }
        };
        futures_util::stream::iter(events)
    });
    axum::response::Sse::new(first.chain(body))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(5)))
        .into_response()
}

/// One `data:` event of a JSON value.
fn data(v: &Value) -> Result<Sse, Infallible> {
    Ok(Sse::default().data(v.to_string()))
}
