"""Every torch.distributed collective on the "elasticrun" backend against
references computed from Gloo's all_gather of the same inputs, for every
element type the engine has; no elasticrun import (the entry point finds
the backend). Prints ``OK <rank> <checks>``."""

import torch
import torch.distributed as dist

dist.init_process_group("elasticrun")
assert dist.get_backend() == "elasticrun", dist.get_backend()
r, n = dist.get_rank(), dist.get_world_size()
gloo = dist.new_group(backend="gloo")
SEED = 20261128
if r == 0:
    print(f"seed {SEED}")
gen = torch.Generator().manual_seed(SEED + r)
checks = 0

REDUCED = [torch.float32, torch.float64, torch.float16, torch.int32, torch.int64, torch.uint8]
MOVED = REDUCED + [torch.int8, torch.bool, torch.bfloat16, torch.int16]


def data(dtype, shape):
    x = torch.randint(1, 4, shape, generator=gen)
    return x.to(dtype)


def everyone(t):
    """Every rank's ``t``, through Gloo as float64 (the values are small
    whole numbers: exact in every type)."""
    src = t.double()
    out = [torch.empty_like(src) for _ in range(n)]
    dist.all_gather(out, src, group=gloo)
    return [o.to(t.dtype) for o in out]


def check(got, want, what):
    global checks
    checks += 1
    if got.dtype.is_floating_point:
        ok = torch.allclose(got.double(), want.double(), rtol=1e-2 if got.dtype == torch.float16 else 1e-6)
    else:
        ok = torch.equal(got, want)
    assert ok, f"{what}: {got} != {want}"


def reduce_ref(parts, op, dtype):
    stack = torch.stack([p.double() for p in parts])
    ref = {"sum": stack.sum(0), "min": stack.min(0).values, "max": stack.max(0).values,
           "product": stack.prod(0), "avg": stack.mean(0)}[op]
    return ref.to(dtype)


OPS = {"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX,
       "product": dist.ReduceOp.PRODUCT, "avg": dist.ReduceOp.AVG}

for dtype in REDUCED:
    for name, op in OPS.items():
        if name == "avg" and not dtype.is_floating_point:
            continue
        x = data(dtype, (3, 5))
        parts = everyone(x)
        y = x.clone()
        dist.all_reduce(y, op=op)
        check(y, reduce_ref(parts, name, dtype), f"all_reduce {name} {dtype}")
        # Asynchronous, waited through its future.
        z = x.clone()
        work = dist.all_reduce(z, op=op, async_op=True)
        work.get_future().wait()
        check(z, reduce_ref(parts, name, dtype), f"all_reduce async {name} {dtype}")
    if dtype.is_floating_point:
        x = data(dtype, (4,))
        parts = everyone(x)
        y = x.clone()
        dist.all_reduce(y, op=dist._make_nccl_premul_sum(0.5))
        check(y, reduce_ref(parts, "sum", dtype) * 0.5, f"premul_sum {dtype}")
        # A strided tensor (a transposed view).
        x = data(dtype, (3, 4))
        parts = everyone(x)
        view = x.clone().t()
        dist.all_reduce(view)
        check(view, reduce_ref([p.t() for p in parts], "sum", dtype), f"strided {dtype}")
    # reduce_scatter_tensor and reduce_scatter.
    x = data(dtype, (n * 2, 3))
    parts = everyone(x)
    out = torch.empty((2, 3), dtype=dtype)
    dist.reduce_scatter_tensor(out, x)
    check(out, reduce_ref(parts, "sum", dtype)[2 * r:2 * r + 2], f"reduce_scatter_tensor {dtype}")
    ins = [x[2 * k:2 * k + 2].clone() for k in range(n)]
    out2 = torch.empty((2, 3), dtype=dtype)
    dist.reduce_scatter(out2, ins)
    check(out2, reduce_ref(parts, "sum", dtype)[2 * r:2 * r + 2], f"reduce_scatter {dtype}")
    # reduce: the root gets the sum, the others keep their tensor.
    x = data(dtype, (5,))
    parts = everyone(x)
    y = x.clone()
    dist.reduce(y, dst=n - 1)
    check(y, reduce_ref(parts, "sum", dtype) if r == n - 1 else x, f"reduce {dtype}")

for dtype in MOVED:
    x = data(dtype, (2, 3))
    parts = everyone(x)
    for root in {0, n - 1}:
        y = x.clone()
        dist.broadcast(y, src=root)
        check(y, parts[root], f"broadcast {dtype} from {root}")
    outs = [torch.empty_like(x) for _ in range(n)]
    dist.all_gather(outs, x)
    for k in range(n):
        check(outs[k], parts[k], f"all_gather {dtype}")
    whole = torch.empty((n * 2, 3), dtype=dtype)
    dist.all_gather_into_tensor(whole, x)
    check(whole, torch.cat(parts), f"all_gather_into_tensor {dtype}")
    # all_to_all_single, even and uneven.
    x = data(dtype, (n * 2, 3))
    parts = everyone(x)
    got = torch.empty_like(x)
    dist.all_to_all_single(got, x)
    check(got, torch.cat([p[2 * r:2 * r + 2] for p in parts]), f"all_to_all_single {dtype}")
    sends = [k + 1 for k in range(n)]  # rank k gets k + 1 rows from everyone
    x = data(dtype, (sum(sends), 2))
    parts = everyone(x)
    starts = [sum(sends[:k]) for k in range(n)]
    got = torch.empty((n * (r + 1), 2), dtype=dtype)
    dist.all_to_all_single(got, x, output_split_sizes=[r + 1] * n, input_split_sizes=sends)
    check(got, torch.cat([p[starts[r]:starts[r] + r + 1] for p in parts]), f"uneven alltoall {dtype}")
    # all_to_all of lists, gather, scatter.
    ins = [data(dtype, (k + 1,)) for k in range(n)]
    everyone_ins = [everyone(t) for t in ins]
    outs = [torch.empty((r + 1,), dtype=dtype) for _ in range(n)]
    dist.all_to_all(outs, ins)
    for k in range(n):
        check(outs[k], everyone_ins[r][k], f"all_to_all {dtype}")
    x = data(dtype, (3,))
    parts = everyone(x)
    gathered = [torch.empty_like(x) for _ in range(n)] if r == 0 else None
    dist.gather(x, gathered, dst=0)
    if r == 0:
        for k in range(n):
            check(gathered[k], parts[k], f"gather {dtype}")
    pieces = [data(dtype, (2,)) for _ in range(n)]
    root_pieces = [everyone(p)[0] for p in pieces]
    mine = torch.empty((2,), dtype=dtype)
    dist.scatter(mine, pieces if r == 0 else None, src=0)
    check(mine, root_pieces[r], f"scatter {dtype}")

dist.barrier()

# What it does not do, said at once.
for call, why in [(lambda: dist.send(torch.zeros(1), (r + 1) % n), "send"),
                  (lambda: dist.all_reduce(torch.zeros(1, dtype=torch.int32), op=dist.ReduceOp.BAND),
                   "reduction"),
                  (lambda: dist.all_reduce(torch.zeros(1, dtype=torch.bfloat16)), "bfloat16")]:
    try:
        call()
    except (NotImplementedError, TypeError, RuntimeError, ValueError) as e:
        assert why in str(e), f"{why}: {e}"
        checks += 1
    else:
        raise AssertionError(f"{why} was not refused")
if n > 1:
    try:
        dist.new_group([0], backend="elasticrun")
    except NotImplementedError as e:
        assert r == 0 and "some of the ranks" in str(e), e
        checks += 1
    else:
        assert r != 0, "a sub-group was not refused"

dist.barrier(group=gloo)
dist.destroy_process_group()
print(f"OK {r} {checks}")
