//! The `qada-cli` command (also installed as `qada`): query-adaptive attention on real GGUF
//! models.
//!
//! Both binaries are this one [`main`]; the name a user typed is the one help and errors show.
//! The modules are the command's own (argument parsing and printing); the libraries
//! (`qada-stats`, `qada-core`, `qada-kv`, `qada-model`) hold everything else.

#![warn(missing_docs)]

mod cmd;
mod common;
mod corpus;
mod error;
mod host;
mod plot;
mod setting;

use clap::{Parser, Subcommand};

/// Query-adaptive attention (QAdA) on real GGUF models: for every generated token and every
/// attention head, decide whether a short local window suffices.
#[derive(Parser)]
#[command(name = "qada-cli", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text with adaptive attention and report what the criterion saved.
    Generate(cmd::generate::Args),
    /// Print the token ids of a text.
    Tokenize(cmd::tokenize::Args),
    /// Print a GGUF file's metadata and tensors.
    Inspect(cmd::inspect::Args),
    /// Compare the QAdA criterion with the oracle, head by head, on a prompt.
    Analyze(cmd::analyze::Args),
    /// Calibrate moment tables (option 2), static head labels, or a setting (criterion and tau within a quality budget).
    Calibrate(cmd::calibrate::Args),
    /// Sweep criteria and thresholds: quality against sparsity (passkey, fidelity).
    Eval(cmd::eval::Args),
    /// Decode throughput at given depths, dense against adaptive.
    Bench(cmd::bench::Args),
    /// Serve the model over HTTP with OpenAI's API (chat and completions, streamed or not),
    /// a prefix cache, and qada's accounting in every answer.
    Serve(cmd::serve::Args),
}

/// Parse the command line, run the subcommand, print an error chain and exit 1 on failure.
pub fn main() {
    // Help and usage name the binary the user ran (`qada-cli` or `qada`).
    let argv0 = std::env::args_os().next();
    let typed = argv0
        .as_deref()
        .map(std::path::Path::new)
        .and_then(|p| p.file_stem());
    let bin: &'static str = if typed.is_some_and(|s| s == "qada") {
        "qada"
    } else {
        "qada-cli"
    };
    let matches = <Cli as clap::CommandFactory>::command()
        .name(bin)
        .bin_name(bin)
        .get_matches();
    let cli = match <Cli as clap::FromArgMatches>::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    let result = match cli.command {
        Command::Generate(a) => cmd::generate::run(a),
        Command::Tokenize(a) => cmd::tokenize::run(a),
        Command::Inspect(a) => cmd::inspect::run(a),
        Command::Analyze(a) => cmd::analyze::run(a),
        Command::Calibrate(a) => cmd::calibrate::run(a),
        Command::Eval(a) => cmd::eval::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Serve(a) => cmd::serve::run(a),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        let mut source = e.source();
        while let Some(s) = source {
            eprintln!("  caused by: {s}");
            source = s.source();
        }
        std::process::exit(1);
    }
}
