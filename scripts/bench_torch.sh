#!/usr/bin/env bash
# Horovod's synthetic-benchmark loop (scripts/torch_synthetic.py: a
# torchvision model on fixed random data) under elasticrun with
# elasticrun.torch, beside DistributedDataParallel on elasticrun's
# torch.distributed backend under elasticrun, DistributedDataParallel over
# Gloo under torchrun and, when HVD_VENV is set, Horovod itself under horovodrun (Gloo), NP ranks
# on this machine, rounds interleaved; prints total img/s of each.
#
#   scripts/bench_torch.sh [ROUNDS] [-- extra torch_synthetic.py arguments]
#
# Environment: NP (2), FSDP=1 (also FSDP2, fully_shard per top-level block,
# on the elasticrun backend under elasticrun and over Gloo under torchrun), VENV (with torch, torchvision, numpy and the elasticrun
# package; default target/pyenv, see python/tests/run.sh), HVD_VENV (a venv
# with Horovod 0.28.1 and torchvision: ../shared/peers/hvd_build.sh),
# BASE_MODULE (a folder holding another build of the elasticrun package, e.g.
# an unpacked wheel of an older commit: `maturin build --release` in a
# worktree of it, then unzip; an arm with it first on PYTHONPATH runs before
# the others in each round), ALLOCATOR_AB=1 (also elasticrun with glibc's
# allocator defaults, `GLIBC_TUNABLES=`, and the peers with the allocator
# settings elasticrun gives its workers: docs/launching.md), CEILING=1 (also
# DDP without communication under torchrun, `--no-communication`: a comm
# hook that hands the buckets back unreduced, with glibc's defaults and with
# elasticrun's allocator settings: no backend's DDP can be faster; and DDP
# over Gloo with those settings too).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
shift || true
[ "${1:-}" = "--" ] && shift
np=${NP:-2}
venv=${VENV:-$PWD/target/pyenv}
cargo build --release -q -p coordinator --bin elasticrun
"$venv/bin/python" -c 'import torchvision' 2>/dev/null || "$venv/bin/pip" install -q torchvision
(cd python && VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" maturin develop --release -q)
rate() { grep -o '"img_per_s": [0-9.]*' | awk '{print $2}'; }
tuned=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=67108864
ddp() { "$venv/bin/torchrun" --nproc-per-node "$np" scripts/torch_synthetic.py --api ddp "$@" 2>/dev/null | rate; }
fsdp() {
    e=$(target/release/elasticrun -np "$np" "$venv/bin/python" scripts/torch_synthetic.py --api fsdp --backend elasticrun "$@" 2>/dev/null | rate)
    g=$("$venv/bin/torchrun" --nproc-per-node "$np" scripts/torch_synthetic.py --api fsdp "$@" 2>/dev/null | rate)
    echo "; FSDP2 on elasticrun $e img/s, FSDP2 over Gloo under torchrun $g img/s"
}
hvd() {
    # horovodrun sets no OMP_NUM_THREADS; the other two launchers set 1.
    OMP_NUM_THREADS=1 PATH="$HVD_VENV/bin:$PATH" "$HVD_VENV/bin/horovodrun" --gloo -np "$np" -H "localhost:$np" \
        --network-interface lo "$HVD_VENV/bin/python" scripts/torch_synthetic.py --api horovod "$@" 2>/dev/null |
        sed 's/^\[[0-9]*\]<stdout>://' | rate
}
for r in $(seq 1 "$rounds"); do
    base=
    if [ -n "${BASE_MODULE:-}" ]; then
        base=$(PYTHONPATH="$BASE_MODULE" target/release/elasticrun -np "$np" "$venv/bin/python" scripts/torch_synthetic.py --api elasticrun "$@" 2>/dev/null | rate)
        base="elasticrun.torch of $BASE_MODULE $base img/s, "
    fi
    a=$(target/release/elasticrun -np "$np" "$venv/bin/python" scripts/torch_synthetic.py --api elasticrun "$@" 2>/dev/null | rate)
    d=$(target/release/elasticrun -np "$np" "$venv/bin/python" scripts/torch_synthetic.py --api ddp --backend elasticrun "$@" 2>/dev/null | rate)
    b=$(ddp "$@")
    c=
    if [ -n "${HVD_VENV:-}" ]; then
        c=", Horovod under horovodrun $(hvd "$@") img/s"
    fi
    if [ -n "${ALLOCATOR_AB:-}" ]; then
        u=$(GLIBC_TUNABLES= target/release/elasticrun -np "$np" "$venv/bin/python" scripts/torch_synthetic.py --api elasticrun "$@" 2>/dev/null | rate)
        c="$c; with glibc's allocator defaults: elasticrun.torch $u img/s; with elasticrun's allocator settings: DDP $(GLIBC_TUNABLES=$tuned ddp "$@") img/s"
        [ -n "${HVD_VENV:-}" ] && c="$c, Horovod $(GLIBC_TUNABLES=$tuned hvd "$@") img/s"
    fi
    [ -n "${FSDP:-}" ] && c="$c$(fsdp "$@")"
    if [ -n "${CEILING:-}" ]; then
        c="$c; DDP over Gloo with elasticrun's allocator settings $(GLIBC_TUNABLES=$tuned ddp "$@") img/s"
        c="$c; DDP without communication $(ddp --no-communication "$@") img/s, with elasticrun's allocator settings $(GLIBC_TUNABLES=$tuned ddp --no-communication "$@") img/s"
    fi
    echo "round $r: ${base}elasticrun.torch $a img/s, DDP on elasticrun $d img/s, DDP over Gloo under torchrun $b img/s$c"
done
