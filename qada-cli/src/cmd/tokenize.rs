//! `qada tokenize`: the ids of a text.

use std::path::PathBuf;

use qada_model::gguf::GgufFile;
use qada_model::Tokenizer;

use crate::common::{resolve_model, CliResult, PromptArgs};

#[derive(clap::Args)]
pub struct Args {
    /// GGUF model file (default: the one the setup script fetched).
    #[arg(long)]
    model: Option<PathBuf>,
    #[command(flatten)]
    prompt: PromptArgs,
    /// Print one JSON object with ids and token strings.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> CliResult<()> {
    let path = resolve_model(a.model.as_deref())?;
    let f = GgufFile::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let tok = Tokenizer::from_gguf(&f)?;
    let text = a.prompt.text()?;
    crate::common::warn_unrepresentable(&tok, &text);
    let ids = tok.encode(&text)?;
    if a.json {
        let tokens: Vec<String> = ids
            .iter()
            .map(|&i| tok.token_str(i).unwrap_or_default())
            .collect();
        println!(
            "{}",
            serde_json::json!({ "ids": ids, "tokens": tokens, "n_tokens": ids.len() })
        );
    } else {
        let strs: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
        println!("{}", strs.join(" "));
        eprintln!("{} tokens", ids.len());
    }
    Ok(())
}
