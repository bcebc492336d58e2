//! The chat templates of the real models rendered as HF renders them: the file's own Jinja
//! template (SmolLM2, Qwen2.5) and, for Gemma 3's files, which carry none, the family's
//! published one. HF's side is `tests/data/chat_templates.json`, made by
//! `scripts/reference/chat_templates.py` with transformers' own renderer; conversations with
//! and without a system message, several turns, with and without the generation prompt.

mod common;

use qada_model::gguf::GgufFile;
use qada_model::{ChatMessage, TemplateOrigin, Tokenizer};
use serde_json::Value;

fn hf() -> Value {
    let p = common::repo_root().join("qada-model/tests/data/chat_templates.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn tokenizer(model: &str) -> Tokenizer {
    let path = match model {
        "smollm2-135m" => common::model_path(),
        other => common::fetched_model(other),
    };
    Tokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap()
}

#[test]
fn templates_render_as_hf_renders_them() {
    let hf = hf();
    let models = hf["models"].as_array().unwrap();
    assert_eq!(models.len(), 3);
    for m in models {
        let name = m["model"].as_str().unwrap();
        let tok = tokenizer(name);
        let chat = tok.chat_template().unwrap();
        let from_file = m["template_origin"] == "file";
        assert_eq!(chat.origin() == &TemplateOrigin::File, from_file, "{name}");
        for case in m["cases"].as_array().unwrap() {
            let messages: Vec<ChatMessage> = case["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| {
                    ChatMessage::new(x["role"].as_str().unwrap(), x["content"].as_str().unwrap())
                })
                .collect();
            let gen = case["add_generation_prompt"].as_bool().unwrap();
            let ours = chat.render(&messages, gen).unwrap();
            assert_eq!(
                ours,
                case["rendered"].as_str().unwrap(),
                "{name}: {} (generation prompt {gen})",
                case["name"]
            );
        }
    }
}

#[test]
fn a_user_prompt_starts_with_one_bos_and_ends_in_the_assistants_turn() {
    for name in ["smollm2-135m", "qwen2.5-0.5b", "gemma3-270m"] {
        let tok = tokenizer(name);
        let chat = tok.chat_template().unwrap();
        let text = chat.render_user("Hello", Some("Be brief.")).unwrap();
        let ids = tok.encode(&text).unwrap();
        if let Some(bos) = tok.bos().filter(|_| tok.adds_bos()) {
            assert_eq!(
                ids.iter().filter(|&&i| i == bos).count(),
                1,
                "{name}: {text:?}"
            );
        }
        assert!(
            text.contains("Be brief.") && text.contains("Hello"),
            "{name}: {text:?}"
        );
    }
}

#[test]
fn a_template_that_raises_is_an_error_that_names_the_template() {
    let tok = tokenizer("gemma3-270m");
    let chat = tok.chat_template().unwrap();
    // Gemma's template raises on roles that do not alternate
    let two_users = [ChatMessage::new("user", "a"), ChatMessage::new("user", "b")];
    let e = chat.render(&two_users, true).unwrap_err().to_string();
    assert!(
        e.contains("must alternate") && e.contains("gemma3 family"),
        "{e}"
    );
}
