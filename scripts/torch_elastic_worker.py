"""The elasticrun.torch side of bench_recovery.py: the same job as
torchrun_elastic_peer.py (a small MLP on synthetic blobs, gradients averaged
every step, a fixed compute delay per step), made fault-tolerant Horovod's way:
`hvd.elastic.run` with a `TorchState` committed every COMMIT_EVERY steps, so a
surviving worker rolls back to its last commit in memory and goes on when
another one dies.

Usage: elasticrun --min-np 2 --max-np N --host-discovery-script ... \
         python torch_elastic_worker.py STEPS DELAY_MS [ddp]
With `ddp`, the same job as DistributedDataParallel on the `elasticrun`
torch.distributed backend (hvd.elastic.DistributedDataParallel, torch's SGD).
Rank 0 prints {"event":"step","step":S,"ms":unix_ms,"pid":P,"world_size":W} per step."""
import json
import os
import sys
import time

import torch

import elasticrun.torch as hvd

steps, delay_ms = int(sys.argv[1]), float(sys.argv[2])
ddp = len(sys.argv) > 3 and sys.argv[3] == "ddp"
COMMIT_EVERY, BATCH, FEATURES, HIDDEN, CLASSES = 10, 64, 16, 32, 4

hvd.init()
torch.manual_seed(42)
model = torch.nn.Sequential(
    torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, CLASSES)
)
if ddp:
    from elasticrun.torch import backend

    backend.init_process_group()
    forward = hvd.elastic.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
else:
    forward = model
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
centres = torch.randn(8, FEATURES, generator=torch.Generator().manual_seed(7)) * 3
state = hvd.elastic.TorchState(model, opt, step=0)


@hvd.elastic.run
def train(state):
    while state.step < steps:
        rank, size = hvd.rank(), hvd.size()
        g = torch.Generator().manual_seed(state.step * 1000 + rank)
        idx = torch.randint(0, 8, (BATCH // size,), generator=g)
        x = centres[idx] + torch.randn(len(idx), FEATURES, generator=g)
        loss = torch.nn.functional.cross_entropy(forward(x), idx % CLASSES)
        opt.zero_grad()
        loss.backward()
        time.sleep(delay_ms / 1000)
        opt.step()
        state.step += 1
        if state.step % COMMIT_EVERY == 0:
            state.commit()
        if rank == 0:
            line = {"event": "step", "step": state.step, "ms": int(time.time() * 1000), "pid": os.getpid(),
                    "world_size": size}
            print(json.dumps(line), flush=True)


train(state)
