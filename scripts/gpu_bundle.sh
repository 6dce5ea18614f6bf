#!/usr/bin/env bash
# Builds everything the GPU path needs checked on a GPU machine into one
# self-contained folder, for a machine with a GPU, its driver and NCCL but no
# Rust toolchain or network: the GPU test binaries (release, stripped), collbench,
# synthetic_benchmark, gpu_elastic and elasticrun with the `cuda` feature, and
# run.sh (scripts/gpu_checks.sh), which runs them there in one go (docs/gpu.md,
# "Checking on a GPU machine").
#
#   scripts/gpu_bundle.sh [OUT]        (default target/gpu-bundle)
#   then, on the GPU machine, from a copy of this checkout holding OUT:
#   OUT/run.sh [RESULTS]               (default OUT/results)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/gpu-bundle}
rm -rf "$out"
mkdir -p "$out/bin"
features=gpu/cuda,worker/cuda,elasticrun-examples/cuda
# The test binaries: cargo prints each one's path in its JSON messages.
tests=$(cargo test --release --no-run -q --message-format=json \
    -p gpu -p worker --features gpu/cuda,worker/cuda --test nccl --test it |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["executable"])
')
while read -r name path; do
    cp "$path" "$out/bin/test-$name"
done <<< "$tests"
cargo build --release -q -p elasticrun-examples -p coordinator --features "$features" \
    --bin collbench --bin synthetic_benchmark --bin gpu_elastic --bin elasticrun
for b in collbench synthetic_benchmark gpu_elastic elasticrun; do
    cp "target/release/$b" "$out/bin/$b"
done
strip "$out"/bin/*
cp scripts/gpu_checks.sh "$out/run.sh"
chmod +x "$out/run.sh"
du -sh "$out"/bin/* "$out"
