#!/usr/bin/env bash
# Zen 3 (AMD EPYC, CPUID family 25 model 1, AVX2), 2026-12-08, nothing else running.
# The prefetch changes on Zen 3: b6526a8 (before 6b2c4ff's prefetch within runs and 29f609c's
# shared prefetch_lines) against e8415fc (code of 29f609c), both with e8415fc's bench source
# (a worktree of b6526a8 with qada-core/benches/attention.rs of e8415fc, its own --target-dir).
#   cargo bench -p qada-core --bench attention --no-run                       -> BENCH_head
#   (worktree) cargo bench -p qada-core --bench attention --no-run --target-dir /work/wt-old-target
#                                                                               -> BENCH_b6526a8
#   (worktree) cargo build --release -p qada-cli --target-dir /work/wt-old-target -> QADA_b6526a8
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../../../.."
# 1. criterion, alternated three times
BENCH_head=target/release/deps/attention-29d27cb1a1502226
BENCH_b6526a8=/work/wt-old-target/release/deps/attention-29d27cb1a1502226
for r in 1 2 3; do for v in b6526a8 head; do
  b=BENCH_$v; ${!b} --bench 'selected_bulk_qwen_16384/(dense|union_all_heads)|channel_selection_group7_d64_16384/(column_page_masses/16|choose_pages/16)' \
      --warm-up-time 1 --measurement-time 3 --noplot > docs/bench-table/zen3/e8415fc/prefetch-ab/$v-run$r.txt
done; done
# 2. decode, Qwen2.5-0.5B at 16384, shipped setting, alternated twice
QADA_head=target/release/qada
QADA_b6526a8=/work/wt-old-target/release/qada
for r in 1 2; do for v in b6526a8 head; do
  q=QADA_$v; ${!q} bench --model qwen2.5-0.5b --depth 16384 --setting shipped --pp 0 --new-tokens 32 --reps 2 --json > docs/bench-table/zen3/e8415fc/prefetch-ab/qwen-16384-$v-run$r.json
done; done
python3 scripts/bench_phases.py docs/bench-table/zen3/e8415fc/prefetch-ab/*.json
