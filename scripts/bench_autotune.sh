#!/bin/bash
# Autotune on this machine: synthetic_benchmark (100 x 16 KiB tensors, 2 ranks) with
# default knobs, with --autotune (whole run, exploration included; the chosen values
# are printed), and over a grid of fusion threshold x cycle time x cache.
# Usage: scripts/bench_autotune.sh   (after cargo build --release --bins)
cd "$(dirname "$0")/.."
R=target/release
B="$R/synthetic_benchmark --num-tensors 100 --tensor-bytes 16K --steps 1000"
sps() { grep -o '"steps_per_sec":[0-9.]*' | cut -d: -f2; }
echo "default: $(for i in 1 2 3; do $R/elasticrun -np 2 $B 2>&1 | sps; done | tr '\n' ' ')"
echo "autotune: $(for i in 1 2 3; do rm -f /tmp/g$i.csv; $R/elasticrun -np 2 --autotune --autotune-log-file /tmp/g$i.csv $B 2>&1 | sps; done | tr '\n' ' ')"
for i in 1 2 3; do echo "chosen$i: $(grep -v '^params' /tmp/g$i.params.yaml | tr -d '\n ')"; done
best=0
for f in 0 1 16 64 256; do for c in 0.1 0.5 1 5; do for cache in "" "--disable-cache"; do
  v=$($R/elasticrun -np 2 --fusion-threshold-mb $f --cycle-time-ms $c $cache $B 2>&1 | sps)
  echo "grid f=$f c=$c $cache: $v"
done; done; done
