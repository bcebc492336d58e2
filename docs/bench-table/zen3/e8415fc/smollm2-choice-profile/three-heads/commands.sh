#!/usr/bin/env bash
# Zen 3 (AMD EPYC, CPUID family 25 model 1, AVX2), 2026-12-08, nothing else running.
# Blocks of up to 3 heads over 32 rows at once in the AVX2 page masses (12 accumulators), the
# patch docs/notebook/patches/avx2-three-heads-whole-page.patch on e8415fc (with a criterion
# case of 3 heads, column_page_masses_3heads/16), against e8415fc with the same bench case.
# Not committed as code.
# BENCH_head / QADA_head: e8415fc with the patch's bench case only; BENCH_nc4 / QADA_nc4: the
# whole patch (each `cargo bench -p qada-core --bench attention --no-run` and
# `cargo build --release -p qada-cli`, the outputs copied aside).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
BENCH_head=/tmp/bench-head BENCH_nc4=/tmp/bench-nc4 QADA_head=/tmp/qada-head QADA_nc4=/tmp/qada-nc4
for r in 1 2 3; do for v in head nc4; do
  b=BENCH_$v; ${!b} --bench 'channel_selection_group7_d64_16384/(column_page_masses_3heads/16|column_page_masses/16)' \
    --warm-up-time 1 --measurement-time 3 --noplot > $v-run$r.txt
done; done
for r in 1 2 3; do for v in head nc4; do
  q=QADA_$v; (cd ../../../../../.. && ${!q} bench --model smollm2-135m --depth 8000 --setting shipped --pp 0 --new-tokens 32 \
    --reps 3 --json) > smol-$v-run$r.json
done; done
python3 ../../../../../../scripts/bench_phases.py smol-*.json
