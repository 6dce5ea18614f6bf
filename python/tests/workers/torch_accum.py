"""DistributedOptimizer with backward_passes_per_step=2 (each rank's share of
a step's batch in two halves, losses halved) and with Compression.fp16 ends on
the weights one process gets on the whole global batch (fp16: within its
rounding). The argument is the mode: accumulate or fp16."""

import copy
import sys

import torch

import elasticrun.torch as hvd

mode = sys.argv[1]
hvd.init()
r, n = hvd.rank(), hvd.size()
torch.manual_seed(7)
model = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
alone = copy.deepcopy(model)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
passes = 2 if mode == "accumulate" else 1
compression = hvd.Compression.fp16 if mode == "fp16" else hvd.Compression.none
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.5),
                               named_parameters=model.named_parameters(),
                               compression=compression, backward_passes_per_step=passes)
ref = torch.optim.SGD(alone.parameters(), lr=0.05, momentum=0.5)
per = 4
g = torch.Generator().manual_seed(1)
data = torch.randn(12, n * per, 5, generator=g)
target = torch.randn(12, n * per, 2, generator=g)
for step in range(12):
    x, y = data[step, r * per:(r + 1) * per], target[step, r * per:(r + 1) * per]
    opt.zero_grad()
    for half in range(passes):
        k = per // passes
        xs, ys = x[half * k:(half + 1) * k], y[half * k:(half + 1) * k]
        (torch.nn.functional.mse_loss(model(xs), ys) / passes).backward()
    opt.step()
    ref.zero_grad()
    torch.nn.functional.mse_loss(alone(data[step]), target[step]).backward()
    ref.step()
tol = 2e-3 if mode == "fp16" else 1e-5
for (name, p), q in zip(model.named_parameters(), alone.parameters()):
    assert torch.allclose(p, q, atol=tol), (mode, name, (p - q).abs().max())
    assert p.grad.dtype == torch.float32, (name, p.grad.dtype)
print(f"OK {r}", flush=True)
