"""Elastic DistributedDataParallel on the "elasticrun" backend: a linear
model on a fixed global batch (12 samples a step, shared evenly among the
ranks, whatever their number), committing every other step. Prints ``pid
<rank> <pid>`` once, ``step <n> size <n>`` as it goes, and rank 0 the
final weights as JSON."""

import json
import os
import sys
import time

import torch
import torch.distributed as dist

import elasticrun.torch as hvd
from elasticrun.torch import backend

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


@hvd.elastic.run
def train(state):
    while state.step < steps:
        n, r = dist.get_world_size(), dist.get_rank()
        per = 12 // n
        x, y = X[state.step, r * per:(r + 1) * per], Y[state.step, r * per:(r + 1) * per]
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        state.step += 1
        if state.step % 2 == 0:
            state.commit()
        print(f"step {state.step} size {n}", flush=True)
        time.sleep(delay)


train(state)
if dist.get_rank() == 0:
    w = torch.cat([model.weight.detach().reshape(-1), model.bias.detach()]).tolist()
    print(json.dumps({"weights": w}), flush=True)
dist.destroy_process_group()
