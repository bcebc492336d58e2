#!/usr/bin/env bash
# AMD EPYC Zen 5 (family 26 model 2), 2 cores; binary of b3c9157, qada alone, one run after the
# other (16:34-16:42 UTC), nothing else running. The first is the setting shipped until then
# (channels@all, tau 0.93), the second the union at tau 0.93 (the setting shipped since; file from
# docs/calibration/union-qwen2.5-1.5b-4k/setting.json). The host's speed moved between the
# runs: dense decoded 17.2 tokens/s (14.5-19.9) in the first and 23.1 (22.8-23.3) in the second.
set -x
cd /work/main
D=docs/bench-table/zen5/b3c9157-qwen1.5b
./target/release/qada bench --model qwen2.5-1.5b --depth 16384 --setting shipped --pp 0 --new-tokens 32 --reps 2 --json > $D/qwen2.5-1.5b-16384-channels093.json
./target/release/qada bench --model qwen2.5-1.5b --depth 16384 --setting docs/calibration/union-qwen2.5-1.5b-4k/setting.json --pp 0 --new-tokens 32 --reps 2 --json > $D/qwen2.5-1.5b-16384-union093.json
