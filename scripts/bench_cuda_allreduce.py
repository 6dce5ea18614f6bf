"""Allreduce bus bandwidth from Python on CUDA tensors: elasticrun.torch (the
engine, NCCL on the tensor's memory) against torch's own NCCL process group,
in the same job, interleaved size by size and round by round:

    elasticrun -np 2 python scripts/bench_cuda_allreduce.py [--rounds 3] [--max-bytes 256M]

Each rank uses GPU local_rank % GPUs (ranks may share one GPU: then give
each process its own NCCL_HOSTID, docs/gpu.md "Several ranks on one GPU").
A timing is the median over rounds of the slowest rank's mean time per
allreduce (float32, in place, `--iters` back to back, then the stream
synchronised); bus bandwidth is 2(n-1)/n x bytes / time, as nccl-tests
count it. Rank 0 prints one JSON line per size and path, then a ratio line
per size.
"""

import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist

import elasticrun.torch as hvd


def parse_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


p = argparse.ArgumentParser()
p.add_argument("--min-bytes", default="4K")
p.add_argument("--max-bytes", default="256M")
p.add_argument("--factor", type=int, default=4)
p.add_argument("--rounds", type=int, default=3)
p.add_argument("--budget-ms", type=float, default=200.0, help="time per timing, about")
args = p.parse_args()

hvd.init()
rank, size = hvd.rank(), hvd.size()
dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=dev)


def slowest(seconds):
    t = torch.tensor([seconds], device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def timed(run, x, iters):
    torch.cuda.synchronize(dev)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        run(x)
    torch.cuda.synchronize(dev)
    return slowest((time.perf_counter() - start) / iters)


def ours(x):
    hvd.allreduce_(x, op=hvd.Sum, name=f"bench.{x.numel()}")


def torchs(x):
    dist.all_reduce(x)


def torchs_waited(x):
    # As a host-synchronous API runs it: each call waited for before the
    # next (what elasticrun.torch's allreduce_ does), to tell the engine's
    # own cost from the pipelining torch's stream-ordered calls get.
    dist.all_reduce(x)
    torch.cuda.current_stream(dev).synchronize()


sizes = []
n = parse_bytes(args.min_bytes)
while n <= parse_bytes(args.max_bytes):
    sizes.append(n)
    n *= args.factor
paths = {"elasticrun": ours, "torch-nccl": torchs, "torch-nccl-waited": torchs_waited}
for nbytes in sizes:
    x = torch.ones(nbytes // 4, device=dev)
    # Warm both (communicators, the engine's cache), then size the runs.
    per = {name: timed(run, x, 3) for name, run in paths.items()}
    iters = max(3, min(1000, int(args.budget_ms / 1000 / max(per.values()))))
    times = {name: [] for name in paths}
    for r in range(args.rounds):
        order = list(paths.items())
        order = order[r % len(order):] + order[:r % len(order)]
        for name, run in order:
            times[name].append(timed(run, x, iters))
    if rank == 0:
        med = {name: statistics.median(ts) for name, ts in times.items()}
        for name, t in med.items():
            busbw = 2 * (size - 1) / size * nbytes / t / 1e9
            print(json.dumps({"bytes": nbytes, "path": name, "us": round(t * 1e6, 1), "busbw_gbps": round(busbw, 2),
                              "rounds_us": [round(v * 1e6, 1) for v in times[name]], "iters": iters,
                              "size": size}), flush=True)
        print(json.dumps({"bytes": nbytes, "ratio_elasticrun_over_torch_busbw":
                          round(med["torch-nccl"] / med["elasticrun"], 3),
                          "ratio_over_waited": round(med["torch-nccl-waited"] / med["elasticrun"], 3)}), flush=True)
dist.destroy_process_group()
