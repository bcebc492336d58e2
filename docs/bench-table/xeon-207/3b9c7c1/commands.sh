#!/usr/bin/env bash
# Xeon 207 at HEAD: every model's shipped setting against own dense and llama.cpp, one run each.
set -x
cd /work/main
D=docs/bench-table/xeon-207/3b9c7c1
mkdir -p $D
date
OUT=$D PP=192 REPS=3 DEEP_FROM=8000 DEEP_FA=0 QADA_ARGS="--setting shipped" bash scripts/bench_table.sh smollm2-135m 0,8000 > $D/smollm2-table.md 2> $D/smollm2.log
date
OUT=$D PP=0 REPS=2 DEEP_FROM=16384 DEEP_FA=0 QADA_ARGS="--setting shipped" bash scripts/bench_table.sh qwen2.5-0.5b 16384,32000 > $D/qwen-table.md 2> $D/qwen.log
date
./target/release/qada bench --model qwen2.5-0.5b --depth 16384,32000 --kv q8 --setting shipped --pp 0 --new-tokens 32 --reps 2 --json > $D/qwen2.5-0.5b-16384_32000-qada-q8.json 2> $D/qwen-q8.log
date
OUT=$D PP=0 REPS=2 DEEP_FROM=16384 DEEP_FA=0 QADA_ARGS="--setting shipped" bash scripts/bench_table.sh gemma3-270m 16384 > $D/gemma-table.md 2> $D/gemma.log
date
for i in 2 3; do ./target/release/qada bench --model smollm2-135m --depth 8000 --setting shipped --pp 0 --new-tokens 32 --reps 3 --json > $D/smollm2-8000-shipped-run$i.json 2>> $D/smollm2-runs.log; done
date
OUT=$D PP=0 REPS=2 DEEP_FROM=16384 DEEP_FA=0 QADA_ARGS="--setting shipped" bash scripts/bench_table.sh qwen2.5-1.5b 16384 > $D/qwen1.5b-table.md 2> $D/qwen1.5b.log   # ran later, binary of ce49d07 (docs-only commits after 3b9c7c1)
