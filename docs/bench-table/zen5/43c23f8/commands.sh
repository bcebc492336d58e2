#!/usr/bin/env bash
# AMD EPYC Zen 5 (family 26 model 2), 2 cores; qada 43c23f8 (Qwen's channels-union at tau 0.95),
# llama.cpp 0c1e570 built here by scripts/llama_bench.sh (3.4 min). One run after the other,
# nothing else running.
set -x
cd /work/main
D=docs/bench-table/zen5/43c23f8
date
OUT=$D PP=0 REPS=2 DEEP_FROM=16384 DEEP_FA=0 QADA_ARGS="--setting shipped" bash scripts/bench_table.sh qwen2.5-0.5b 16384,32000 > $D/qwen-table.md 2> $D/qwen.log
date
./target/release/qada bench --model qwen2.5-0.5b --depth 16384,32000 --kv q8 --setting shipped --pp 0 --new-tokens 32 --reps 2 --json > $D/qwen2.5-0.5b-16384_32000-qada-q8.json 2> $D/qwen-q8.log
date
# a second f16 run of qada alone, right after (the first's dense step at 16384 was slower than at 32000)
./target/release/qada bench --model qwen2.5-0.5b --depth 16384,32000 --setting shipped --pp 0 --new-tokens 32 --reps 2 --json > $D/qwen2.5-0.5b-16384_32000-qada-f16-run2.json 2> $D/qwen-f16-run2.log
date
