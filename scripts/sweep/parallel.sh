#!/usr/bin/env bash
# A sharded `qada eval` sweep with GNU parallel, on this machine or over ssh:
#
#   scripts/sweep/parallel.sh N OUT [qada eval flags...]
#
# The tables, then the shards (JOBS at a time, default N), then the merge. The line it runs
# for the shards is
#
#   seq 1 N | parallel -q --jobs JOBS --joblog OUT/parallel.log \
#       scripts/sweep/run_shard.sh {} N OUT FLAGS...
#
# Add `--sshloginfile hosts --workdir .` (PARALLEL_OPTS) to spread the shards over machines
# that share OUT; on one machine give each shard its own cores (RAYON_NUM_THREADS). A failed
# shard can be run again the same way: it resumes.
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: $0 N OUT [qada eval flags...]" >&2
    exit 2
fi
n=$1 out=$2
shift 2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
command -v parallel >/dev/null || {
    echo "$0: GNU parallel is not installed (Debian/Ubuntu: apt-get install parallel)" >&2
    exit 1
}
"$here/tables.sh" "$out" "$@"
# shellcheck disable=SC2086 # PARALLEL_OPTS is a list of options
seq 1 "$n" | parallel -q --jobs "${JOBS:-$n}" --joblog "$out/parallel.log" ${PARALLEL_OPTS:-} \
    "$here/run_shard.sh" {} "$n" "$out" "$@"
"$here/merge.sh" "$out"
