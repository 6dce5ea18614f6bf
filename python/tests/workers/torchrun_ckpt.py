"""A torch.distributed script written for torchrun (DDP over Gloo, the
``env://`` variables, no elasticrun import) that checkpoints every step to
``argv[1]`` and resumes from it at start: what ``--max-restarts`` keeps
alive. Prints ``pid <rank> <pid>``, ``resumed <step> restart <n> prestarted
<0|1>`` (1: run by a Python process started ahead, ``--prestart-imports``),
``step <n>`` as it goes, and rank 0 the final weights as JSON."""

import json
import os
import sys
import time

import torch
import torch.distributed as dist
# Before the group is made, so that its functions' default arguments do not
# keep the group past destroy_process_group (docs/python.md, "A rank killed
# by SIGABRT as a DDP script ends").
import torch.distributed.nn.functional  # noqa: F401

ckpt, steps, delay = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
print(f"pid {r} {os.getpid()}", flush=True)
torch.manual_seed(3)
model = torch.nn.Linear(4, 1)
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
step = 0
if os.path.exists(ckpt):
    saved = torch.load(ckpt)
    model.load_state_dict(saved["model"])
    opt.load_state_dict(saved["opt"])
    step = saved["step"]
restart = os.environ["TORCHELASTIC_RESTART_COUNT"]
ahead = os.environ.get("ELASTICRUN_PRESTARTED", "0")
print(f"resumed {step} restart {restart} prestarted {ahead}", flush=True)
X = torch.randn(steps, 12, 4, generator=torch.Generator().manual_seed(7))
Y = X.sum(-1, keepdim=True) * 0.5 + 1.0
per = 12 // n
while step < steps:
    x, y = X[step, r * per:(r + 1) * per], Y[step, r * per:(r + 1) * per]
    opt.zero_grad()
    torch.nn.functional.mse_loss(ddp(x), y).backward()
    opt.step()
    step += 1
    if r == 0:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)
    dist.barrier()
    print(f"step {step}", flush=True)
    time.sleep(delay)
if r == 0:
    w = torch.cat([model.weight.detach().reshape(-1), model.bias.detach()]).tolist()
    print(json.dumps({"weights": w}), flush=True)
del ddp  # it holds the group too
dist.destroy_process_group()
