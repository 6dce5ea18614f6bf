#!/usr/bin/env bash
# The coordinator at scale: for each N given, `swarm` (examples/src/bin/swarm)
# starts elasticrun's coordinator in a process of its own and holds N
# simulated workers' control connections to it over loopback (the job's
# secret, the real protocol: register, a heartbeat a second, assignments
# answered, resets rejoined), measures the coordinator's CPU over STEADY
# seconds of heartbeats, kills one worker, times the new generation, and
# ends the job. One JSON line per N; every field name carries its unit:
#
#   register_ms   start to the last worker registered
#   assign_ms     last registration to the last worker assigned
#   recovery_ms   kill to every survivor assigned the new generation
#                 (and answering it); recovery_full_ms: the replacement too
#   recovery_coordinator_cpu_ms  coordinator CPU from the kill to every
#                 survivor assigned
#   heartbeat_cpu_pct      coordinator CPU (user + system) over the steady window
#   coordinator_rss_mib    at rest; coordinator_peak_rss_mib: the peak
#   reset_bytes   bytes the coordinator sent its workers for the reset
#   end_ms        every worker told to finish to the coordinator's exit
#
# Usage: scripts/bench_scale.sh [N...]   (default: 1000 2000 5000 10000)
#        STEADY=5 SLOTS=8 SEED=1 scripts/bench_scale.sh 10000
# The coordinator and the load generator share this machine's cores: the
# figures are an upper bound on the coordinator's own.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p elasticrun-examples --bin swarm
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1000 2000 5000 10000)
seed=${SEED:-$(date +%s)}
echo "# bench_scale $(date -u +%Y-%m-%dT%H:%MZ) seed $seed, $(nproc) cores" >&2
for n in "${sizes[@]}"; do
    target/release/swarm --workers "$n" --slots-per-host "${SLOTS:-8}" \
        --steady "${STEADY:-5}" --seed "$seed" 2> >(grep -v '^elasticrun: generation' >&2)
done
