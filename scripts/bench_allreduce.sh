#!/usr/bin/env bash
# Side-by-side allreduce benchmark on this machine, in one run: the loopback TCP
# ceiling (iperf3 one-way and --bidir), the memory-bandwidth ceiling (membench),
# Gloo through PyTorch (../shared/peers) and collbench over shared memory (its
# default for ranks of one host) and over TCP (--no-shared-memory), interleaved
# round by round so that all see the same machine state.
#
#   scripts/bench_allreduce.sh [ROUNDS]        (default 3; about 3 minutes a round)
#
# Raw outputs go to target/bench/allreduce-DATE/; the summary (markdown) is printed
# by scripts/bench_report.py and saved there as report.md.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
out=target/bench/allreduce-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
command -v iperf3 >/dev/null || { echo "iperf3 is needed (apt-get install iperf3)" >&2; exit 1; }
venv=$(bash ../shared/peers/setup.sh | tail -n 1)
cargo build --release -q -p elasticrun-examples
bench=target/release/collbench
port=5299
iperf() {
  iperf3 -s -B 127.0.0.1 -p "$port" -1 >/dev/null 2>&1 &
  local server=$!
  sleep 0.5
  iperf3 -c 127.0.0.1 -p "$port" -t 5 --json "$@"
  wait "$server" || true
}
{ uname -r; nproc; lscpu | grep 'Model name'; iperf3 --version | head -n 1; date -u; } > "$out/machine.txt"
for r in $(seq "$rounds"); do
  echo "round $r/$rounds" >&2
  iperf > "$out/iperf_oneway_$r.json"
  iperf --bidir > "$out/iperf_bidir_$r.json"
  target/release/membench > "$out/membench_$r.txt"
  for n in 2 4; do
    "$venv/bin/python" ../shared/peers/gloo_allreduce.py --nproc "$n" --skip-extra > "$out/gloo_n${n}_$r.txt"
    "$bench" --np "$n" --op allreduce --dtype f32 --min-bytes 4K --max-bytes 256M --step-factor 4 --json \
      > "$out/collbench_n${n}_$r.jsonl"
    "$bench" --np "$n" --op allreduce --dtype f32 --min-bytes 4K --max-bytes 256M --step-factor 4 --json \
      --no-shared-memory > "$out/collbenchtcp_n${n}_$r.jsonl"
  done
done
python3 scripts/bench_report.py "$out" | tee "$out/report.md"
