#!/usr/bin/env python3
"""The Gloo counterpart of synthetic_benchmark: the same gradient averaging,
done from Python with torch.distributed over loopback TCP.

One command runs everything (it spawns the N ranks itself):
    "$PEERS_VENV"/bin/python scripts/gloo_engine_peer.py --nproc 2
    "$PEERS_VENV"/bin/python scripts/gloo_engine_peer.py --workload small --steps 50

Workloads (a step averages every tensor of the list over all ranks):
  small     --num-tensors tensors of --tensor-bytes bytes (default 100 x 16 KiB)
  resnet50  ResNet-50's 161 parameter tensors (25,557,032 f32), read from the
            table synthetic_benchmark uses (examples/src/bin/synthetic_benchmark/resnet50.txt)

Modes, per step:
  one_by_one  dist.all_reduce of each tensor in turn, reverse layer order, then
              divide by the world size (Gloo has no average): a plain loop
  async       every all_reduce issued with async_op=True, then all waited
  flat        torch.cat of the list into one buffer, one all_reduce, divide,
              copy back into the tensors: one DDP bucket holding everything

Each rank fills its tensors with rank + 1; after the first step every element
must be (n + 1) / 2 (checked, exit 1 if not). Steps are timed on rank 0 after
a barrier; like synthetic_benchmark, steps_per_sec = timed steps / their total
time and bytes_per_sec = gradient bytes per step * steps_per_sec (per rank).
One JSON line per (workload, mode) on stdout.

Transport: MASTER_ADDR=127.0.0.1, GLOO_SOCKET_IFNAME=lo (loopback TCP).
"""
import argparse
import json
import math
import os
import socket
import statistics
import sys
import time
from pathlib import Path

SHAPES = Path(__file__).resolve().parent.parent / "examples/src/bin/synthetic_benchmark/resnet50.txt"
MODES = ("one_by_one", "async", "flat")


def read_shapes(path):
    """[(name, shape)] from a `name d1,d2,...` table (# starts a comment)."""
    out = []
    for line in Path(path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, dims = line.split()
            out.append((name, [int(d) for d in dims.split(",")]))
    return out


def workloads(args):
    """{name: [numel of each tensor, layer order]} for the requested workloads."""
    out = {}
    if args.workload in ("small", "all"):
        if args.tensor_bytes % 4:
            sys.exit("--tensor-bytes must be a multiple of 4 (f32)")
        out["small"] = [args.tensor_bytes // 4] * args.num_tensors
    if args.workload in ("resnet50", "all"):
        out["resnet50"] = [math.prod(s) for _, s in read_shapes(args.shapes)]
    return out


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def step_fn(dist, torch, mode, tensors, world):
    """One step of `mode` over `tensors` (layer order; submitted last first)."""
    backward = tensors[::-1]
    if mode == "one_by_one":
        def step():
            for t in backward:
                dist.all_reduce(t)
                t.div_(world)
    elif mode == "async":
        def step():
            works = [dist.all_reduce(t, async_op=True) for t in backward]
            for w, t in zip(works, backward):
                w.wait()
                t.div_(world)
    else:
        def step():
            flat = torch.cat([t.view(-1) for t in backward])
            dist.all_reduce(flat)
            flat.div_(world)
            off = 0
            for t in backward:
                n = t.numel()
                t.view(-1).copy_(flat[off:off + n])
                off += n
    return step


def measure(dist, torch, rank, world, name, sizes, mode, warmup, steps):
    """Runs warm-up and timed steps; returns the JSON row (rank 0) or None."""
    fill = float(rank + 1)
    tensors = [torch.full((n,), fill, dtype=torch.float32) for n in sizes]
    step = step_fn(dist, torch, mode, tensors, world)
    want = (world + 1) / 2
    times = []
    for i in range(warmup + steps):
        if i == warmup:
            dist.barrier()
        t0 = time.perf_counter()
        step()
        took = time.perf_counter() - t0
        if i >= warmup:
            times.append(took)
        if i == 0:
            bad = [j for j, t in enumerate(tensors) if not torch.allclose(t, torch.full_like(t, want))]
            if bad:
                raise SystemExit(f"rank {rank}: {name}/{mode}: tensor {bad[0]} is not {want} after step 1")
    dist.barrier()
    if rank != 0:
        return None
    total_bytes = 4 * sum(sizes)
    sps = len(times) / sum(times)
    return {
        "peer": "gloo",
        "torch": torch.__version__,
        "workload": name,
        "mode": mode,
        "world_size": world,
        "num_tensors": len(sizes),
        "total_bytes": total_bytes,
        "warmup_steps": warmup,
        "steps": len(times),
        "steps_per_sec": sps,
        "bytes_per_sec": sps * total_bytes,
        "step_ms": {
            "median": statistics.median(times) * 1e3,
            "min": min(times) * 1e3,
            "max": max(times) * 1e3,
        },
    }


def worker(rank, world, port, args, queue):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    rows = []
    for name, sizes in workloads(args).items():
        steps = args.steps if args.steps else (200 if name == "small" else 20)
        for mode in args.modes:
            row = measure(dist, torch, rank, world, name, sizes, mode, args.warmup_steps, steps)
            if row:
                rows.append(row)
    if rank == 0:
        queue.put(rows)
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--workload", choices=("small", "resnet50", "all"), default="all")
    ap.add_argument("--num-tensors", type=int, default=100)
    ap.add_argument("--tensor-bytes", type=int, default=16 * 1024)
    ap.add_argument("--shapes", default=str(SHAPES), help="ResNet-50 shape table")
    ap.add_argument("--steps", type=int, default=0,
                    help="timed steps [default: 200 for small, 20 for resnet50]")
    ap.add_argument("--warmup-steps", type=int, default=3)
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma list of {', '.join(MODES)}")
    args = ap.parse_args()
    args.modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in args.modes if m not in MODES]
    if unknown or args.nproc < 1 or args.num_tensors < 1 or args.tensor_bytes < 4:
        ap.error(f"bad arguments (unknown modes: {unknown})")

    import torch.distributed as dist
    import torch.multiprocessing as mp

    assert dist.is_gloo_available(), "this torch build has no gloo"
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, args.nproc, port, args, q)) for r in range(args.nproc)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    rows = q.get() if not q.empty() else []
    for row in rows:
        print(json.dumps(row, sort_keys=True))
    bad = [p.exitcode for p in procs if p.exitcode != 0]
    sys.exit(1 if bad or not rows else 0)


if __name__ == "__main__":
    main()
