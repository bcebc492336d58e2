//! Chat templates: the file's own Jinja template (`tokenizer.chat_template`), rendered as HF's
//! `apply_chat_template` renders it (minijinja with HF's settings: `trim_blocks`,
//! `lstrip_blocks`, loop controls, `raise_exception`, `tojson`, Python's string methods), or,
//! for a file without one, its family's published template.
//!
//! The template gets `bos_token` and `eos_token` as HF passes them. Where the tokenizer adds a
//! BOS token itself, [`ChatTemplate::render_user`] drops the one the template writes, so a
//! prompt starts with exactly one (HF tokenizes a rendered chat without adding one; llama.cpp
//! warns about the double BOS).

use std::fmt;

use minijinja::{Environment, Error, ErrorKind};

use crate::{ModelError, Result};

/// A family's published template, for files that carry none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChatFormat {
    /// Gemma's turns, `<start_of_turn>user\ncontent<end_of_turn>\n<start_of_turn>model\n`; a
    /// system message opens the first user turn, followed by a blank line (Gemma 2 and 3's
    /// official template, text only: `gemma_template.jinja`).
    Gemma,
}

impl ChatFormat {
    /// Short name: `gemma`.
    pub fn name(self) -> &'static str {
        match self {
            ChatFormat::Gemma => "gemma",
        }
    }

    /// The template's Jinja source.
    pub fn source(self) -> &'static str {
        match self {
            ChatFormat::Gemma => include_str!("gemma_template.jinja"),
        }
    }
}

/// Where a chat template came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TemplateOrigin {
    /// The file's `tokenizer.chat_template`.
    File,
    /// The file has none: the template its family publishes, found by `general.architecture`.
    FamilyDefault {
        /// The file's `general.architecture`.
        architecture: String,
        /// The family's template.
        format: ChatFormat,
    },
}

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

impl ChatMessage {
    /// A message of `role` with `content`.
    pub fn new(role: &str, content: &str) -> Self {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A chat template, compiled, with the special tokens it is given and where it came from.
#[derive(Clone, Debug)]
pub struct ChatTemplate {
    source: String,
    origin: TemplateOrigin,
    bos_token: String,
    eos_token: String,
    /// The tokenizer adds a BOS token itself: drop a leading one from the rendering.
    strip_bos: bool,
}

impl PartialEq for ChatTemplate {
    fn eq(&self, other: &Self) -> bool {
        (&self.source, &self.origin) == (&other.source, &other.origin)
    }
}

/// HF's environment: blocks trimmed as `jinja2.Environment(trim_blocks=True,
/// lstrip_blocks=True)`, `raise_exception`, `tojson`, Python string and dict methods.
fn environment(source: &str) -> std::result::Result<Environment<'_>, Error> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function(
        "raise_exception",
        |msg: String| -> std::result::Result<String, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        },
    );
    env.add_template("chat", source)?;
    Ok(env)
}

fn template_error(origin: &TemplateOrigin, e: &Error) -> ModelError {
    let what = match origin {
        TemplateOrigin::File => "the file's chat template (tokenizer.chat_template)".to_string(),
        TemplateOrigin::FamilyDefault { architecture, .. } => {
            format!("the {architecture} family's chat template")
        }
    };
    let mut msg = format!("{what}: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(&format!(": {s}"));
        source = s.source();
    }
    ModelError::Tokenizer(format!("{msg}; --raw uses the prompt without a template"))
}

impl ChatTemplate {
    /// A template from Jinja `source`, compiled once here so that a broken template is an
    /// error at load. `bos_token` and `eos_token` are the texts the template may write;
    /// `strip_bos`: the tokenizer adds BOS itself.
    ///
    /// # Errors
    /// [`ModelError::Tokenizer`] when the source is not a template minijinja compiles.
    pub fn new(
        source: &str,
        origin: TemplateOrigin,
        bos_token: &str,
        eos_token: &str,
        strip_bos: bool,
    ) -> Result<Self> {
        environment(source).map_err(|e| template_error(&origin, &e))?;
        Ok(ChatTemplate {
            source: source.into(),
            origin,
            bos_token: bos_token.into(),
            eos_token: eos_token.into(),
            strip_bos,
        })
    }

    /// The published template `format` of the family `architecture` (its row's
    /// `Family::chat`), for a file without a template.
    pub fn family_default(
        architecture: &str,
        format: ChatFormat,
        bos_token: &str,
        eos_token: &str,
        strip_bos: bool,
    ) -> Result<Self> {
        let origin = TemplateOrigin::FamilyDefault {
            architecture: architecture.to_string(),
            format,
        };
        Self::new(format.source(), origin, bos_token, eos_token, strip_bos)
    }

    /// Where the template came from.
    pub fn origin(&self) -> &TemplateOrigin {
        &self.origin
    }

    /// The Jinja source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// `messages` rendered exactly as HF's `apply_chat_template(..., tokenize=False)` renders
    /// them; `add_generation_prompt` opens the assistant's turn.
    ///
    /// # Errors
    /// [`ModelError::Tokenizer`] when the template raises (for example on roles out of order)
    /// or fails.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        let err = |e: Error| template_error(&self.origin, &e);
        let env = environment(&self.source).map_err(err)?;
        let messages: Vec<minijinja::Value> = messages
            .iter()
            .map(|m| minijinja::context! { role => m.role, content => m.content })
            .collect();
        let ctx = minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token,
            eos_token => self.eos_token,
        };
        env.get_template("chat")
            .and_then(|t| t.render(ctx))
            .map_err(err)
    }

    /// A conversation of one user message (after `system`, when given), ready for the
    /// assistant's answer, without the template's BOS where the tokenizer adds one.
    ///
    /// # Errors
    /// As [`ChatTemplate::render`].
    pub fn render_user(&self, user: &str, system: Option<&str>) -> Result<String> {
        let mut messages: Vec<ChatMessage> = system
            .map(|s| ChatMessage::new("system", s))
            .into_iter()
            .collect();
        messages.push(ChatMessage::new("user", user));
        let text = self.render(&messages, true)?;
        Ok(match (self.strip_bos, text.strip_prefix(&self.bos_token)) {
            (true, Some(rest)) if !self.bos_token.is_empty() => rest.to_string(),
            _ => text,
        })
    }
}

/// `the file's template`, `gemma (the gemma3 family's published template; the file has
/// none)`: what a CLI says on standard error.
impl fmt::Display for ChatTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.origin {
            TemplateOrigin::File => write!(f, "the file's own (tokenizer.chat_template)"),
            TemplateOrigin::FamilyDefault {
                architecture,
                format,
            } => write!(
                f,
                "{} (the {architecture} family's published template; the file has none)",
                format.name()
            ),
        }
    }
}
