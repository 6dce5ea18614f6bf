"""Horovod's synthetic benchmark loop (a torchvision model on fixed random
data, SGD, img/s over timed iterations) in two forms, for the same run:

    elasticrun -np 2 python scripts/torch_synthetic.py --api elasticrun   # elasticrun.torch
    horovodrun --gloo -np 2 -H localhost:2 python scripts/torch_synthetic.py --api horovod
    torchrun --nproc-per-node 2 scripts/torch_synthetic.py --api ddp      # DistributedDataParallel over Gloo
    elasticrun -np 2 python scripts/torch_synthetic.py --api ddp --backend elasticrun   # DDP on elasticrun's engine
    torchrun --nproc-per-node 2 scripts/torch_synthetic.py --api fsdp     # FSDP2 over Gloo (--backend elasticrun:
                                                                         # under elasticrun, on its engine)

The elasticrun and horovod forms are one code path: only the import differs.

Rank 0 prints one JSON line: total img/s (the median iteration's, times the
world size).
"""

import argparse
import json
import statistics
import timeit

import torch
import torch.nn.functional as F
from torchvision import models

p = argparse.ArgumentParser()
p.add_argument("--api", choices=["elasticrun", "horovod", "ddp", "fsdp"], required=True)
p.add_argument("--backend", default="gloo", help="torch.distributed backend of --api ddp and fsdp")
p.add_argument("--model", default="resnet18")
p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
               help="cuda: each rank on GPU local_rank % GPUs (Horovod's synthetic benchmark on GPUs)")
p.add_argument("--batch-size", type=int, default=8)
p.add_argument("--num-warmup-batches", type=int, default=2)
p.add_argument("--num-batches-per-iter", type=int, default=3)
p.add_argument("--num-iters", type=int, default=5)
p.add_argument("--no-communication", action="store_true",
               help="--api ddp: a comm hook that hands each bucket back unreduced, the step's "
                    "cost with no collective at all (the ceiling any backend can reach)")
args = p.parse_args()
torch.manual_seed(0)
model = getattr(models, args.model)()
device = torch.device("cpu")
if args.device == "cuda":
    import os

    local = int(os.environ.get("LOCAL_RANK", os.environ.get("HOROVOD_LOCAL_RANK", "0")))
    if int(os.environ.get("LOCAL_WORLD_SIZE", "1")) > torch.cuda.device_count():
        # Ranks share a GPU: NCCL takes them for one host's duplicates
        # unless each process is a host of its own (docs/gpu.md).
        os.environ.setdefault("NCCL_HOSTID", f"pid-{os.getpid()}")
    device = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(device)
    model = model.to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
if args.api in ("elasticrun", "horovod"):
    if args.api == "elasticrun":
        import elasticrun.torch as hvd
    else:
        import horovod.torch as hvd

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
else:
    import torch.distributed as dist

    dist.init_process_group(args.backend)
    rank, size = dist.get_rank(), dist.get_world_size()
    if args.api == "ddp":
        ids = [device.index] if device.type == "cuda" else None
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
        if args.no_communication:
            def unreduced(_, bucket):
                fut = torch.futures.Future()
                fut.set_result(bucket.buffer())
                return fut

            model.register_comm_hook(None, unreduced)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(device.type, (size,))
        # One group per top-level block (resnet's layers, mobilenet's
        # features), then the rest.
        for child in model.children():
            if sum(p.numel() for p in child.parameters()) > 0:
                fully_shard(child, mesh=mesh)
        fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(args.batch_size, 3, 224, 224, device=device)
target = torch.randint(0, 1000, (args.batch_size,), device=device)


def step():
    opt.zero_grad()
    F.cross_entropy(model(data), target).backward()
    opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)


timeit.timeit(step, number=args.num_warmup_batches)
rates = [args.batch_size * args.num_batches_per_iter / timeit.timeit(step, number=args.num_batches_per_iter)
         for _ in range(args.num_iters)]
if rank == 0:
    print(json.dumps({"api": args.api, "backend": args.backend, "model": args.model, "world_size": size,
                      "device": args.device, "batch_size": args.batch_size,
                      "no_communication": args.no_communication,
                      "img_per_s": size * statistics.median(rates)}), flush=True)
