#!/usr/bin/env bash
# A sharded `qada eval` sweep on Slurm: the tables, then N shards as a job array, then the
# merge, each step submitted to start when the one before has succeeded.
#
#   scripts/sweep/slurm.sh N OUT [qada eval flags...]
#   e.g. scripts/sweep/slurm.sh 8 /shared/runs/qwen --model qwen2.5-0.5b --task all \
#            --methods dense,oracle,approx-current,channels --taus 0.6,0.8,0.9
#
# Needs `qada` on the nodes' PATH (or QADA=/path/to/qada exported), this repository and OUT
# on a file system the nodes share. Extra
# sbatch options (partition, account) go in SBATCH_* environment variables, which sbatch reads.
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: $0 N OUT [qada eval flags...]" >&2
    exit 2
fi
n=$1 out=$2
shift 2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# sbatch runs a copy of shards.sbatch; it finds run_shard.sh here (the environment goes along)
export QADA_REPO
QADA_REPO=$(cd "$here/../.." && pwd)
mkdir -p "$out"
tables=$(sbatch --parsable --job-name=qada-tables --cpus-per-task=2 --mem=8G \
    --output="$out/tables-%j.out" "$here/tables.sh" "$out" "$@")
shards=$(sbatch --parsable --dependency="afterok:$tables" --array="1-$n" \
    --output="$out/shard-%a-%A.out" "$here/shards.sbatch" "$out" "$@")
merge=$(sbatch --parsable --dependency="afterok:$shards" --job-name=qada-merge --mem=2G \
    --output="$out/merge-%j.out" "$here/merge.sh" "$out")
echo "submitted: tables $tables, shards $shards (1-$n), merge $merge; records in $out"
