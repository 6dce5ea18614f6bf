#!/usr/bin/env bash
# The encrypted data planes beside TCP on this machine, in one run: collbench
# allreduce, 2 ranks on loopback, the three data planes interleaved round by
# round (tcp, quic, tls, tcp, quic, tls, ...) so that all see the same machine
# state; then ring's AES-128-GCM alone.
#
#   scripts/bench_quic.sh [ROUNDS] [EXTRA COLLBENCH OPTIONS FOR QUIC...]
#                                  (default 5 rounds; about 30 seconds a round)
#   e.g. scripts/bench_quic.sh 3 --quic-initial-mtu 65000
#
# With VETH_MTU set (root; e.g. VETH_MTU=9000), the two ranks run in two
# network namespaces joined by a veth pair of that MTU (10.77.0.1 and
# 10.77.0.2, made here and deleted on exit) instead of on loopback.
#
# Raw outputs go to target/bench/quic-DATE/ (or $OUT); the summary (markdown:
# medians over rounds of each run's median time and busbw, and quic/tcp) is
# printed and saved there as report.md (QUIC's and TLS's against TCP). $COLLBENCH and $AEAD_BENCH name other
# binaries (default: the release build of this checkout). With $QUIC_ENV set
# (e.g. QUIC_ENV="MALLOC_TRIM_THRESHOLD_=268435456 MALLOC_MMAP_THRESHOLD_=33554432")
# a third arm runs QUIC again with that environment, interleaved too.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
shift || true
out=${OUT:-target/bench/quic-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
if [[ -z ${COLLBENCH:-} || -z ${AEAD_BENCH:-} ]]; then
  cargo build --release -q -p elasticrun-examples --bins
fi
bench=${COLLBENCH:-target/release/collbench}
aead=${AEAD_BENCH:-target/release/aead_bench}
sweep=(--np 2 --op allreduce --dtype f32 --min-bytes 4K --max-bytes 16M --step-factor 4 --json)
where="loopback"
if [[ -n ${VETH_MTU:-} ]]; then
  ns=(erbq0-$$ erbq1-$$)
  cleanup() { ip netns del "${ns[0]}" 2>/dev/null || true; ip netns del "${ns[1]}" 2>/dev/null || true; }
  trap cleanup EXIT
  ip netns add "${ns[0]}"
  ip netns add "${ns[1]}"
  ip link add erbq0 netns "${ns[0]}" mtu "$VETH_MTU" type veth peer name erbq1 netns "${ns[1]}" mtu "$VETH_MTU"
  for i in 0 1; do
    ip -n "${ns[$i]}" addr add "10.77.0.$((i + 1))/24" dev "erbq$i"
    ip -n "${ns[$i]}" link set "erbq$i" up
    ip -n "${ns[$i]}" link set lo up
  done
  sweep+=(--netns "${ns[0]}=10.77.0.1,${ns[1]}=10.77.0.2")
  where="two network namespaces over a veth of MTU $VETH_MTU"
fi
{ uname -r; nproc; lscpu | grep 'Model name'; date -u; echo "quic options: $*"; echo "$where"; } > "$out/machine.txt"
for r in $(seq "$rounds"); do
  echo "round $r/$rounds ($(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$out/load.txt" >&2
  "$bench" "${sweep[@]}" --transport tcp --no-shared-memory > "$out/tcp_$r.jsonl"
  "$bench" "${sweep[@]}" --transport quic "$@" > "$out/quic_$r.jsonl"
  "$bench" "${sweep[@]}" --transport tls --no-shared-memory > "$out/tls_$r.jsonl"
  if [[ -n ${QUIC_ENV:-} ]]; then
    env $QUIC_ENV "$bench" "${sweep[@]}" --transport quic "$@" > "$out/quicenv_$r.jsonl"
  fi
done
"$aead" > "$out/aead.txt"
WHERE="$where" QUIC_ENV=${QUIC_ENV:-} python3 - "$out" > "$out/report.md" <<'EOF'
import glob, json, os, statistics, sys
d = sys.argv[1]
def runs(t):
    return [list(map(json.loads, open(p))) for p in sorted(glob.glob(f"{d}/{t}_*.jsonl"))]
def med(rows, b, k):
    return statistics.median(r[k] for run in rows for r in run if r["bytes"] == b)
tcp, quic, tls, qenv = runs("tcp"), runs("quic"), runs("tls"), runs("quicenv")
print(f"n = 2, allreduce f32, {os.environ['WHERE']}; medians over {len(tcp)} interleaved rounds\n")
print("| bytes | TCP µs | QUIC µs | time QUIC/TCP | TCP busbw GB/s | QUIC busbw GB/s | busbw QUIC/TCP |")
print("|---:|---:|---:|---:|---:|---:|---:|")
for b in sorted({r["bytes"] for run in tcp for r in run}):
    tt, qt = med(tcp, b, "time_us"), med(quic, b, "time_us")
    tb, qb = med(tcp, b, "busbw_gbps"), med(quic, b, "busbw_gbps")
    print(f"| {b} | {tt:.1f} | {qt:.1f} | {qt / tt:.2f} | {tb:.3f} | {qb:.3f} | {qb / tb:.2f} |")
print("\nTLS over TCP (`--transport tls`):\n")
print("| bytes | TLS µs | time TLS/TCP | TLS busbw GB/s | busbw TLS/TCP | busbw TLS/QUIC |")
print("|---:|---:|---:|---:|---:|---:|")
for b in sorted({r["bytes"] for run in tcp for r in run}):
    tt, lt = med(tcp, b, "time_us"), med(tls, b, "time_us")
    tb, lb, qb = med(tcp, b, "busbw_gbps"), med(tls, b, "busbw_gbps"), med(quic, b, "busbw_gbps")
    print(f"| {b} | {lt:.1f} | {lt / tt:.2f} | {lb:.3f} | {lb / tb:.2f} | {lb / qb:.2f} |")
if qenv:
    print(f"\nQUIC with {os.environ.get('QUIC_ENV', '')}:\n")
    print("| bytes | QUIC µs | time /TCP | busbw GB/s | busbw /TCP |")
    print("|---:|---:|---:|---:|---:|")
    for b in sorted({r["bytes"] for run in tcp for r in run}):
        tt, et = med(tcp, b, "time_us"), med(qenv, b, "time_us")
        tb, eb = med(tcp, b, "busbw_gbps"), med(qenv, b, "busbw_gbps")
        print(f"| {b} | {et:.1f} | {et / tt:.2f} | {eb:.3f} | {eb / tb:.2f} |")
checks = {r["check"] for run in tcp + quic + qenv for r in run}
print(f"\nchecks: {', '.join(sorted(checks))}\n")
print("```\n" + open(f"{d}/aead.txt").read() + "```")
EOF
cat "$out/report.md"
