#!/bin/sh
# Host discovery inside a Slurm allocation: prints `host:slots` for each node
# of the allocation that Slurm does not hold down, drained or failing, with
# the tasks SLURM_TASKS_PER_NODE gives it (`2(x3),1`), so that an elastic job
# inside an allocation leaves such a node out of its next generation. A
# starting point for rules of one's own; a static job inside an allocation
# needs no script (docs/slurm.md).
#
# Usage (inside salloc or sbatch):
#   elasticrun --min-np 2 --host-discovery-script discovery-scripts/slurm-allocation.sh ...
set -eu
: "${SLURM_JOB_NODELIST:?not inside a Slurm allocation (SLURM_JOB_NODELIST is not set)}"
# SLURM_TASKS_PER_NODE as one count a node, in the nodes' order.
counts=
for part in $(echo "${SLURM_TASKS_PER_NODE:-1}" | tr ',' ' '); do
    case "$part" in
        *'(x'*')')
            n=${part%%(*}; r=${part#*(x}; r=${r%)}
            i=0
            while [ "$i" -lt "$r" ]; do counts="$counts $n"; i=$((i + 1)); done ;;
        *) counts="$counts $part" ;;
    esac
done
# Each node's state (sinfo's compact states: idle, alloc, mix, down*, drain, ...).
states=$(sinfo -h -N -n "$SLURM_JOB_NODELIST" -o '%N %t' 2>/dev/null || true)
# shellcheck disable=SC2086 # one count a word
set -- $counts
for node in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
    slots=${1:-1}
    [ "$#" -gt 0 ] && shift
    state=$(printf '%s\n' "$states" | awk -v n="$node" '$1 == n { print $2; exit }')
    case "$state" in
        down*|drain*|drng*|fail*|maint*|unk*|no_resp*) continue ;;
    esac
    echo "$node:$slots"
done
