"""Elastic FSDP2 on the "elasticrun" backend: a small MLP sharded with
``fully_shard`` on every generation's mesh, Adam, a fixed global batch (12
samples a step, shared evenly among the ranks, whatever their number),
committing every other step. Prints ``pid <rank> <pid>`` once, ``step <n>
size <n>`` as it goes, and rank 0 the final weights as JSON."""

import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

import elasticrun.torch as hvd
from elasticrun.torch import backend

import elastic_loop

hvd.init()
backend.init_process_group()
steps = int(sys.argv[1])
delay = float(sys.argv[2])
print(f"pid {dist.get_rank()} {os.getpid()}", flush=True)


def build(mesh):
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


model = hvd.elastic.FullyShardedModule(build)
X = torch.randn(steps, 12, 4, generator=torch.Generator().manual_seed(7))
Y = X.sum(-1, keepdim=True) * 0.5 + 1.0
opt = torch.optim.Adam(model.parameters(), lr=0.01)
state = hvd.elastic.TorchState(model, opt, step=0)

elastic_loop.train(state, model, opt, X, Y, delay,
                  rank_size=lambda: (dist.get_rank(), dist.get_world_size()))
full = [p.full_tensor().detach().reshape(-1) for p in model.parameters()]
if dist.get_rank() == 0:
    print(json.dumps({"weights": torch.cat(full).tolist()}), flush=True)
dist.destroy_process_group()
