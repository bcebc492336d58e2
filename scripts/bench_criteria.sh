#!/usr/bin/env bash
# Decode speed of every criterion at its own calibrated threshold: for each method of a setting
# file's `per_method` list (the cheapest threshold at which that method kept the budget in
# `qada calibrate tau`), `qada bench` at one depth with the oracle's ceiling and the decision's
# cost, as the markdown table of docs/notebook/results-log.md, then the CPU `qada bench` names
# (outside CI; nothing else may run meanwhile).
#
#   bash scripts/bench_criteria.sh MODEL SETTING DEPTH
#     MODEL    smollm2-135m | qwen2.5-0.5b | gemma3-270m | qwen2.5-1.5b
#     SETTING  a file written by `qada calibrate tau` (e.g. qada-cli/settings/smollm2-135m.json)
#     DEPTH    context tokens before decoding, e.g. 8000
#   env: REPS (runs of each mode, default 5), NEW (tokens a run, default 64), OUT (folder of the
#        raw JSON, default target/bench_criteria), QADA (the binary, default a release build)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
model="${1:?usage: bench_criteria.sh MODEL SETTING DEPTH}"
setting="${2:?usage: bench_criteria.sh MODEL SETTING DEPTH}"
depth="${3:?usage: bench_criteria.sh MODEL SETTING DEPTH}"
reps="${REPS:-5}"
new="${NEW:-64}"
out="${OUT:-target/bench_criteria}"
[ -f "$setting" ] || { echo "$setting: no such setting file (qada calibrate tau writes one)" >&2; exit 2; }
if [ -z "${QADA:-}" ]; then
  cargo build --release -p qada-cli >&2
  QADA=./target/release/qada
fi
mkdir -p "$out"
echo "commit $(git rev-parse --short HEAD)"
echo
echo "| method | tau | calibrated K/V bytes | dense t/s | adaptive t/s | speed-up | sparsity | K/V MB/token dense / adaptive | decision ms/token (share of a step) | oracle ceiling |"
echo "|---|---|---|---|---|---|---|---|---|---|"
# methods that kept the budget at no threshold (tau null) have nothing to time
jq -r '.per_method[] | select(.tau != null) | "\(.method) \(.tau) \(.kv_bytes)"' "$setting" | while read -r method tau bytes; do
  name="${method%@*}"
  group=head
  [ "$name" = "$method" ] || group="${method#*@}"
  case "$name" in approx-current) crit=approx ;; *) crit="$name" ;; esac
  json="$out/${model}_${depth}_${method}.json"
  "$QADA" bench --model "$model" --criterion "$crit" --tau "$tau" --group "$group" \
    --depth "$depth" --new-tokens "$new" --reps "$reps" --pp 0 --ceiling --decision-cost \
    --json > "$json"
  jq -r --arg m "$method" --arg t "$tau" --arg b "$bytes" '.[0] |
    "| \($m) | \($t) | \($b | tonumber * 1000 | round / 1000)x | \(.dense_decode_tokens_per_s * 10 | round / 10) | \(.adaptive_decode_tokens_per_s * 10 | round / 10) | \(.speedup * 100 | round / 100)x | \(.sparsity * 1000 | round / 1000) | \((.dense_bytes_per_token - .weight_bytes_per_token) / 1e5 | round / 10) / \((.adaptive_bytes_per_token - .weight_bytes_per_token) / 1e5 | round / 10) | \(.decision_secs_per_token * 1e5 | round / 100) (\(.decision_share_of_adaptive_step * 1000 | round / 10) %) | \(.ceiling_speedup * 100 | round / 100)x |"' "$json"
done
# the CPU as `qada bench` recorded it (name, family, model, threads)
first=$(ls "$out/${model}_${depth}_"*.json 2>/dev/null | head -1 || true)
if [ -n "$first" ]; then
  echo
  echo "CPU: $(jq -r '.[0].cpu' "$first")"
else
  echo "$setting: no method kept the budget at any threshold: nothing to time" >&2
fi
