#!/usr/bin/env bash
# etcd mode at scale: swarm's N simulated pods (each with its own etcd
# connection, lease, slot key and watch of the election, as a worker pod's
# runtime has) against two `elasticrun serve` replicas and a real etcd
# (Debian's etcd-server) on free loopback ports. Prints one JSON line per N:
# start-up, the leader's heartbeat CPU and etcd's requests a second at
# rest, the leader killed (every pod registered with the next one, and how
# many generations that made: none expected), one pod killed (every
# survivor in a new generation), and etcd's requests in each phase by gRPC
# method (`etcd_requests_*`, from etcd's /metrics).
#
# Usage: scripts/bench_scale_etcd.sh [N...]   (default: 100 1000)
#        STEADY=5 SLOTS=8 SEED=1 scripts/bench_scale_etcd.sh 1000
set -euo pipefail
cd "$(dirname "$0")/.."
command -v etcd >/dev/null || { echo "needs etcd on PATH (Debian package etcd-server)" >&2; exit 1; }
cargo build --release -q -p elasticrun-examples --bin swarm
cargo build --release -q -p coordinator --bin elasticrun
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(100 1000)
seed=${SEED:-$(date +%s)}
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
dir=$(mktemp -d)
client=$(port)
peer=$(port)
etcd --name m0 --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "m0=http://127.0.0.1:$peer" --log-level error >"$dir/etcd.log" 2>&1 &
etcd_pid=$!
trap 'kill "$etcd_pid" 2>/dev/null; wait "$etcd_pid" 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 300); do
    if python3 -c "import urllib.request,sys; sys.exit(0 if b'true' in urllib.request.urlopen('http://127.0.0.1:$client/health', timeout=1).read() else 1)" 2>/dev/null; then
        break
    fi
    sleep 0.1
done
echo "# bench_scale_etcd $(date -u +%Y-%m-%dT%H:%MZ) seed $seed, $(nproc) cores, etcd $(etcd --version | head -1)" >&2
for n in "${sizes[@]}"; do
    target/release/swarm --etcd "http://127.0.0.1:$client" --workers "$n" \
        --slots-per-host "${SLOTS:-8}" --steady "${STEADY:-5}" --seed "$seed"
done
