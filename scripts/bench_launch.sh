#!/usr/bin/env bash
# Job start-to-finish time on one machine: `elasticrun -np N worker_probe`
# (join, every collective once, leave) beside `torchrun --nproc-per-node N` of a
# script that joins a Gloo group, allreduces once and leaves. Median of RUNS runs.
# Usage: scripts/bench_launch.sh [N] [RUNS]   (needs PEERS_VENV, see ../shared/peers)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-4}
RUNS=${2:-10}
cargo build --release --bins -q
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
timeit() {
    for _ in $(seq "$RUNS"); do
        local t0 t1
        t0=$(date +%s.%N)
        "$@" >/dev/null 2>&1
        t1=$(date +%s.%N)
        echo "$t1 - $t0" | bc
    done | median
}
ours=$(timeit target/release/elasticrun -np "$N" target/release/worker_probe)
echo "elasticrun -np $N worker_probe: median ${ours}s over $RUNS runs"
if [ -n "${PEERS_VENV:-}" ]; then
    theirs=$(timeit "$PEERS_VENV/bin/torchrun" --standalone --nproc-per-node "$N" scripts/launch_peer.py)
    echo "torchrun --nproc-per-node $N launch_peer.py: median ${theirs}s over $RUNS runs"
    echo "ratio torchrun/elasticrun: $(echo "scale=1; $theirs / $ours" | bc)"
fi
