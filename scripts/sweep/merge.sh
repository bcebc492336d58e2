#!/usr/bin/env bash
# The last step of a sharded sweep: fold every OUT/shard-K into OUT and draw the tables and
# plots.
#
#   scripts/sweep/merge.sh OUT
#
# `qada eval --merge` refuses shards of different sweeps or splits, a shard given twice, and
# calibration tables that differ; it warns of shards missing or unfinished (merge again after
# rerunning them: records already in OUT are kept, new ones added).
set -euo pipefail
if [ $# -ne 1 ]; then
    echo "usage: $0 OUT" >&2
    exit 2
fi
out=$1
shopt -s nullglob
shards=("$out"/shard-*)
if [ ${#shards[@]} -eq 0 ]; then
    echo "$0: no $out/shard-* folder: run the shards first (scripts/sweep/run_shard.sh)" >&2
    exit 1
fi
exec "${QADA:-qada}" eval --merge "${shards[@]}" --out-dir "$out"
