"""A process group of two backends, one per device type (``argv[1]``:
``cpu:gloo,cuda:elasticrun`` or ``cpu:elasticrun,cuda:gloo``): CPU tensors go
to the CPU's backend. Prints ``OK <rank> <sum> <backend class>``."""

import sys

import torch
import torch.distributed as dist

dist.init_process_group(sys.argv[1])
r = dist.get_rank()
t = torch.full((4,), float(r + 1))
dist.all_reduce(t)
cpu = dist.group.WORLD._get_backend(torch.device("cpu"))
print(f"OK {r} {t[0].item()} {type(cpu).__name__}", flush=True)
dist.destroy_process_group()
