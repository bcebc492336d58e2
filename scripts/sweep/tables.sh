#!/usr/bin/env bash
# The first step of a sharded sweep: the calibration tables every shard shares.
#
#   scripts/sweep/tables.sh OUT [qada eval flags...]
#
# makes the tables the flags' --methods need (moments for approx-calibration, static head
# labels for static) in OUT, with OUT/run.json naming the model and settings, then stops.
# The shards read them (scripts/sweep/run_shard.sh) and `merge.sh` folds the shards into OUT.
set -euo pipefail
if [ $# -lt 1 ]; then
    echo "usage: $0 OUT [qada eval flags...]" >&2
    exit 2
fi
out=$1
shift
mkdir -p "$out"
exec "${QADA:-qada}" eval "$@" --tables-only --out-dir "$out"
