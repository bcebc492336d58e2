//! The OpenAI wire format: request bodies parsed and checked field by field (a wrong type
//! names its field), and the error shape every 4xx answer takes.
//!
//! Fields this server does not know are ignored, as OpenAI-compatible servers do (clients send
//! `user`, `presence_penalty`, ...); a known field of the wrong type, or one asking for what
//! the server cannot do (`n > 1`, `logprobs`, `echo`), is refused with its name.

use qada_model::ChatMessage;
use serde_json::{json, Map, Value};

/// An error answered as `{"error": {"message", "type", "param", "code"}}`.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// What was wrong and what to do.
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `authentication_error`, ...
    pub kind: &'static str,
    /// The request field at fault.
    pub param: Option<String>,
    /// A machine-readable code (`model_not_found`, `context_length_exceeded`, ...).
    pub code: Option<&'static str>,
    /// Seconds a client should wait before retrying (429, 503).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// A 400 about `param`.
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        ApiError {
            status: 400,
            message: message.into(),
            kind: "invalid_request_error",
            param: (!param.is_empty()).then(|| param.to_string()),
            code: None,
            retry_after: None,
        }
    }
    /// Any status, no field at fault.
    pub fn status(status: u16, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
        }
    }
    /// With a code.
    pub fn code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }
    /// The JSON body.
    pub fn body(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

/// Which endpoint a request came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `/v1/chat/completions`: messages through the model's chat template.
    Chat,
    /// `/v1/completions`: a raw prompt.
    Completion,
}

/// What the request asks the model to continue.
#[derive(Clone, Debug, PartialEq)]
pub enum Prompt {
    /// Chat messages (rendered by the model's template, generation prompt added).
    Messages(Vec<ChatMessage>),
    /// Text, tokenized as `qada generate --raw` does.
    Text(String),
    /// Token ids, as given.
    Tokens(Vec<u32>),
}

/// qada's own fields, in the request's `qada` object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QadaFields {
    /// Criterion by name (`dense`, `approx`, `channels`, ...) or `shipped`, the model's
    /// calibrated setting.
    pub criterion: Option<String>,
    /// Threshold tau in (0, 1].
    pub tau: Option<f64>,
    /// KV cache element type: `f16`, `f32` or `q8`.
    pub kv: Option<String>,
    /// Keys per page (page-selecting criteria).
    pub page: Option<usize>,
    /// Key channels the channels criterion scores with.
    pub channels: Option<usize>,
}

/// A completion request, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct GenRequest {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// The `model` field, when given.
    pub model: Option<String>,
    /// What to continue.
    pub prompt: Prompt,
    /// Most tokens to generate (`max_tokens` or `max_completion_tokens`); the rest of the
    /// context when absent.
    pub max_tokens: Option<usize>,
    /// Sampling temperature in [0, 2]; OpenAI's default 1.
    pub temperature: f32,
    /// Nucleus mass in (0, 1].
    pub top_p: f32,
    /// Most likely tokens kept (0: all).
    pub top_k: usize,
    /// Seed; drawn at random when absent.
    pub seed: Option<u64>,
    /// Stop strings (at most 4).
    pub stop: Vec<String>,
    /// Server-sent events instead of one JSON body.
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk with the usage.
    pub include_usage: bool,
    /// qada's fields.
    pub qada: QadaFields,
}

/// Most stop strings a request may give (OpenAI's limit).
pub const MAX_STOP: usize = 4;

/// Parse a request body for `endpoint`.
pub fn parse(endpoint: Endpoint, body: &[u8]) -> Result<GenRequest, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid(
            "",
            format!("the body is not valid JSON (UTF-8): {e}; send a JSON object"),
        )
    })?;
    let Value::Object(obj) = value else {
        return Err(ApiError::invalid(
            "",
            "the body must be a JSON object, as OpenAI's API takes",
        ));
    };
    let f = Fields(&obj);
    let prompt = match endpoint {
        Endpoint::Chat => Prompt::Messages(messages(f.get("messages").ok_or_else(|| {
            ApiError::invalid(
                "messages",
                "`messages` is required: a list of {role, content}",
            )
        })?)?),
        Endpoint::Completion => prompt(f.get("prompt").ok_or_else(|| {
            ApiError::invalid(
                "prompt",
                "`prompt` is required: a string or a list of token ids",
            )
        })?)?,
    };
    if let Some(n) = f.uint("n")? {
        if n != 1 {
            return Err(ApiError::invalid("n", format!("n = {n}: this server returns one choice per request; send n = 1 or leave it out")));
        }
    }
    for unsupported in ["logprobs", "echo"] {
        if f.bool(unsupported)?.unwrap_or(false) {
            return Err(ApiError::invalid(
                unsupported,
                format!("`{unsupported}` is not supported by this server; leave it out"),
            ));
        }
    }
    let max_tokens = match (f.uint("max_tokens")?, f.uint("max_completion_tokens")?) {
        (Some(a), _) => Some(("max_tokens", a)),
        (None, Some(b)) => Some(("max_completion_tokens", b)),
        (None, None) => None,
    };
    if let Some((name, 0)) = max_tokens {
        return Err(ApiError::invalid(
            name,
            format!("{name} = 0: ask for at least one token"),
        ));
    }
    let temperature = f.number("temperature")?.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::invalid(
            "temperature",
            format!("temperature = {temperature}: must be in [0, 2] (0 is greedy)"),
        ));
    }
    let top_p = f.number("top_p")?.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::invalid(
            "top_p",
            format!("top_p = {top_p}: must be in (0, 1]"),
        ));
    }
    let stop = match f.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                ApiError::invalid("stop", "`stop` must be a string or a list of strings")
            })?,
        Some(_) => {
            return Err(ApiError::invalid(
                "stop",
                "`stop` must be a string or a list of strings",
            ))
        }
    };
    if stop.len() > MAX_STOP {
        return Err(ApiError::invalid(
            "stop",
            format!("{} stop strings: at most {MAX_STOP}", stop.len()),
        ));
    }
    let include_usage = match f.object("stream_options")? {
        Some(o) => Fields(o).bool("include_usage")?.unwrap_or(false),
        None => false,
    };
    Ok(GenRequest {
        endpoint,
        model: f.string("model")?,
        prompt,
        max_tokens: max_tokens.map(|(_, n)| n as usize),
        temperature: temperature as f32,
        top_p: top_p as f32,
        top_k: f.uint("top_k")?.unwrap_or(0) as usize,
        seed: f.uint("seed")?,
        stop,
        stream: f.bool("stream")?.unwrap_or(false),
        include_usage,
        qada: qada_fields(f.object("qada")?)?,
    })
}

/// The request's `qada` object.
fn qada_fields(obj: Option<&Map<String, Value>>) -> Result<QadaFields, ApiError> {
    let Some(obj) = obj else {
        return Ok(QadaFields::default());
    };
    let f = Fields(obj).within("qada");
    let known = ["criterion", "tau", "kv", "page", "channels"];
    if let Some(k) = obj.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(ApiError::invalid(
            &format!("qada.{k}"),
            format!("qada.{k}: unknown; qada's fields are {}", known.join(", ")),
        ));
    }
    Ok(QadaFields {
        criterion: f.string("criterion")?,
        tau: f.number("tau")?,
        kv: f.string("kv")?,
        page: f.uint("page")?.map(|n| n as usize),
        channels: f.uint("channels")?.map(|n| n as usize),
    })
}

/// Chat messages: `[{role, content}]`, content a string or a list of text parts.
fn messages(v: &Value) -> Result<Vec<ChatMessage>, ApiError> {
    let list = v
        .as_array()
        .ok_or_else(|| ApiError::invalid("messages", "`messages` must be a list"))?;
    if list.is_empty() {
        return Err(ApiError::invalid(
            "messages",
            "`messages` is empty: send at least one message",
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, m)| {
            let at = format!("messages[{i}]");
            let obj = m
                .as_object()
                .ok_or_else(|| ApiError::invalid(&at, format!("{at} must be an object")))?;
            let role = obj.get("role").and_then(Value::as_str).ok_or_else(|| {
                ApiError::invalid(&format!("{at}.role"), format!("{at}.role must be a string"))
            })?;
            if !matches!(role, "system" | "developer" | "user" | "assistant") {
                return Err(ApiError::invalid(
                    &format!("{at}.role"),
                    format!("{at}.role {role:?}: use system, developer, user or assistant"),
                ));
            }
            // a developer message is the system prompt of newer clients
            let role = if role == "developer" { "system" } else { role };
            let content = match obj.get("content") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => text_parts(parts, &at)?,
                Some(Value::Null) | None if role == "assistant" => String::new(),
                _ => {
                    return Err(ApiError::invalid(
                        &format!("{at}.content"),
                        format!("{at}.content must be a string or a list of text parts"),
                    ))
                }
            };
            Ok(ChatMessage::new(role, &content))
        })
        .collect()
}

/// The text of a content given as parts (`[{"type": "text", "text": ...}]`).
fn text_parts(parts: &[Value], at: &str) -> Result<String, ApiError> {
    let mut text = String::new();
    for (j, p) in parts.iter().enumerate() {
        let kind = p.get("type").and_then(Value::as_str);
        match (kind, p.get("text").and_then(Value::as_str)) {
            (Some("text"), Some(t)) => text.push_str(t),
            _ => {
                return Err(ApiError::invalid(
                    &format!("{at}.content[{j}]"),
                    format!(
                        "{at}.content[{j}]: only text parts ({{\"type\": \"text\", \"text\": \
                         ...}}) are understood by a text model"
                    ),
                ))
            }
        }
    }
    Ok(text)
}

/// A completion prompt: a string, a list of one string, or a list of token ids.
fn prompt(v: &Value) -> Result<Prompt, ApiError> {
    let bad = || {
        ApiError::invalid(
            "prompt",
            "`prompt` must be a string, a list of one string, or a list of token ids",
        )
    };
    match v {
        Value::String(s) => Ok(Prompt::Text(s.clone())),
        Value::Array(a) if a.len() == 1 && a[0].is_string() => {
            Ok(Prompt::Text(a[0].as_str().unwrap_or_default().to_string()))
        }
        Value::Array(a) if a.iter().all(Value::is_u64) => a
            .iter()
            .map(|x| x.as_u64().and_then(|n| u32::try_from(n).ok()))
            .collect::<Option<Vec<u32>>>()
            .map(Prompt::Tokens)
            .ok_or_else(bad),
        Value::Array(a) if a.len() > 1 && a.iter().all(Value::is_string) => Err(ApiError::invalid(
            "prompt",
            "several prompts in one request: send one request per prompt",
        )),
        _ => Err(bad()),
    }
}

/// Typed access to an object's fields, with errors that name them.
#[derive(Clone, Copy)]
struct Fields<'a>(&'a Map<String, Value>);

/// [`Fields`] of a nested object, for error messages (`qada.tau`).
struct Nested<'a> {
    fields: Fields<'a>,
    prefix: &'static str,
}

impl<'a> Fields<'a> {
    fn within(self, prefix: &'static str) -> Nested<'a> {
        Nested {
            fields: self,
            prefix,
        }
    }
    /// The field, `null` read as absent.
    fn get(&self, name: &str) -> Option<&'a Value> {
        self.0.get(name).filter(|v| !v.is_null())
    }
    fn typed<T>(
        &self,
        name: &str,
        what: &str,
        read: impl Fn(&'a Value) -> Option<T>,
    ) -> Result<Option<T>, ApiError> {
        self.get(name)
            .map(|v| {
                read(v).ok_or_else(|| {
                    ApiError::invalid(name, format!("`{name}` must be {what}, got {v}"))
                })
            })
            .transpose()
    }
    fn uint(&self, name: &str) -> Result<Option<u64>, ApiError> {
        self.typed(name, "a non-negative integer", Value::as_u64)
    }
    fn number(&self, name: &str) -> Result<Option<f64>, ApiError> {
        self.typed(name, "a number", Value::as_f64)
    }
    fn bool(&self, name: &str) -> Result<Option<bool>, ApiError> {
        self.typed(name, "true or false", Value::as_bool)
    }
    fn string(&self, name: &str) -> Result<Option<String>, ApiError> {
        self.typed(name, "a string", |v| v.as_str().map(str::to_string))
    }
    fn object(&self, name: &str) -> Result<Option<&'a Map<String, Value>>, ApiError> {
        self.typed(name, "an object", Value::as_object)
    }
}

impl Nested<'_> {
    fn renamed<T>(
        &self,
        r: Result<Option<T>, ApiError>,
        name: &str,
    ) -> Result<Option<T>, ApiError> {
        r.map_err(|mut e| {
            let full = format!("{}.{name}", self.prefix);
            e.message = e
                .message
                .replacen(&format!("`{name}`"), &format!("`{full}`"), 1);
            e.param = Some(full);
            e
        })
    }
    fn uint(&self, name: &str) -> Result<Option<u64>, ApiError> {
        self.renamed(self.fields.uint(name), name)
    }
    fn number(&self, name: &str) -> Result<Option<f64>, ApiError> {
        self.renamed(self.fields.number(name), name)
    }
    fn string(&self, name: &str) -> Result<Option<String>, ApiError> {
        self.renamed(self.fields.string(name), name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: &str) -> Result<GenRequest, ApiError> {
        parse(Endpoint::Chat, body.as_bytes())
    }

    #[test]
    fn a_chat_request_reads_its_fields_and_defaults() {
        let r = chat(
            r#"{"model": "m", "messages": [{"role": "system", "content": "Be brief."},
               {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
               "max_tokens": 5, "temperature": 0, "stop": "\n", "stream": true,
               "stream_options": {"include_usage": true}, "user": "ignored",
               "qada": {"criterion": "channels", "tau": 0.8, "kv": "q8"}}"#,
        )
        .unwrap();
        assert_eq!(
            r.prompt,
            Prompt::Messages(vec![
                ChatMessage::new("system", "Be brief."),
                ChatMessage::new("user", "Hi")
            ])
        );
        assert_eq!(r.max_tokens, Some(5));
        assert_eq!(r.temperature, 0.0);
        assert_eq!(r.stop, vec!["\n".to_string()]);
        assert!(r.stream && r.include_usage);
        assert_eq!(r.qada.criterion.as_deref(), Some("channels"));
        assert_eq!(r.qada.tau, Some(0.8));
        let d = chat(r#"{"messages": [{"role": "user", "content": "x"}]}"#).unwrap();
        assert_eq!((d.temperature, d.top_p, d.top_k), (1.0, 1.0, 0));
        assert_eq!((d.max_tokens, d.seed, d.stream), (None, None, false));
    }

    #[test]
    fn completion_prompts_are_text_or_token_ids() {
        let p = |b: &str| parse(Endpoint::Completion, b.as_bytes()).map(|r| r.prompt);
        assert_eq!(p(r#"{"prompt": "a b"}"#), Ok(Prompt::Text("a b".into())));
        assert_eq!(p(r#"{"prompt": ["a b"]}"#), Ok(Prompt::Text("a b".into())));
        assert_eq!(
            p(r#"{"prompt": [1, 2, 3]}"#),
            Ok(Prompt::Tokens(vec![1, 2, 3]))
        );
        assert!(p(r#"{"prompt": ["a", "b"]}"#).is_err());
        assert!(p(r#"{"prompt": [1, -2]}"#).is_err());
        assert!(p(r#"{"prompt": [5000000000]}"#).is_err());
        assert!(p(r#"{"prompt": 3}"#).is_err());
    }

    #[test]
    fn bad_requests_name_their_field() {
        let param = |b: &[u8]| parse(Endpoint::Chat, b).unwrap_err().param;
        let m = r#""messages": [{"role": "user", "content": "x"}]"#;
        for (body, field) in [
            (format!("{{{m}, \"max_tokens\": \"ten\"}}"), "max_tokens"),
            (format!("{{{m}, \"max_tokens\": 0}}"), "max_tokens"),
            (
                format!("{{{m}, \"max_completion_tokens\": -1}}"),
                "max_completion_tokens",
            ),
            (format!("{{{m}, \"temperature\": 3}}"), "temperature"),
            (format!("{{{m}, \"top_p\": 0}}"), "top_p"),
            (format!("{{{m}, \"stream\": \"yes\"}}"), "stream"),
            (format!("{{{m}, \"stop\": [1]}}"), "stop"),
            (
                format!("{{{m}, \"stop\": [\"a\",\"b\",\"c\",\"d\",\"e\"]}}"),
                "stop",
            ),
            (format!("{{{m}, \"n\": 2}}"), "n"),
            (format!("{{{m}, \"logprobs\": true}}"), "logprobs"),
            (
                format!("{{{m}, \"qada\": {{\"tau\": \"high\"}}}}"),
                "qada.tau",
            ),
            (format!("{{{m}, \"qada\": {{\"speed\": 1}}}}"), "qada.speed"),
            (r#"{"messages": []}"#.into(), "messages"),
            (
                r#"{"messages": [{"role": "robot", "content": "x"}]}"#.into(),
                "messages[0].role",
            ),
            (
                r#"{"messages": [{"role": "user", "content": 7}]}"#.into(),
                "messages[0].content",
            ),
            (
                r#"{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}"#.into(),
                "messages[0].content[0]",
            ),
            (r#"{"model": "m"}"#.into(), "messages"),
        ] {
            assert_eq!(param(body.as_bytes()).as_deref(), Some(field), "{body}");
        }
        for body in [
            &b"{not json"[..],
            b"[1, 2]",
            b"{\"messages\": \"\xff\xfe\"}",
            b"",
        ] {
            let e = parse(Endpoint::Chat, body).unwrap_err();
            assert_eq!((e.status, e.param), (400, None), "{body:?}");
        }
    }

    #[test]
    fn errors_take_openais_shape() {
        let e = ApiError::invalid("top_p", "bad").code("x");
        assert_eq!(
            e.body(),
            json!({"error": {"message": "bad", "type": "invalid_request_error", "param": "top_p", "code": "x"}})
        );
    }
}
