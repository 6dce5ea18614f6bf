"""DistributedOptimizer reduces contiguous gradients where they lie: after
synchronize() each such gradient is the same tensor (same memory) holding the
average over the ranks; a bucket with a non-contiguous gradient (a parameter
that is a transposed view) takes the copying path and is as right."""

import torch

import elasticrun.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
torch.manual_seed(5)
lin = torch.nn.Linear(8, 8)
odd = torch.nn.Parameter(torch.randn(3, 8).t())
assert not odd.is_contiguous()
named = [("lin.weight", lin.weight), ("lin.bias", lin.bias), ("odd", odd)]
hvd.broadcast_parameters(dict(named), root_rank=0)
opt = hvd.DistributedOptimizer(torch.optim.SGD([p for _, p in named], lr=0.1), named_parameters=named,
                               groups=[[lin.weight, lin.bias]])
g = torch.Generator().manual_seed(100 + r)
for step in range(3):
    x = torch.randn(4, 8, generator=g)
    opt.zero_grad()
    # This rank's gradients without touching .grad (no hooks run).
    local = torch.autograd.grad((lin(x) @ odd).pow(2).sum(), [p for _, p in named])
    want = [hvd.allreduce(t, name=f"check.{name}.{step}") for (name, _), t in zip(named, local)]
    (lin(x) @ odd).pow(2).sum().backward()
    before = {name: p.grad.data_ptr() for name, p in named}
    opt.synchronize()
    for (name, p), w in zip(named, want):
        assert torch.allclose(p.grad, w, rtol=1e-5, atol=1e-5), (step, name, p.grad, w)
    for name in ("lin.weight", "lin.bias"):
        assert named[[k for k, _ in named].index(name)][1].grad.data_ptr() == before[name], (step, name)
    with opt.skip_synchronize():
        opt.step()
print(f"OK {r}", flush=True)
