"""DistributedDataParallel on the "elasticrun" backend trains to the weights
of one process on the global batch; no elasticrun import. Prints ``OK
<rank>``."""

import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import group_threads

dist.init_process_group(sys.argv[1] if len(sys.argv) > 1 else "elasticrun")
r, n = dist.get_rank(), dist.get_world_size()
SEED = 7
torch.manual_seed(SEED)


def model():
    torch.manual_seed(SEED)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.Tanh(), torch.nn.Linear(32, 3))


gen = torch.Generator().manual_seed(SEED)
steps, per_rank = 6, 4
xs = torch.randn(steps, per_rank * n, 12, generator=gen)
ys = torch.randint(0, 3, (steps, per_rank * n), generator=gen)

one = model()
opt1 = torch.optim.SGD(one.parameters(), lr=0.1, momentum=0.9)
for s in range(steps):
    opt1.zero_grad()
    torch.nn.functional.cross_entropy(one(xs[s]), ys[s]).backward()
    opt1.step()

# Every rank starts from other weights: DDP's first broadcast makes them rank 0's.
torch.manual_seed(SEED + r)
ddp_model = model()
if r != 0:
    with torch.no_grad():
        for p in ddp_model.parameters():
            p.add_(1.0)
ddp = DDP(ddp_model, bucket_cap_mb=0.001)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
mine = slice(r * per_rank, (r + 1) * per_rank)
for s in range(steps):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(ddp(xs[s][mine]), ys[s][mine]).backward()
    opt.step()

for a, b in zip(one.parameters(), ddp.module.parameters()):
    assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()
# The group goes with destroy_process_group once nothing holds it: no
# thread of its backend is left for the interpreter's teardown.
del ddp
dist.destroy_process_group()
group_threads.assert_none_left()
print(f"OK {r}")
