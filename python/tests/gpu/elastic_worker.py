"""Elastic training on a CUDA model from Python (run by kill.py): an MLP on a
fixed global batch of 12 samples a step shared among the ranks, SGD through
DistributedOptimizer (NCCL on the gradients), hvd.elastic.TorchState
committing every other step. Prints ``pid <rank> <pid>`` once, a JSON
``train`` line each time a rank enters training (with the wall clock), and
``step <n> size <n> unix_ms <ms>`` per step; rank 0 the final weights."""

import json
import os
import sys
import time

import torch

import elasticrun.torch as hvd

hvd.init()
steps, delay = int(sys.argv[1]), float(sys.argv[2])
dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
torch.cuda.set_device(dev)
print(f"pid {hvd.rank()} {os.getpid()}", flush=True)
torch.manual_seed(3)
model = torch.nn.Sequential(torch.nn.Linear(4, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)).to(dev)
g = torch.Generator().manual_seed(7)
X = torch.randn(steps, 12, 4, generator=g).to(dev)
Y = X.sum(-1, keepdim=True) * 0.5 + 1.0
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.02),
                               named_parameters=model.named_parameters())
state = hvd.elastic.TorchState(model, opt, step=0)


@hvd.elastic.run
def loop(state):
    print(json.dumps({"event": "train", "rank": hvd.rank(), "from_step": state.step,
                      "unix_ms": int(time.time() * 1000)}), flush=True)
    while state.step < steps:
        r, n = hvd.rank(), hvd.size()
        per = 12 // n
        x, y = X[state.step, r * per:(r + 1) * per], Y[state.step, r * per:(r + 1) * per]
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        state.step += 1
        if state.step % 2 == 0:
            state.commit()
        print(f"step {state.step} size {n} unix_ms {int(time.time() * 1000)}", flush=True)
        time.sleep(delay)


loop(state)
if hvd.rank() == 0:
    w = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()
    print(json.dumps({"weights_sum": w.sum().item(), "weights_norm": w.norm().item()}), flush=True)
