"""Training steps of N tensors through the engine from Python: every tensor
submitted with allreduce_async (Average), then all waited for; rank 0 prints
one JSON line with the median step time. Run under elasticrun:

    elasticrun -np 2 python scripts/python_engine_bench.py --api numpy --num-tensors 100 --tensor-bytes 16384
"""

import argparse
import json
import statistics
import time

import numpy as np

p = argparse.ArgumentParser()
p.add_argument("--api", choices=["numpy", "torch"], default="numpy")
p.add_argument("--num-tensors", type=int, default=100)
p.add_argument("--tensor-bytes", type=int, default=16384)
p.add_argument("--steps", type=int, default=200)
p.add_argument("--warmup-steps", type=int, default=5)
args = p.parse_args()

n = args.tensor_bytes // 4
if args.api == "torch":
    import torch

    import elasticrun.torch as hvd

    grads = [torch.ones(n) * i for i in range(args.num_tensors)]

    def submit(i, g):
        return hvd.allreduce_async(g, name=f"grad.{i}")
else:
    import elasticrun as hvd

    grads = [np.ones(n, np.float32) * i for i in range(args.num_tensors)]

    def submit(i, g):
        return hvd.allreduce_async(g, name=f"grad.{i}")

hvd.init()
times = []
for step in range(args.warmup_steps + args.steps):
    if step == args.warmup_steps:
        hvd.barrier()
    t0 = time.perf_counter()
    handles = [submit(i, g) for i, g in enumerate(grads)]
    grads = [hvd.synchronize(h) for h in handles]
    if step >= args.warmup_steps:
        times.append(time.perf_counter() - t0)
if hvd.rank() == 0:
    print(json.dumps({"api": args.api, "tensors": args.num_tensors, "tensor_bytes": args.tensor_bytes,
                      "step_ms": {"median": 1e3 * statistics.median(times)}}), flush=True)
hvd.shutdown()
