#!/usr/bin/env bash
# A sharded `qada eval` sweep on Kubernetes: the tables Job, an Indexed Job of N shards, the
# merge Job, each applied when the one before has completed.
#
#   IMAGE=registry/qada:tag PVC=qada-runs scripts/sweep/k8s.sh N RUN [qada eval flags...]
#
# RUN names the Jobs and the folder /runs/RUN on the volume PVC (lowercase letters, digits and
# '-'). The manifests are scripts/sweep/k8s/*.yaml; RENDER=1 prints them instead of applying.
set -euo pipefail
if [ $# -lt 2 ] || [ -z "${IMAGE:-}" ] || [ -z "${PVC:-}" ]; then
    echo "usage: IMAGE=... PVC=... $0 N RUN [qada eval flags...]" >&2
    exit 2
fi
export SHARDS=$1 RUN=$2 IMAGE PVC
shift 2
export EVAL_FLAGS="$*"
if ! [[ $RUN =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]]; then
    echo "$0: RUN $RUN: use lowercase letters, digits and '-' (it names Kubernetes Jobs)" >&2
    exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
render() {
    envsubst '${SHARDS} ${RUN} ${IMAGE} ${PVC} ${EVAL_FLAGS}' <"$here/k8s/$1.yaml"
}
# Wait until Job $1 has completed; fail if it has failed.
wait_job() {
    while true; do
        state=$(kubectl get job "$1" \
            -o jsonpath='{.status.conditions[?(@.status=="True")].type}')
        case "$state" in
            *Complete*) return 0 ;;
            *Failed*) echo "$0: job $1 failed: kubectl logs job/$1" >&2; return 1 ;;
        esac
        sleep 20
    done
}
if [ -n "${RENDER:-}" ]; then
    for step in tables shards merge; do render "$step"; echo "---"; done
    exit 0
fi
for step in tables shards merge; do
    render "$step" | kubectl apply -f -
    wait_job "qada-$step-$RUN"
done
echo "records, tables and plots in /runs/$RUN on $PVC"
