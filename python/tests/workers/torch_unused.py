"""Unused and frozen parameters under DistributedOptimizer: a parameter that
one rank uses and another does not is averaged with the other's zeros; one
that no rank uses gets a zero gradient (as horovod.torch gives it); one frozen
after the optimizer was made keeps no gradient and does not move, even with
weight decay. The argument is ELASTICRUN_BUCKET_MB (0: each gradient alone)."""

import os
import sys

os.environ["ELASTICRUN_BUCKET_MB"] = sys.argv[1]

import torch  # noqa: E402

import elasticrun.torch as hvd  # noqa: E402

hvd.init()
r, n = hvd.rank(), hvd.size()
torch.manual_seed(3)
a, b, never, frozen = (torch.nn.Linear(4, 4) for _ in range(4))
hvd.broadcast_parameters({f"{i}.{k}": v for i, m in enumerate((a, b, never, frozen))
                          for k, v in m.state_dict().items()}, root_rank=0)
mods = torch.nn.ModuleList([a, b, never, frozen])
opt = hvd.DistributedOptimizer(torch.optim.SGD(mods.parameters(), lr=0.1, weight_decay=0.1),
                               named_parameters=mods.named_parameters())
frozen.weight.requires_grad_(False)
frozen_before = frozen.weight.detach().clone()
never_before = never.weight.detach().clone()
x = torch.full((2, 4), float(r + 1))
for step in range(3):
    opt.zero_grad()
    out = a(x) + frozen(x)
    if r == 0:  # only rank 0 uses b
        out = out + b(x)
    out.sum().backward()
    local_b = b.weight.grad.clone() if b.weight.grad is not None else torch.zeros_like(b.weight)
    want_b = hvd.allreduce(local_b, name=f"check.b.{step}")
    local_a = a.weight.grad.clone()
    want_a = hvd.allreduce(local_a, name=f"check.a.{step}")
    opt.synchronize()
    assert torch.allclose(b.weight.grad, want_b, atol=1e-6), (step, b.weight.grad, want_b)
    assert torch.allclose(a.weight.grad, want_a, atol=1e-6), (step, a.weight.grad, want_a)
    assert torch.equal(never.weight.grad, torch.zeros_like(never.weight)), never.weight.grad
    assert frozen.weight.grad is None, frozen.weight.grad
    with opt.skip_synchronize():
        opt.step()
assert torch.equal(frozen.weight, frozen_before), "a frozen parameter moved"
assert not torch.equal(never.weight, never_before), "weight decay should move an unused parameter with a zero gradient"
print(f"OK {r}", flush=True)
