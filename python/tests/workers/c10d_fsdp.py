"""FSDP2 (``fully_shard`` on a 1-D mesh) on the "elasticrun" backend trains
to the weights of one process on the global batch; no elasticrun import.
Prints ``OK <rank>``."""

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

dist.init_process_group("elasticrun")
r, n = dist.get_rank(), dist.get_world_size()
SEED = 11


def model():
    torch.manual_seed(SEED)
    return torch.nn.Sequential(torch.nn.Linear(10, 24), torch.nn.ReLU(), torch.nn.Linear(24, 24),
                               torch.nn.ReLU(), torch.nn.Linear(24, 4))


gen = torch.Generator().manual_seed(SEED)
steps, per_rank = 5, 4
xs = torch.randn(steps, per_rank * n, 10, generator=gen)
ys = torch.randint(0, 4, (steps, per_rank * n), generator=gen)

one = model()
opt1 = torch.optim.Adam(one.parameters(), lr=0.01)
for s in range(steps):
    opt1.zero_grad()
    torch.nn.functional.cross_entropy(one(xs[s]), ys[s]).backward()
    opt1.step()

mesh = init_device_mesh("cpu", (n,))
sharded = model()
for layer in sharded:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer, mesh=mesh)
fully_shard(sharded, mesh=mesh)
opt = torch.optim.Adam(sharded.parameters(), lr=0.01)
mine = slice(r * per_rank, (r + 1) * per_rank)
for s in range(steps):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(sharded(xs[s][mine]), ys[s][mine]).backward()
    opt.step()

for a, b in zip(one.parameters(), sharded.parameters()):
    full = b.full_tensor()
    assert torch.allclose(a, full, atol=1e-5), (a - full).abs().max()
dist.destroy_process_group()
print(f"OK {r}")
