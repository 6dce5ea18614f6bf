#!/usr/bin/env bash
# The Python layer's cost per tensor: the same training step (N tensors of
# SIZE bytes, each allreduced with Average, then all waited for) from Rust
# (synthetic_benchmark), from Python on numpy arrays (elasticrun) and on CPU
# torch tensors (elasticrun.torch), `elasticrun -np NP` each, release builds,
# rounds interleaved; prints each round's median step time and the medians.
#
#   scripts/bench_python.sh [ROUNDS]       (default 5)
#
# Environment: NP (2), TENSORS (100), BYTES (16384), STEPS (200), VENV (a
# virtual environment with torch and numpy; default target/pyenv, which
# python/tests/run.sh makes). The package is installed there as a release
# build (maturin develop --release).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
np=${NP:-2}
tensors=${TENSORS:-100}
bytes=${BYTES:-16384}
steps=${STEPS:-200}
venv=${VENV:-$PWD/target/pyenv}
cargo build --release -q -p coordinator --bin elasticrun -p elasticrun-examples --bin synthetic_benchmark
(cd python && VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" maturin develop --release -q)
er=target/release/elasticrun
rust=() numpy=() torch=()
for r in $(seq 1 "$rounds"); do
    a=$("$er" -np "$np" target/release/synthetic_benchmark --num-tensors "$tensors" --tensor-bytes "$bytes" --steps "$steps" 2>/dev/null | grep step_ms | tail -1)
    b=$("$er" -np "$np" "$venv/bin/python" scripts/python_engine_bench.py --api numpy --num-tensors "$tensors" --tensor-bytes "$bytes" --steps "$steps" 2>/dev/null | grep step_ms | tail -1)
    c=$("$er" -np "$np" "$venv/bin/python" scripts/python_engine_bench.py --api torch --num-tensors "$tensors" --tensor-bytes "$bytes" --steps "$steps" 2>/dev/null | grep step_ms | tail -1)
    ms() { python3 -c 'import json,sys; l=sys.argv[1]; print(round(json.loads(l[l.index("{"):])["step_ms"]["median"], 3))' "$1"; }
    rust+=("$(ms "$a")") numpy+=("$(ms "$b")") torch+=("$(ms "$c")")
    echo "round $r: rust ${rust[-1]} ms, python/numpy ${numpy[-1]} ms, python/torch ${torch[-1]} ms"
done
python3 - "$tensors" "${rust[*]}" "${numpy[*]}" "${torch[*]}" <<'PY'
import statistics, sys
n = int(sys.argv[1])
r, p, t = (statistics.median(map(float, a.split())) for a in sys.argv[2:5])
print(f"median step: rust {r:.3f} ms, numpy {p:.3f} ms ({p / r:.2f}x), torch {t:.3f} ms ({t / r:.2f}x)")
print(f"python's cost per tensor: numpy {1e3 * (p - r) / n:.1f} us, torch {1e3 * (t - r) / n:.1f} us")
PY
