#!/usr/bin/env bash
# Zen 3 (AMD EPYC, CPUID family 25 model 1, AVX2), 2026-12-08, nothing else running.
# Where SmolLM2's page choice goes in the step: e8415fc's code built with frame pointers,
# perf's software clock (this VM has no hardware counters), the samples split by classify.py.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../../../.."
RUSTFLAGS="-C force-frame-pointers=yes" cargo build --release -p qada-cli --target-dir /work/fp-target
perf record -F 1999 -g -o smol.data -- /work/fp-target/release/qada bench --model smollm2-135m \
  --depth 8000 --setting shipped --pp 0 --new-tokens 32 --reps 3 --json \
  > docs/bench-table/zen3/e8415fc/smollm2-choice-profile/smol-fp.json
perf script -i smol.data -F comm,tid,ip,sym > smol.script
python3 docs/bench-table/zen3/e8415fc/smollm2-choice-profile/classify.py smol.script \
  > docs/bench-table/zen3/e8415fc/smollm2-choice-profile/classify.out
perf annotate -i smol.data --stdio -s qada_core::attention::avx2::column_page_masses
# prefetch-pages-32/: column_tile::PREFETCH_PAGES 32 instead of 8 (a build of e8415fc with that
# constant, not committed) against e8415fc's binary, alternated three times:
QADA_head=target/release/qada          # e8415fc
QADA_pf32=/tmp/qada-pf32                # e8415fc with PREFETCH_PAGES = 32
for r in 1 2 3; do for v in head pf32; do
  q=QADA_$v; ${!q} bench --model smollm2-135m --depth 8000 --setting shipped --pp 0 --new-tokens 32 \
    --reps 3 --json > docs/bench-table/zen3/e8415fc/smollm2-choice-profile/prefetch-pages-32/smol-$v-run$r.json
done; done
python3 scripts/bench_phases.py docs/bench-table/zen3/e8415fc/smollm2-choice-profile/prefetch-pages-32/*.json
