#!/usr/bin/env bash
# Builds everything the GPU path needs checked on a GPU machine into one
# self-contained folder, for a machine with a GPU, its driver and NCCL but no
# Rust toolchain or network: the GPU test binaries (release, stripped), collbench,
# synthetic_benchmark, gpu_elastic and elasticrun with the `cuda` feature, the
# Python package with its native module (py/), and run.sh
# (scripts/gpu_checks.sh), which runs them there in one go (docs/gpu.md,
# "Checking on a GPU machine").
#
#   scripts/gpu_bundle.sh [OUT]        (default target/gpu-bundle)
#   HOROVOD_SYNTHETIC=.../pytorch_synthetic_benchmark.py scripts/gpu_bundle.sh
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
# The Python package with its native module (release, the `cuda` feature by
# default), its GPU tests and the benchmark scripts they use.
cargo build --release -q -p elasticrun-python
mkdir -p "$out/py/tests" "$out/py/scripts"
cp -r python/elasticrun "$out/py/elasticrun"
find "$out/py" -name __pycache__ -prune -exec rm -rf {} +
rm -f "$out/py/elasticrun/"*.so
cp target/release/lib_elasticrun.so "$out/py/elasticrun/_elasticrun.abi3.so"
strip "$out/py/elasticrun/_elasticrun.abi3.so"
cp -r python/tests/gpu "$out/py/tests/gpu"
cp scripts/bench_cuda_allreduce.py scripts/torch_synthetic.py "$out/py/scripts/"
# Horovod's examples/pytorch/pytorch_synthetic_benchmark.py, if named in
# HOROVOD_SYNTHETIC, with its import line changed (its code stays out of
# this repository).
if [ -n "${HOROVOD_SYNTHETIC:-}" ]; then
    sed 's/^import horovod.torch as hvd$/import elasticrun.torch as hvd/' "$HOROVOD_SYNTHETIC" \
        > "$out/py/scripts/horovod_pytorch_synthetic_benchmark.py"
fi
cp scripts/gpu_checks.sh "$out/run.sh"
chmod +x "$out/run.sh"
du -sh "$out"/bin/* "$out/py" "$out"
