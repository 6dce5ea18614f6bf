#!/usr/bin/env bash
# The GPU checks, run on a GPU machine from a bundle that scripts/gpu_bundle.sh
# made (it copies this file in as run.sh, beside bin/). Every step has a
# deadline; every output goes to RESULTS, and a one-line verdict per step to
# RESULTS/summary.txt (docs/gpu.md, "Checking on a GPU machine").
#
#   run.sh [RESULTS]          (default: results beside run.sh)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
res=${1:-$here/results}
mkdir -p "$res"
bin=$here/bin
summary=$res/summary.txt
: > "$summary"
status=0

note() { echo "$*" | tee -a "$summary"; }

# The whole run's budget: steps that would start after it are skipped.
budget=${GPU_CHECKS_BUDGET:-360}
over_budget() { [ $SECONDS -ge "$budget" ]; }

# step NAME SECONDS COMMAND...: runs COMMAND under a deadline into NAME.txt.
step() {
    local name=$1 secs=$2
    shift 2
    if over_budget; then
        note "$name: skipped, out of time"
        return
    fi
    local t0=$SECONDS
    timeout -k 5 "$secs" "$@" > "$res/$name.txt" 2>&1
    local rc=$?
    [ "$rc" = 0 ] || status=1
    note "$name: exit $rc in $((SECONDS - t0)) s"
}

# NCCL: the system's (the loader finds libnccl.so.2), else the one of Python's
# nvidia-nccl wheel, named in ELASTICRUN_NCCL_LIBRARY for the Rust programs.
# A Python process does not need it: the engine uses the NCCL torch loaded.
if ! ldconfig -p | grep -q 'libnccl\.so\.2 '; then
    nccl=$(python3 -c 'import nvidia.nccl as n, glob; print(sorted(glob.glob(n.__path__[0] + "/lib/libnccl.so*"))[0])' 2>/dev/null ||
        find /opt /usr -name 'libnccl.so*' 2>/dev/null | head -1)
    [ -n "$nccl" ] && export ELASTICRUN_NCCL_LIBRARY=$nccl
fi
# Which parts run: GPU_CHECKS_ONLY, a space-separated list of rust-tests,
# rust-figures, rust-kill, rust-every, mps, python and python-bench (all of
# them by default).
only=${GPU_CHECKS_ONLY:-all}
want() { [ "$only" = all ] || [[ " $only " == *" $1 "* ]]; }
# One machine: NCCL's sockets on loopback, no InfiniBand.
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} NCCL_IB_DISABLE=${NCCL_IB_DISABLE:-1}
export NCCL_DEBUG=${NCCL_DEBUG:-WARN} RUST_BACKTRACE=1
{
    date -u
    nvidia-smi
    echo "NCCL: ${nccl:-from ldconfig}"
    echo "ELASTICRUN_NCCL_LIBRARY=${ELASTICRUN_NCCL_LIBRARY:-}"
    nproc
} > "$res/machine.txt" 2>&1
note "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1); NCCL ${nccl:-from ldconfig}"

# Ranks of one NCCL communicator on one GPU: a host id per process makes
# them separate hosts to NCCL (collbench does this itself).
wrap=$res/nccl_host_per_process.sh
printf '#!/bin/sh\nNCCL_HOSTID=elasticrun-pid-$$ exec "$@"\n' > "$wrap"
chmod +x "$wrap"

# 1. The tests: one-rank NCCL, every collective and dtype; the engine's GPU
#    tensors with fusion on and off; two ranks as two hosts (two-level).
if want rust-tests; then
    step test-nccl 90 "$bin/test-nccl" --test-threads 1 --nocapture
    step test-gpu-engine 90 "$bin/test-it" --test-threads 1 --nocapture gpu_engine::
fi

# 2. busbw per size: NCCL on the GPU beside the host path, interleaved; the
#    engine's ResNet-50 shape: host, GPU flat, GPU two-level with the two
#    ranks as two hosts (localhost and 127.0.0.1, no ssh).
two_hosts=(-H localhost:1,127.0.0.1:1)
busbw_and_engine() {
    local round=$1
    step "collbench-cuda-$round" 90 "$bin/collbench" --np 2 --device cuda \
        --min-bytes 4K --max-bytes 64M --step-factor 4
    step "collbench-host-$round" 90 "$bin/collbench" --np 2 \
        --min-bytes 4K --max-bytes 64M --step-factor 4
    step "synthetic-host-$round" 60 "$bin/elasticrun" "${two_hosts[@]}" \
        "$bin/synthetic_benchmark"
    step "synthetic-cuda-$round" 60 "$bin/elasticrun" "${two_hosts[@]}" \
        "$wrap" "$bin/synthetic_benchmark" --device cuda
    step "synthetic-cuda-hierarchical-$round" 60 "$bin/elasticrun" "${two_hosts[@]}" \
        --hierarchical-allreduce "$bin/synthetic_benchmark" --device cuda
}
want rust-figures && busbw_and_engine 1

# 3. kill -9 of one of two ranks during GPU collectives: the survivor loses
#    the peer, aborts its communicator, rolls back and trains on with the
#    replacement on a new communicator; the job ends with every step done.
#    Flat: one NCCL communicator of two ranks on one host; two-level: a
#    one-rank communicator on each of two hosts, the host ring between them.
# recovery_times LOG KILLED_MS: after the kill, when the survivor entered
# training again, how long the replacement took to be ready (its own clock),
# and how long the survivor's ncclCommAbort took, from gpu_elastic's JSON
# lines and the workers' info logs.
recovery_times() {
    python3 - "$1" "$2" <<'PY'
import json, re, sys
log, killed = sys.argv[1], int(sys.argv[2])
events, aborts = [], []
for line in open(log, errors="replace"):
    _, _, rest = line.partition("<stdout>:")
    if rest.startswith("{"):
        try:
            events.append(json.loads(rest))
        except ValueError:
            pass
    m = re.search(r"NCCL communicator aborted.*took_ms=(\d+)", line)
    if m:
        aborts.append(int(m.group(1)))
back = [e["unix_ms"] - killed for e in events
        if e.get("event") == "train" and e["unix_ms"] > killed and e["from_step"] > 0]
fresh = [(e["joined_ms"], e["since_start_ms"]) for e in events
         if e.get("event") == "ready" and e["unix_ms"] > killed]
print(f"back in training after the kill: {back} ms; replacement joined/ready "
      f"after its start: {fresh} ms; ncclCommAbort took {aborts} ms")
PY
}

elastic_kill() {
    local mode=$1
    local log=$res/elastic-kill-$mode.txt
    local hosts=$res/hosts-$mode.sh flags=("$wrap")
    if [ "$mode" = hierarchical ]; then
        printf '#!/bin/sh\necho localhost:1\necho 127.0.0.1:1\n' > "$hosts"
        flags=(--hierarchical-allreduce)
    else
        printf '#!/bin/sh\necho localhost:2\n' > "$hosts"
    fi
    chmod +x "$hosts"
    if over_budget; then
        note "elastic-kill-$mode: skipped, out of time"
        return
    fi
    local t0=$SECONDS
    timeout -k 5 120 "$bin/elasticrun" --log-level info --min-np 2 --max-np 2 \
        --host-discovery-script "$hosts" --gloo-timeout-seconds 20 "${flags[@]}" \
        "$bin/gpu_elastic" --steps 400 --elements 1048576 > "$log" 2>&1 &
    local job=$!
    local deadline=$((SECONDS + 45))
    until grep -q '"step":100,' "$log"; do
        if [ $SECONDS -ge $deadline ] || ! kill -0 $job 2>/dev/null ||
            [ "$(grep -c 'exited with code' "$log")" -ge 2 ]; then
            note "elastic-kill-$mode: no step 100 (workers failed, or 45 s passed)"
            status=1
            kill $job 2>/dev/null
            wait $job
            return
        fi
        sleep 0.1
    done
    local victim
    victim=$(pgrep -f "^$bin/gpu_elastic" | tail -1)
    local killed_ms
    killed_ms=$(date +%s%3N)
    echo "KILL pid $victim at $killed_ms" >> "$log"
    kill -9 "$victim"
    wait $job
    local rc=$?
    [ "$rc" = 0 ] || status=1
    local done_lines resets
    done_lines=$(grep -c '"event":"done"' "$log")
    resets=$(grep -o '"resets":[0-9]*' "$log" | sort | uniq -c | tr -s ' \n' ' ')
    note "elastic-kill-$mode: exit $rc in $((SECONDS - t0)) s; $done_lines done lines; $resets"
    # Where the recovery's time went: gpu_elastic's own clock lines.
    note "elastic-kill-$mode: $(recovery_times "$log" "$killed_ms")"
    # Both ranks end at the last step, and the survivor lived through a reset.
    if [ "$done_lines" != 2 ] || [ "$(grep -c '"steps":400,' "$log")" != 2 ] ||
        ! grep -q '"resets":1,' "$log"; then
        note "elastic-kill-$mode: FAILED: want two done lines at step 400, one with a reset"
        status=1
    fi
}
if want rust-kill; then
    elastic_kill flat
    elastic_kill hierarchical
fi

# 4. Every collective through NCCL with two ranks, checked: the reductions
#    in every dtype, the data movements in three.
if want rust-every; then
    for op in allreduce reducescatter allgather broadcast alltoall; do
        case $op in
            allreduce | reducescatter) dtypes="f32 f16 bf16 f64 i32 i64 u8" ;;
            *) dtypes="f32 bf16 u8" ;;
        esac
        for dt in $dtypes; do
            step "check-$op-$dt" 30 "$bin/collbench" --np 2 --device cuda --op "$op" \
                --dtype "$dt" --min-bytes 1K --max-bytes 1M --step-factor 32 --iters 2
        done
    done
    step check-allreduce-average-f32 30 "$bin/collbench" --np 2 --device cuda \
        --reduce-op average --min-bytes 1K --max-bytes 1M --step-factor 32 --iters 2
    step collbench-cuda-np1 30 "$bin/collbench" --np 1 --device cuda \
        --min-bytes 4K --max-bytes 64M --step-factor 4
fi

# 5. The second round of the figures.
want rust-figures && busbw_and_engine 2

# 6. Two processes on one GPU take turns on it (time slices) unless CUDA's
#    multi-process service runs: the same NCCL sweep under it, where there
#    is one, shows how much of the flat path's time the turns take.
if ! want mps; then
    :
elif command -v nvidia-cuda-mps-control > /dev/null && ! over_budget; then
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/elasticrun-mps CUDA_MPS_LOG_DIRECTORY=/tmp/elasticrun-mps
    mkdir -p /tmp/elasticrun-mps
    if timeout 20 nvidia-cuda-mps-control -d; then
        step collbench-cuda-mps 90 "$bin/collbench" --np 2 --device cuda \
            --min-bytes 4K --max-bytes 64M --step-factor 4
        step synthetic-cuda-mps 60 "$bin/elasticrun" "${two_hosts[@]}" \
            "$wrap" "$bin/synthetic_benchmark" --device cuda
        echo quit | timeout 20 nvidia-cuda-mps-control
    else
        note "mps: nvidia-cuda-mps-control -d failed"
    fi
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
else
    note "mps: no nvidia-cuda-mps-control here (or out of time)"
fi

# 7. The Python package on CUDA tensors (the bundle's py/: the package with
#    its native module, its GPU tests, the benchmark scripts), in python3's
#    torch: every collective against the CPU path, the training API against
#    CPU training, kill -9 during GPU training; then allreduce busbw against
#    torch's NCCL process group and the synthetic benchmark (ResNet-50) under
#    elasticrun.torch against DDP on NCCL under torchrun, under MPS where it
#    runs (two processes on one GPU otherwise take turns).
py=$here/py
pyrun=(env -u ELASTICRUN_NCCL_LIBRARY PYTHONPATH="$py" PYTHONUNBUFFERED=1)
if want python; then
    step py-collectives 120 "${pyrun[@]}" "$bin/elasticrun" -np 2 "$wrap" python3 "$py/tests/gpu/collectives.py"
    step py-train 120 "${pyrun[@]}" "$bin/elasticrun" -np 2 "$wrap" python3 "$py/tests/gpu/train.py"
    # Two-level (--hierarchical-allreduce): the ranks on two host names, so
    # each host's NCCL communicator has one rank and the host ring joins them.
    step py-collectives-two-level 120 "${pyrun[@]}" "$bin/elasticrun" "${two_hosts[@]}" \
        --hierarchical-allreduce "$wrap" python3 "$py/tests/gpu/collectives.py"
    step py-train-two-level 120 "${pyrun[@]}" "$bin/elasticrun" "${two_hosts[@]}" \
        --hierarchical-allreduce "$wrap" python3 "$py/tests/gpu/train.py"
    step py-kill 150 "${pyrun[@]}" ELASTICRUN="$bin/elasticrun" python3 "$py/tests/gpu/kill.py" "$wrap"
    # The same without waiting for a replacement: the survivor's own
    # recovery, with the workers' info logs (how long ncclCommAbort took).
    step py-kill-no-wait 150 "${pyrun[@]}" ELASTICRUN="$bin/elasticrun" python3 "$py/tests/gpu/kill.py" \
        --replacement-wait 0 --log-level info "$wrap"
    note "py-kill-no-wait: $(grep -ho 'running [0-9]* worker.* after the failure[^;]*\|NCCL communicator aborted.*took_ms=[0-9]*' \
        "$res/py-kill-no-wait.txt" | tr '\n' ' ')"
    for f in py-collectives py-train py-collectives-two-level py-train-two-level py-kill py-kill-no-wait; do
        note "$f: $(grep -E '^(\[0\]<stdout>:)?cuda |"killed"' "$res/$f.txt" | tail -2 | tr '\n' ' ')"
    done
fi
if want python-bench; then
    mps=0
    if command -v nvidia-cuda-mps-control > /dev/null; then
        export CUDA_MPS_PIPE_DIRECTORY=/tmp/elasticrun-mps CUDA_MPS_LOG_DIRECTORY=/tmp/elasticrun-mps
        mkdir -p /tmp/elasticrun-mps
        timeout 20 nvidia-cuda-mps-control -d && mps=1
    fi
    note "python-bench: MPS $mps"
    step py-busbw 150 "${pyrun[@]}" "$bin/elasticrun" -np 2 "$wrap" python3 "$py/scripts/bench_cuda_allreduce.py" \
        --max-bytes 256M --rounds 3
    for round in $(seq "${GPU_CHECKS_ROUNDS:-2}"); do
        step "py-synthetic-elasticrun-$round" 90 "${pyrun[@]}" "$bin/elasticrun" -np 2 "$wrap" python3 \
            "$py/scripts/torch_synthetic.py" --api elasticrun --device cuda --model resnet50 --batch-size 32 \
            --num-iters 10
        step "py-synthetic-ddp-nccl-$round" 90 "${pyrun[@]}" python3 -m torch.distributed.run --nproc-per-node 2 \
            "$py/scripts/torch_synthetic.py" --api ddp --backend nccl --device cuda --model resnet50 --batch-size 32 \
            --num-iters 10
    done
    # Horovod's own pytorch_synthetic_benchmark.py, its import line changed,
    # where the bundle has it (gpu_bundle.sh, HOROVOD_SYNTHETIC): two host
    # names, so that each rank's local rank is 0 (its set_device) on one GPU.
    hs=$py/scripts/horovod_pytorch_synthetic_benchmark.py
    if [ -f "$hs" ]; then
        step py-horovod-synthetic 120 "${pyrun[@]}" "$bin/elasticrun" "${two_hosts[@]}" "$wrap" python3 "$hs" \
            --model resnet50 --batch-size 32 --num-iters 5
        note "py-horovod-synthetic: $(grep -h 'Total img/sec' "$res/py-horovod-synthetic.txt" | tail -1)"
    fi
    grep -h ratio "$res/py-busbw.txt" | sed 's/^/py-busbw: /' >> "$summary"
    for f in "$res"/py-synthetic-*.txt; do
        note "$(basename "$f" .txt): $(grep -o '"img_per_s": [0-9.]*' "$f" | head -1)"
    done
    if [ "$mps" = 1 ]; then
        echo quit | timeout 20 nvidia-cuda-mps-control
        unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    fi
fi

# The figures, short: steps/s of every engine run, 64 MiB busbw of every sweep.
for f in "$res"/synthetic-*.txt; do
    note "$(basename "$f" .txt): $(grep -o '"steps_per_sec":[0-9.]*' "$f" | head -1)"
done
for f in "$res"/collbench-*.txt; do
    note "$(basename "$f" .txt) 64 MiB: $(grep -E '^ +67108864 ' "$f" | tr -s ' ')"
done
note "exit $status; results in $res"
exit "$status"
