"""Elastic DistributedDataParallel on the "elasticrun" backend: a linear
model on a fixed global batch (12 samples a step, shared evenly among the
ranks, whatever their number), committing every other step. Prints ``pid
<rank> <pid>`` once, ``step <n> size <n>`` as it goes, and rank 0 the
final weights as JSON."""

import json
import os
import sys

import torch
import torch.distributed as dist

import elasticrun.torch as hvd
from elasticrun.torch import backend

import elastic_loop
import group_threads

hvd.init()
backend.init_process_group()
steps = int(sys.argv[1])
delay = float(sys.argv[2])
print(f"pid {dist.get_rank()} {os.getpid()}", flush=True)
torch.manual_seed(3)
model = torch.nn.Linear(4, 1)
ddp = hvd.elastic.DistributedDataParallel(model)
X = torch.randn(steps, 12, 4, generator=torch.Generator().manual_seed(7))
Y = X.sum(-1, keepdim=True) * 0.5 + 1.0
opt = torch.optim.SGD(model.parameters(), lr=0.05)
state = hvd.elastic.TorchState(model, opt, step=0)

elastic_loop.train(state, ddp, opt, X, Y, delay,
                  rank_size=lambda: (dist.get_rank(), dist.get_world_size()))
if dist.get_rank() == 0:
    w = torch.cat([model.weight.detach().reshape(-1), model.bias.detach()]).tolist()
    print(json.dumps({"weights": w}), flush=True)
del ddp
dist.destroy_process_group()
# Every generation's group went with it (a reset destroys the last one's):
# none of their backends' threads is left.
group_threads.assert_none_left()
