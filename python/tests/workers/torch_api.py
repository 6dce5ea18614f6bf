"""elasticrun.torch's collectives with horovod.torch's names and semantics."""

import numpy as np
import torch

import elasticrun.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()

t = torch.arange(6, dtype=torch.float32).reshape(2, 3) + r
want = sum(torch.arange(6, dtype=torch.float32).reshape(2, 3) + k for k in range(n))
assert torch.equal(hvd.allreduce(t, name="sum", op=hvd.Sum), want)
assert torch.allclose(hvd.allreduce(t, name="avg"), want / n)
assert torch.allclose(hvd.allreduce(t, average=True, name="avg2"), want / n)
same = t.clone()
out = hvd.allreduce_(same, name="inplace", op=hvd.Sum)
assert out is same and torch.equal(same, want)
h = hvd.allreduce_async(t, name="async", op=hvd.Max)
assert torch.equal(hvd.synchronize(h), torch.arange(6, dtype=torch.float32).reshape(2, 3) + n - 1)
half = hvd.allreduce(t, name="fp16", op=hvd.Sum, compression=hvd.Compression.fp16)
assert half.dtype == torch.float32 and torch.allclose(half, want)
g = hvd.grouped_allreduce([t, t[0]], name="group", op=hvd.Sum)
assert torch.equal(g[0], want) and torch.equal(g[1], want[0])
rows = hvd.allgather(torch.full((r + 1, 2), r, dtype=torch.int64), name="gather")
assert rows.shape == (n * (n + 1) // 2, 2)
b = torch.full((3,), float(r))
hvd.broadcast_(b, 0, name="bcast")
assert torch.equal(b, torch.zeros(3))
assert torch.equal(hvd.broadcast(torch.tensor([r]), n - 1, name="bcast2"), torch.tensor([n - 1]))
got, splits = hvd.alltoall(torch.arange(n, dtype=torch.int32) + 10 * r, splits=[1] * n, name="a2a")
assert got.tolist() == [10 * k + r for k in range(n)] and splits.tolist() == [1] * n
assert hvd.alltoall(torch.arange(n, dtype=torch.int32), name="a2a.even").tolist() == [r] * n
rs = hvd.reducescatter(torch.ones(2 * n, 2), name="rs", op=hvd.Sum)
assert rs.shape == (2, 2) and torch.all(rs == n)
assert hvd.broadcast_object({"from": r, "x": [1, 2]}, root_rank=0) == {"from": 0, "x": [1, 2]}
assert hvd.allgather_object(("rank", r)) == [("rank", k) for k in range(n)]
assert hvd.nccl_built() and hvd.cuda_built() and not hvd.mpi_built() and not hvd.gloo_built()
for bad, kind in [
    (lambda: hvd.allreduce(t, op=hvd.Adasum), ValueError),
    (lambda: hvd.allreduce(t, process_set=object()), NotImplementedError),
    (lambda: hvd.allreduce(t.to(torch.bfloat16)), TypeError),
]:
    try:
        bad()
        raise AssertionError("not refused")
    except kind:
        pass
hvd.barrier()
print(f"OK {r}", flush=True)
