"""Every collective of elasticrun.torch on CUDA tensors against the same on
CPU tensors, for every element type, run as an elasticrun job (2 or more
ranks; ranks share the GPUs there are). Also: in-place forms keep the tensor
object, non-contiguous tensors, groups (fused on the device), and the
ordering: a tensor still being written by a long kernel on the caller's
stream (the default one and a side stream) when it is submitted is reduced
only once written. Prints one line per check and ``cuda collectives: ok``
at the end; exits 1 on the first mismatch."""

import json
import sys

import torch

import elasticrun.torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
torch.cuda.set_device(dev)

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8]
OPS = {"sum": hvd.Sum, "average": hvd.Average, "min": hvd.Min, "max": hvd.Max, "product": hvd.Product}
failures = []


def data(shape, dtype, salt, low=0, high=5):
    g = torch.Generator().manual_seed(1000 * rank + salt)
    return torch.randint(low, high, shape, generator=g).to(dtype)


def cpu_form(t):
    # The CPU path has no bfloat16: it reduces float32 and rounds once.
    return t.float() if t.dtype == torch.bfloat16 else t


def same(what, got, want):
    got = got.cpu()
    want = want.to(got.dtype) if want.dtype != got.dtype else want
    if got.shape != want.shape:
        ok = False
    elif got.dtype in (torch.float16, torch.bfloat16):
        ok = torch.allclose(got.float(), want.float(), rtol=1e-2, atol=1e-2)
    else:
        ok = torch.equal(got, want)
    print(json.dumps({"check": what, "ok": ok}), flush=True)
    if not ok:
        failures.append(what)
        print(f"  got {got.flatten()[:8].tolist()} want {want.flatten()[:8].tolist()}", flush=True)


def dname(d):
    return str(d).replace("torch.", "")


for dtype in DTYPES:
    for opname, op in OPS.items():
        high = 3 if opname == "product" else 5
        low = 1 if opname == "product" else 0
        x = data((257, 3), dtype, 1, low, high)
        want = hvd.allreduce(cpu_form(x), op=op, name=f"cpu.ar.{opname}.{dname(dtype)}")
        got = hvd.synchronize(hvd.allreduce_async(x.to(dev), op=op, name=f"gpu.ar.{opname}.{dname(dtype)}"))
        same(f"allreduce {opname} {dname(dtype)}", got, want)
    x = data((64, 5), dtype, 2)
    want = hvd.allgather(cpu_form(data((rank + 1, 5), dtype, 3)), name=f"cpu.ag.{dname(dtype)}")
    got = hvd.allgather(data((rank + 1, 5), dtype, 3).to(dev), name=f"gpu.ag.{dname(dtype)}")
    same(f"allgather {dname(dtype)}", got, want)
    root = size - 1
    want = hvd.broadcast(cpu_form(x), root, name=f"cpu.bc.{dname(dtype)}")
    g = x.to(dev)
    out = hvd.broadcast_(g, root, name=f"gpu.bc.{dname(dtype)}")
    same(f"broadcast_ {dname(dtype)} (in place: {out is g})", g, want)
    if out is not g:
        failures.append("broadcast_ returned another tensor")
    y = data((4 * size, 3), dtype, 4)
    for opname in ("sum", "average"):
        want = hvd.reducescatter(cpu_form(y), op=OPS[opname], name=f"cpu.rs.{opname}.{dname(dtype)}")
        got = hvd.reducescatter(y.to(dev), op=OPS[opname], name=f"gpu.rs.{opname}.{dname(dtype)}")
        same(f"reducescatter {opname} {dname(dtype)}", got, want)
    splits = [i + 1 for i in range(size)]
    z = data((sum(splits), 2), dtype, 5)
    want = hvd.alltoall(cpu_form(z), splits=splits, name=f"cpu.a2a.{dname(dtype)}")
    got = hvd.alltoall(z.to(dev), splits=splits, name=f"gpu.a2a.{dname(dtype)}")
    same(f"alltoall {dname(dtype)}", got[0], want[0])

# In place keeps the tensor object; a non-contiguous one is written back.
x = data((33, 7), torch.float32, 6).to(dev)
want = hvd.allreduce(x.cpu(), op=hvd.Sum, name="cpu.inplace")
out = hvd.allreduce_(x, op=hvd.Sum, name="gpu.inplace")
same(f"allreduce_ in place (same object: {out is x})", x, want)
t = data((7, 33), torch.float32, 7).to(dev).t()
want = hvd.allreduce(t.cpu().contiguous(), op=hvd.Sum, name="cpu.noncontig")
hvd.allreduce_(t, op=hvd.Sum, name="gpu.noncontig")
same("allreduce_ of a transposed tensor", t, want)
pre = hvd.allreduce(x.cpu(), op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0, name="cpu.scaled")
got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0, name="gpu.scaled")
same("allreduce with pre- and postscale", got, pre)

# A group: fused on the device by the engine.
group = [data((n,), torch.float32, 10 + n) for n in (5, 1000, 70000)]
want = hvd.grouped_allreduce([g.clone() for g in group], op=hvd.Average, name="cpu.group")
got = hvd.grouped_allreduce([g.to(dev) for g in group], op=hvd.Average, name="gpu.group")
for i, (a, b) in enumerate(zip(got, want)):
    same(f"grouped_allreduce member {i}", a, b)
gs = [g.to(dev) for g in group]
hvd.grouped_allreduce_(gs, op=hvd.Sum, name="gpu.group_")
want = hvd.grouped_allreduce([g.clone() for g in group], op=hvd.Sum, name="cpu.group_")
for i, (a, b) in enumerate(zip(gs, want)):
    same(f"grouped_allreduce_ member {i}", a, b)


def slow_fill(value, stream):
    """A tensor written by a long chain of kernels on ``stream``, returned
    before they have run."""
    with torch.cuda.stream(stream):
        a = torch.full((2048, 2048), 1.0 / 2048, device=dev)
        for _ in range(20):
            a = a @ a.t().contiguous() * 2048 / 2048  # stays all 1/2048 (exactly)
        out = a[:1, :16].contiguous() * 2048 * value  # all `value`
        return out


for label, stream in (("current stream", torch.cuda.current_stream(dev)), ("side stream", torch.cuda.Stream(dev))):
    with torch.cuda.stream(stream):
        t = slow_fill(rank + 1.0, stream)
        h = hvd.allreduce_async_(t, op=hvd.Sum, name=f"gpu.ordered.{label}")
        hvd.synchronize(h)
        total = t.sum().item()
    want = 16.0 * size * (size + 1) / 2
    ok = abs(total - want) < 1e-3
    print(json.dumps({"check": f"ordered after a kernel on the {label}", "ok": ok, "got": total, "want": want}), flush=True)
    if not ok:
        failures.append(f"ordering on the {label}")

# Many handles in flight, then a barrier.
hs = [hvd.allreduce_async(torch.full((1000,), float(rank + i), device=dev), op=hvd.Sum, name=f"gpu.many.{i}")
      for i in range(16)]
hvd.barrier()
for i, h in enumerate(hs):
    v = hvd.synchronize(h)
    want = sum(float(r + i) for r in range(size))
    if not torch.all(v == want):
        failures.append(f"in-flight handle {i}")
print(json.dumps({"check": "16 handles in flight over a barrier", "ok": not any("in-flight" in f for f in failures)}),
      flush=True)
print(json.dumps({"nccl_library": hvd._cuda._native.nccl_library(), "nccl_version": hvd._cuda._native.nccl_version(),
                  "torch_nccl": list(torch.cuda.nccl.version()) if hasattr(torch.cuda, "nccl") else None}), flush=True)
if failures:
    print(f"cuda collectives: {len(failures)} failed: {failures}", flush=True)
    sys.exit(1)
print("cuda collectives: ok", flush=True)
