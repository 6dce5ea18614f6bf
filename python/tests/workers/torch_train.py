"""DistributedOptimizer and SyncBatchNorm give what one process gets on the
whole global batch: each rank trains on its slice, then compares with a
single-process run it does itself. The argument picks how gradients are
bucketed: default (one bucket of this small model's), each (one allreduce per
gradient), small (several buckets of several gradients), groups (groups=2),
lists (an explicit group, the rest alone), predivide (gradient_predivide_factor)."""

import copy
import os
import sys

import torch

mode = sys.argv[1] if len(sys.argv) > 1 else "default"
os.environ["ELASTICRUN_BUCKET_MB"] = {"each": "0", "small": "0.0001"}.get(mode, "")

import elasticrun.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
torch.manual_seed(5)
model = torch.nn.Sequential(
    torch.nn.Linear(6, 8), hvd.SyncBatchNorm(8), torch.nn.ReLU(), torch.nn.Linear(8, 3)
)
alone = copy.deepcopy(model)
# The single-process reference uses plain BatchNorm with the same state.
bn = torch.nn.BatchNorm1d(8)
bn.load_state_dict(alone[1].state_dict())
alone[1] = bn
hvd.broadcast_parameters(model.state_dict(), root_rank=0)

per = 4
data = torch.randn(20, n * per, 6, generator=torch.Generator().manual_seed(11))
labels = torch.randint(0, 3, (20, n * per), generator=torch.Generator().manual_seed(12))
extra = {
    "groups": {"groups": 2},
    "lists": {"groups": [[model[0].weight, model[3].bias]]},
    "predivide": {"gradient_predivide_factor": 2.0},
}.get(mode, {})
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                               named_parameters=model.named_parameters(), **extra)
buckets = [len(b) for b in opt._buckets]
expected = {"default": [6], "each": [1] * 6, "small": [2, 4], "groups": [3, 3],
            "lists": [2, 1, 1, 1, 1], "predivide": [6]}[mode]
assert buckets == expected, (mode, buckets)
ref = torch.optim.SGD(alone.parameters(), lr=0.1, momentum=0.9)
hvd.broadcast_optimizer_state(opt, root_rank=0)
loss_fn = torch.nn.CrossEntropyLoss()
for step in range(20):
    x, y = data[step, r * per:(r + 1) * per], labels[step, r * per:(r + 1) * per]
    opt.zero_grad()
    loss_fn(model(x), y).backward()
    opt.step()
    ref.zero_grad()
    loss_fn(alone(data[step]), labels[step]).backward()
    ref.step()
for (name, p), q in zip(model.named_parameters(), alone.parameters()):
    assert torch.allclose(p, q, atol=1e-5), (name, (p - q).abs().max())
assert torch.allclose(model[1].running_mean, alone[1].running_mean, atol=1e-5)
assert torch.allclose(model[1].running_var, alone[1].running_var, atol=1e-4)
if mode == "default":
    os.environ["ELASTICRUN_BUCKET_MB"] = "lots"
    try:
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=model.named_parameters())
        raise AssertionError("a bad ELASTICRUN_BUCKET_MB was taken")
    except ValueError as e:
        assert "ELASTICRUN_BUCKET_MB='lots'" in str(e), e
print(f"OK {r}", flush=True)
