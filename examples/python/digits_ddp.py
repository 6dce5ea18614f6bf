"""The same model and data as digits.py with torch.distributed (Gloo) and
DistributedDataParallel, for comparison. It needs no elasticrun package:

    elasticrun -np 2 python examples/python/digits_ddp.py     # torchrun's variables
    torchrun --nproc-per-node 2 examples/python/digits_ddp.py
"""

import argparse
import json

import torch
import torch.distributed as dist
# Imported before the process group is made: DistributedDataParallel imports
# it afterwards otherwise, and its functions' default arguments then keep the
# group, and Gloo's threads, alive past destroy_process_group until the
# interpreter's teardown, where a rank can end with SIGABRT
# (docs/python.md, "A rank killed by SIGABRT as a DDP script ends").
import torch.distributed.nn.functional  # noqa: F401
import torch.nn.functional as F

from digits import accuracy, data, model


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.05, help="scaled by the world size")
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    (xtr, ytr), (xte, yte) = data()
    net = torch.nn.parallel.DistributedDataParallel(model())
    opt = torch.optim.SGD(net.parameters(), lr=args.lr * size, momentum=0.9)
    for epoch in range(args.epochs):
        order = torch.randperm(len(ytr), generator=torch.Generator().manual_seed(3 + epoch)).tolist()
        per = -(-len(order) // size)
        order = (order + order[: per * size - len(order)])[rank::size]
        for b in range(0, len(order), args.batch_size):
            batch = order[b:b + args.batch_size]
            opt.zero_grad()
            F.cross_entropy(net(xtr[batch]), ytr[batch]).backward()
            opt.step()
    acc = accuracy(net.module, xte, yte)
    if rank == 0:
        print(json.dumps({"accuracy": round(acc, 4), "epochs": args.epochs, "world_size": size}), flush=True)
    del net  # DistributedDataParallel holds the group too
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
