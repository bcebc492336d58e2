#!/usr/bin/env bash
# Zen 3 (AMD EPYC, CPUID family 25 model 1, AVX2), 2026-12-08, nothing else running.
# Blocks of up to 3 heads over 32 rows at once in the AVX2 page masses (12 accumulators), the
# patch docs/notebook/patches/avx2-three-heads-whole-page.patch on e8415fc (with a criterion
# case of 3 heads, column_page_masses_3heads/16), against e8415fc with the same bench case.
# Not committed as code.
#   BENCH_head / QADA_head: e8415fc (+ the bench case); BENCH_nc4 / QADA_nc4: with the patch
for r in 1 2 3; do for v in head nc4; do
  BENCH_$v --bench 'channel_selection_group7_d64_16384/(column_page_masses_3heads/16|column_page_masses/16)' \
    --warm-up-time 1 --measurement-time 3 --noplot > $v-run$r.txt
done; done
for r in 1 2 3; do for v in head nc4; do
  QADA_$v bench --model smollm2-135m --depth 8000 --setting shipped --pp 0 --new-tokens 32 \
    --reps 3 --json > smol-$v-run$r.json
done; done
