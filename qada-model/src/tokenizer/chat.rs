//! Chat templates: the layouts of a conversation this build renders, recognized from the file's
//! Jinja template or, for a file without one, its family's published template.
//!
//! Templates render without a BOS token: [`super::Tokenizer::encode`] adds it.

use std::fmt;

/// How a template lays out a conversation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChatFormat {
    /// ChatML, `<|im_start|>role\ncontent<|im_end|>\n` (SmolLM2, Qwen2).
    ChatMl,
    /// Gemma's turns, `<start_of_turn>user\ncontent<end_of_turn>\n<start_of_turn>model\n`; a
    /// system message opens the first user turn, followed by a blank line.
    Gemma,
}

impl ChatFormat {
    /// Short name: `chatml` or `gemma`.
    pub fn name(self) -> &'static str {
        match self {
            ChatFormat::ChatMl => "chatml",
            ChatFormat::Gemma => "gemma",
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
    },
}

/// A chat template this build renders, its default system prompt, and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatTemplate {
    /// The system prompt the template inserts when the conversation has none.
    pub default_system: Option<String>,
    format: ChatFormat,
    origin: TemplateOrigin,
}

impl ChatTemplate {
    /// Recognize ChatML or Gemma's turns in a file's Jinja template; `None` for other templates.
    pub fn recognize(jinja: &str) -> Option<Self> {
        if jinja.contains("<|im_start|>") && jinja.contains("<|im_end|>") {
            let marker = "<|im_start|>system\\n";
            let marker_raw = "<|im_start|>system\n";
            let start = jinja
                .find(marker)
                .map(|i| i + marker.len())
                .or_else(|| jinja.find(marker_raw).map(|i| i + marker_raw.len()));
            let default_system = start.and_then(|s| {
                jinja[s..]
                    .find("<|im_end|>")
                    .map(|e| jinja[s..s + e].replace("\\n", "\n"))
            });
            return Some(ChatTemplate {
                default_system,
                format: ChatFormat::ChatMl,
                origin: TemplateOrigin::File,
            });
        }
        if jinja.contains("<start_of_turn>") && jinja.contains("<end_of_turn>") {
            return Some(ChatTemplate {
                default_system: None,
                format: ChatFormat::Gemma,
                origin: TemplateOrigin::File,
            });
        }
        None
    }

    /// The published template of the family `architecture` (`general.architecture`, its row's
    /// [`crate::family::Family::chat`]), for a file without a template; `None` for families
    /// without one.
    pub fn family_default(architecture: &str) -> Option<Self> {
        let format = crate::family::Family::by_name(architecture)?.chat?;
        Some(ChatTemplate {
            default_system: None,
            format,
            origin: TemplateOrigin::FamilyDefault {
                architecture: architecture.to_string(),
            },
        })
    }

    /// The layout.
    pub fn format(&self) -> ChatFormat {
        self.format
    }

    /// Where the template came from.
    pub fn origin(&self) -> &TemplateOrigin {
        &self.origin
    }

    /// The layout's short name (`chatml`, `gemma`).
    pub fn name(&self) -> &'static str {
        self.format.name()
    }

    /// A conversation of one user message, ready for the assistant's answer. Gemma's template
    /// trims the user message, as the official one does.
    pub fn render_user(&self, user: &str, system: Option<&str>) -> String {
        let system = system.or(self.default_system.as_deref());
        match self.format {
            ChatFormat::ChatMl => {
                let mut s = String::new();
                if let Some(sys) = system {
                    s.push_str(&format!("<|im_start|>system\n{sys}<|im_end|>\n"));
                }
                s.push_str(&format!(
                    "<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
                ));
                s
            }
            ChatFormat::Gemma => {
                let prefix = system.map(|s| format!("{s}\n\n")).unwrap_or_default();
                format!(
                    "<start_of_turn>user\n{prefix}{}<end_of_turn>\n<start_of_turn>model\n",
                    user.trim()
                )
            }
        }
    }
}

/// `chatml (from the file)`, `gemma (the gemma3 family's published template; the file has
/// none)`: what a CLI says on standard error.
impl fmt::Display for ChatTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.origin {
            TemplateOrigin::File => write!(f, "{} (from the file)", self.name()),
            TemplateOrigin::FamilyDefault { architecture } => write!(
                f,
                "{} (the {architecture} family's published template; the file has none)",
                self.name()
            ),
        }
    }
}
