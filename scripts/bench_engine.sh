#!/usr/bin/env bash
# The engine (negotiation, response cache, fusion, cycle time) under training
# steps on one machine: `elasticrun -np NP synthetic_benchmark` in
#   (a) 100 x 16 KiB tensors per step, fusion off (--fusion-threshold-mb 0) vs on (64),
#       over shared memory (the default for ranks of one host) and over TCP
#   (b) ResNet-50's gradients (161 tensors, 97.5 MiB) per step, fusion threshold
#       0/1/4/16/64 MB (cycle time 1 ms), and cycle time 0.5/1/5/10 ms (fusion 64 MB)
# with, as the reference the engine is held to, one collbench allreduce (average, as the engine runs) of each
# step's bytes (1.6 MB and 96 MiB) over each path; and, when PEERS_VENV is set (see ../shared/peers), the same work from Python
# with Gloo (scripts/gloo_engine_peer.py: one by one, async, one flat buffer).
# Every configuration runs once per round, rounds interleaved so that all see the
# same machine state; the table gives the median over the rounds.
#
#   scripts/bench_engine.sh [ROUNDS]        (default 3)
#
# Environment: NP (2), STEPS_SMALL (200) and STEPS_RESNET (20) timed steps,
# WARMUP (5), RESNET_ARGS (workload of (b) instead of ResNet-50, e.g.
# "--num-tensors 16 --tensor-bytes 64K" for a quick check), PROFILE (release;
# debug only to check the script itself), PEERS_VENV.
# Raw outputs go to target/bench/engine-DATE/; the table is saved there as report.md.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
np=${NP:-2}
steps_small=${STEPS_SMALL:-200}
steps_resnet=${STEPS_RESNET:-20}
warmup=${WARMUP:-5}
profile=${PROFILE:-release}
read -r -a resnet <<< "${RESNET_ARGS:-}"
out=target/bench/engine-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
if [ "$profile" = release ]; then
  cargo build --release -q -p coordinator --bin elasticrun -p elasticrun-examples --bin synthetic_benchmark --bin collbench
else
  cargo build -q -p coordinator --bin elasticrun -p elasticrun-examples --bin synthetic_benchmark --bin collbench
fi
cb=target/$profile/collbench
er=target/$profile/elasticrun
sb=target/$profile/synthetic_benchmark
small=(--num-tensors 100 --tensor-bytes 16K --steps "$steps_small" --warmup-steps "$warmup")
big=("${resnet[@]}" --steps "$steps_resnet" --warmup-steps "$warmup")
{ uname -r; nproc; lscpu | grep 'Model name' || true; git rev-parse --short HEAD; date -u; } > "$out/machine.txt"
: > "$out/configs.tsv"

# ours FILE SECTION LABEL ELASTICRUN_FLAGS... -- BENCHMARK_ARGS...
ours() {
  local file=$1 section=$2 label=$3
  shift 3
  local flags=()
  while [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  grep -q "^$file	" "$out/configs.tsv" || printf '%s\t%s\telasticrun\t%s\n' "$file" "$section" "$label" >> "$out/configs.tsv"
  "$er" -np "$np" "${flags[@]}" "$sb" "$@" > "$out/$file.log" 2>&1 \
    || { echo "failed: $label (see $out/$file.log)" >&2; cat "$out/$file.log" >&2; exit 1; }
  grep '"event":"done"' "$out/$file.log" | sed 's/^\[0\]<stdout>://' >> "$out/$file.jsonl"
}

# single LABEL BYTES COLLBENCH_FLAGS...: one allreduce of a step's bytes
single() {
  local label=$1 bytes=$2
  shift 2
  "$cb" --np "$np" --op allreduce --reduce-op average --dtype f32 --min-bytes "$bytes" --max-bytes "$bytes" --json "$@" \
    | sed "s/^{/{\"label\":\"$label\",/" >> "$out/single.jsonl"
}

# gloo SECTION WORKLOAD ARGS...: one row per mode
gloo() {
  local section=$1 workload=$2
  shift 2
  "$PEERS_VENV/bin/python" scripts/gloo_engine_peer.py --nproc "$np" --workload "$workload" \
    --warmup-steps "$warmup" "$@" > "$out/gloo_$workload.log"
  for mode in one_by_one async flat; do
    local file=gloo_${workload}_$mode
    grep -q "^$file	" "$out/configs.tsv" || printf '%s\t%s\tgloo\t%s\n' "$file" "$section" "${mode//_/ }" >> "$out/configs.tsv"
    grep "\"mode\": \"$mode\"" "$out/gloo_$workload.log" >> "$out/$file.jsonl"
  done
}

a="(a) 100 x 16 KiB tensors per step"
if [ ${#resnet[@]} -eq 0 ]; then b="(b) ResNet-50 gradients per step"; else b="(b) ${resnet[*]} per step"; fi
for r in $(seq "$rounds"); do
  echo "round $r/$rounds" >&2
  ours a_fusion0 "$a" "fusion off" --fusion-threshold-mb 0 -- "${small[@]}"
  ours a_fusion64 "$a" "fusion 64 MB" --fusion-threshold-mb 64 -- "${small[@]}"
  ours a_fusion64_tcp "$a" "fusion 64 MB, TCP" --fusion-threshold-mb 64 --no-shared-memory -- "${small[@]}"
  ours b_tcp "$b" "fusion 64 MB, cycle 1 ms, TCP" --no-shared-memory -- "${big[@]}"
  single "1.6 MB, shared memory" 1600K
  single "1.6 MB, TCP" 1600K --no-shared-memory
  single "96 MiB, shared memory" 96M
  single "96 MiB, TCP" 96M --no-shared-memory
  for mb in 0 1 4 16 64; do
    ours "b_fusion$mb" "$b" "fusion $mb MB, cycle 1 ms" --fusion-threshold-mb "$mb" --cycle-time-ms 1 -- "${big[@]}"
  done
  for ms in 0.5 5 10; do
    ours "b_cycle$ms" "$b" "fusion 64 MB, cycle $ms ms" --fusion-threshold-mb 64 --cycle-time-ms "$ms" -- "${big[@]}"
  done
  if [ -n "${PEERS_VENV:-}" ]; then
    gloo "$a" small --steps "$steps_small"
    if [ ${#resnet[@]} -eq 0 ]; then
      gloo "$b" resnet50 --steps "$steps_resnet"
    fi
  fi
done

python3 - "$out" "$np" <<'PY' | tee "$out/report.md"
import json, statistics, sys
out, np = sys.argv[1], sys.argv[2]
sections = {}
for line in open(f"{out}/configs.tsv"):
    file, sec, program, label = line.rstrip("\n").split("\t")
    rows = [json.loads(l) for l in open(f"{out}/{file}.jsonl") if l.strip()]
    if rows:
        sections.setdefault(sec, []).append((program, label, rows))
for sec, configs in sections.items():
    first = configs[0][2][0]
    print(f"\n{sec}: {first['num_tensors']} tensors, {first['total_bytes'] / 2**20:.2f} MiB, "
          f"np={np}, median over {len(configs[0][2])} runs\n")
    print("| program | configuration | steps/s | MB/s | step ms (median) | tensors per collective |")
    print("|---|---|---:|---:|---:|---:|")
    for program, label, rows in configs:
        med = lambda f: statistics.median(f(r) for r in rows)
        fused = "-"
        if all((r.get("engine") or {}).get("collectives") for r in rows):
            fused = f"{med(lambda r: r['engine']['tensors'] / r['engine']['collectives']):.1f}"
        print(f"| {program} | {label} | {med(lambda r: r['steps_per_sec']):.1f} "
              f"| {med(lambda r: r['bytes_per_sec']) / 1e6:.0f} "
              f"| {med(lambda r: r['step_ms']['median']):.2f} | {fused} |")
singles = {}
try:
    for l in open(f"{out}/single.jsonl"):
        r = json.loads(l)
        singles.setdefault(r["label"], []).append(r["time_us"])
except FileNotFoundError:
    pass
if singles:
    print("\nReference: one collbench allreduce of a step's bytes, same run\n")
    print("| allreduce | time ms (median over runs) |")
    print("|---|---:|")
    for label, ts in singles.items():
        print(f"| {label} | {statistics.median(ts) / 1e3:.3f} |")
PY
