#!/usr/bin/env bash
# Builds everything the GPU path needs checked on a GPU machine into one
# self-contained folder, for a machine with a GPU, its driver and NCCL but no
# Rust toolchain or network: the GPU test binaries (release, stripped), collbench,
# synthetic_benchmark and elasticrun with the `cuda` feature, and run.sh, which
# runs them there in one go (docs/gpu.md, "Checking on a GPU machine").
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
    --bin collbench --bin synthetic_benchmark --bin elasticrun
for b in collbench synthetic_benchmark elasticrun; do
    cp "target/release/$b" "$out/bin/$b"
done
strip "$out"/bin/*
cat > "$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs the GPU checks of this bundle; every output goes to RESULTS.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
res=${1:-$here/results}
mkdir -p "$res"
bin=$here/bin
{
    date -u
    nvidia-smi || echo "no nvidia-smi"
    ldconfig -p | grep -E 'libcuda\.so|libnccl' || echo "ldconfig: no libcuda/libnccl"
    find / -xdev -name 'libnccl.so*' 2>/dev/null | head -5
} > "$res/machine.txt" 2>&1
status=0
for t in "$bin"/test-*; do
    name=$(basename "$t")
    # The worker's tests are one binary (test-it): its GPU ones alone.
    filter=""
    [ "$name" = test-it ] && filter=gpu_engine::
    "$t" --test-threads 1 --nocapture $filter > "$res/$name.txt" 2>&1 || status=1
    tail -3 "$res/$name.txt"
done
timeout 300 "$bin/collbench" --np 2 --device cuda --min-bytes 4K --max-bytes 256M \
    > "$res/collbench_cuda.txt" 2>&1 || status=1
timeout 300 "$bin/collbench" --np 2 --min-bytes 4K --max-bytes 256M \
    > "$res/collbench_host.txt" 2>&1 || status=1
for h in "" --hierarchical-allreduce; do
    timeout 300 "$bin/elasticrun" -np 2 $h "$bin/synthetic_benchmark" --device cuda \
        > "$res/synthetic_cuda${h:+_hierarchical}.txt" 2>&1 || status=1
done
echo "exit $status; results in $res"
exit "$status"
RUN
chmod +x "$out/run.sh"
du -sh "$out" "$out"/bin/*
