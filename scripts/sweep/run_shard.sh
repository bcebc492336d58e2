#!/usr/bin/env bash
# One shard of a `qada eval` sweep, the step every scheduler runs once per task:
#
#   scripts/sweep/run_shard.sh K N OUT [qada eval flags...]
#
# runs `qada eval FLAGS --shard K/N` into OUT/shard-K, with the calibration tables in OUT
# (made once by `scripts/sweep/tables.sh OUT FLAGS...`). Always --resume: records are written
# as each (prompt, configuration) finishes, so a task that is preempted, killed or retried
# continues where it stopped and loses nothing. K counts from 1; N is the number of shards.
# QADA names the binary (default: qada on the PATH).
set -euo pipefail
if [ $# -lt 3 ]; then
    echo "usage: $0 K N OUT [qada eval flags...]" >&2
    exit 2
fi
k=$1 n=$2 out=$3
shift 3
exec "${QADA:-qada}" eval "$@" --shard "$k/$n" --out-dir "$out/shard-$k" --resume \
    --moments-table "$out/moments.qmom" --static-table "$out/static.qsta"
