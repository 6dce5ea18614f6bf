"""Elastic training with elasticrun.torch: a linear model on a fixed global
batch (12 samples a step, shared evenly among the ranks, whatever their
number), committing every other step. Prints ``pid <rank> <pid>`` once,
``step <n>`` as it goes, and rank 0 the final weights as JSON."""

import json
import os
import sys

import torch

import elasticrun.torch as hvd

import elastic_loop

hvd.init()
steps = int(sys.argv[1])
delay = float(sys.argv[2])
print(f"pid {hvd.rank()} {os.getpid()}", flush=True)
torch.manual_seed(3)
model = torch.nn.Linear(4, 1)
X = torch.randn(steps, 12, 4, generator=torch.Generator().manual_seed(7))
Y = X.sum(-1, keepdim=True) * 0.5 + 1.0
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                               named_parameters=model.named_parameters())
state = hvd.elastic.TorchState(model, opt, step=0)

elastic_loop.train(state, model, opt, X, Y, delay)
if hvd.rank() == 0:
    w = torch.cat([model.weight.detach().reshape(-1), model.bias.detach()]).tolist()
    print(json.dumps({"weights": w}), flush=True)
