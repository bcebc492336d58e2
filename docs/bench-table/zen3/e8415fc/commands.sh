#!/usr/bin/env bash
# Zen 3 (AMD EPYC, CPUID family 25 model 1: AVX2, FMA, F16C; no AVX-512), 2 cores, 2026-12-08.
# qada e8415fc (code of 29f609c), llama.cpp 0c1e570 (llama-cpp-python 0.3.36's vendored copy),
# native build of scripts/llama_bench.sh. One run per model, nothing else running.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../../.."
export OUT=docs/bench-table/zen3/e8415fc QADA_ARGS="--setting shipped"
# 1. every model's shipped setting against its own dense and llama.cpp, one run each
PP=0 REPS=3 DEEP_FROM=8000 DEEP_FA=0 bash scripts/bench_table.sh smollm2-135m 8000
PP=0 REPS=2 DEEP_FROM=16384 DEEP_FA=0 bash scripts/bench_table.sh qwen2.5-0.5b 16384
PP=0 REPS=2 DEEP_FROM=16384 DEEP_FA=0 bash scripts/bench_table.sh gemma3-270m 16384
# 2. qada alone: Qwen at 32000 (f16) and the q8 cache, Qwen2.5-1.5B at 16384
q=target/release/qada
$q bench --model qwen2.5-0.5b --depth 32000 --setting shipped --pp 0 --new-tokens 32 --reps 2 --json > $OUT/qwen-32000-f16.json
$q bench --model qwen2.5-0.5b --depth 16384,32000 --kv q8 --setting shipped --pp 0 --new-tokens 32 --reps 2 --json > $OUT/qwen-q8.json
$q bench --model qwen2.5-1.5b --depth 16384 --setting shipped --pp 0 --new-tokens 32 --reps 2 --json > $OUT/qwen15-16384-f16.json
# 3. the table of the notebook and RESULTS (steps, bulk, choosing, the free-choice ceiling, K/V bytes)
python3 scripts/bench_phases.py $OUT/*-qada-f16.json $OUT/qwen-32000-f16.json $OUT/qwen-q8.json $OUT/qwen15-16384-f16.json
