"""The rest of elasticrun.torch's API on a CUDA model, against the same
training on CPU, as an elasticrun job: broadcast_parameters,
broadcast_optimizer_state, DistributedOptimizer (hooks on CUDA gradients,
buckets fused on the device; fp16 compression on the device; Horovod's
predivision) and SyncBatchNorm. The weights after the steps must match the
CPU run's. Prints one line per form and ``cuda training: ok``."""

import json
import sys

import torch

import elasticrun.torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
torch.cuda.set_device(dev)
torch.backends.cudnn.deterministic = True
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def model(seed):
    torch.manual_seed(seed)  # differs per rank: broadcast_parameters must fix it
    return torch.nn.Sequential(
        torch.nn.Linear(16, 64), hvd.SyncBatchNorm(64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 4))


def run(device, compression, predivide, tag):
    m = model(100 + rank).to(device)
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=m.named_parameters(), compression=compression,
                                   gradient_predivide_factor=predivide)
    g = torch.Generator().manual_seed(7)
    X, Y = torch.randn(10, 8 * size, 16, generator=g), torch.randn(10, 8 * size, 4, generator=g)
    for step in range(10):
        x = X[step, rank * 8:(rank + 1) * 8].to(device)
        y = Y[step, rank * 8:(rank + 1) * 8].to(device)
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(x), y).backward()
        opt.step()
        if step == 4:
            hvd.broadcast_optimizer_state(opt, root_rank=0)
    return [p.detach().cpu() for p in m.parameters()]


failures = []
for compression, predivide, tol in ((hvd.Compression.none, 1.0, 1e-4), (hvd.Compression.fp16, 1.0, 5e-2),
                                    (hvd.Compression.none, 2.0, 1e-4)):
    tag = f"{compression.__name__}/predivide {predivide}"
    cpu = run(torch.device("cpu"), compression, predivide, "cpu")
    gpu = run(dev, compression, predivide, "gpu")
    worst = max((a - b).abs().max().item() for a, b in zip(cpu, gpu))
    ok = worst <= tol
    same_everywhere = hvd.allgather(torch.tensor([[worst]]), name=f"worst.{tag}")
    print(json.dumps({"check": f"DistributedOptimizer {tag}", "ok": ok, "max_abs_diff": worst,
                      "per_rank": same_everywhere.flatten().tolist()}), flush=True)
    if not ok:
        failures.append(tag)
if failures:
    print(f"cuda training: failed {failures}", flush=True)
    sys.exit(1)
print("cuda training: ok", flush=True)
