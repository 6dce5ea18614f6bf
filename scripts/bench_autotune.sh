#!/bin/bash
# Autotune against default knobs and an exhaustive grid, in one run, on this machine:
# synthetic_benchmark on 2 ranks (ResNet-50's 161 gradient tensors unless BENCH_ARGS
# says otherwise; e.g. BENCH_ARGS="--num-tensors 100 --tensor-bytes 16K").
#   1. grid: one run per point of fusion x cycle time x cache x segment size;
#   2. autotune: TUNED runs with --autotune (default settings: 3 warm-up samples,
#      10 steps per sample, 20 samples), each writing its chosen values;
#   3. final: the default point, the 3 best grid points and every tuned choice (run
#      from its .params.yaml through --config-file), re-measured REPEAT times,
#      interleaved, so that the grid's best is not just its luckiest run.
# Usage: cargo build --release --bins && scripts/bench_autotune.sh > bench.txt
# Prints one line per measurement; steps/s, higher is better (final: steps/s over the
# run, then 1000 / median step ms). STAGES="final" with the
# OUT of an earlier run re-measures its grid's best and its tuned choices only.
set -u
cd "$(dirname "$0")/.."
R=target/release
ARGS=${BENCH_ARGS:-}
STEPS=${STEPS:-20}
TUNE_STEPS=${TUNE_STEPS:-300}
TUNED=${TUNED:-5}
REPEAT=${REPEAT:-5}
FINAL_STEPS=${FINAL_STEPS:-40}
STAGES=${STAGES:-grid tune final}
OUT=${OUT:-$(mktemp -d)}
sps() { grep -o '"steps_per_sec":[0-9.]*' | cut -d: -f2; }
# bench STEPS ELASTICRUN_OPTIONS...
bench() {
  local n=$1
  shift
  # shellcheck disable=SC2086
  $R/elasticrun -np 2 "$@" $R/synthetic_benchmark $ARGS --steps "$n" 2>&1 | sps
}
# bench_both STEPS ELASTICRUN_OPTIONS...: steps/s over the run, and 1000 / median step
# ms (steady state: a stall of the machine moves it less)
bench_both() {
  local n=$1
  shift
  # shellcheck disable=SC2086
  $R/elasticrun -np 2 "$@" $R/synthetic_benchmark $ARGS --steps "$n" 2>&1 | tr ',{' '\n\n' |
    awk -F: '/"steps_per_sec"/ {s = $2} /"median"/ {m = $2} END {printf "%.2f %.2f", s, 1000 / m}'
}
grid_point() { # fusion MiB, cycle ms, cache flag ("" or --disable-cache), segment
  echo "--fusion-threshold-mb $1 --cycle-time-ms $2 $3 --segment-size $4"
}

has() { [[ " $STAGES " == *" $1 "* ]]; }

if has grid; then
echo "# grid ($STEPS steps per point)"
for f in 0 1 8 64 256; do for c in 0.1 1 5 20; do for cache in "" --disable-cache; do
  for seg in 64K 256K 1M 4M 16M; do
    p=$(grid_point "$f" "$c" "$cache" "$seg")
    echo "grid $(bench "$STEPS" $p) $p"
  done
done; done; done | tee "$OUT/grid.txt"
fi

if has tune; then
echo "# autotune ($TUNE_STEPS steps per run, whole run)"
for i in $(seq "$TUNED"); do
  rm -f "$OUT/tune$i.csv"
  v=$(bench "$TUNE_STEPS" --autotune --autotune-log-file "$OUT/tune$i.csv")
  echo "autotune$i $v $(grep -v '^params' "$OUT/tune$i.params.yaml" | tr -d ' ' | tr '\n' ' ')"
done
fi

has final || exit 0
echo "# final ($FINAL_STEPS steps per run, $REPEAT interleaved rounds)"
mapfile -t top < <(sort -k2 -g -r "$OUT/grid.txt" | head -3 | cut -d' ' -f3-)
for r in $(seq "$REPEAT"); do
  echo "default $(bench_both "$FINAL_STEPS")"
  for i in "${!top[@]}"; do
    # shellcheck disable=SC2086
    echo "grid_top$((i + 1)) $(bench_both "$FINAL_STEPS" ${top[$i]}) ${top[$i]}"
  done
  for i in $(seq "$TUNED"); do
    echo "tuned$i $(bench_both "$FINAL_STEPS" --config-file "$OUT/tune$i.params.yaml")"
  done
done
echo "# logs in $OUT"
