"""Every collective, reduction and dtype against numpy references computed
from every rank's (deterministic) inputs; prints ``OK <rank> <checks>``."""

import numpy as np

import elasticrun as er

er.init()
r, n = er.rank(), er.size()
DTYPES = [np.float32, np.float64, np.float16, np.int32, np.int64, np.uint8]
OPS = {er.Average: "average", er.Sum: "sum", er.Min: "min", er.Max: "max", er.Product: "product"}
checks = 0


def inputs(k, dt, shape, op):
    rng = np.random.default_rng(1000 * k + 7)
    hi = 2 if op == er.Product else 9
    return rng.integers(1, hi + 1, size=shape).astype(dt)


def reference(dt, shape, op):
    all_ = np.stack([inputs(k, dt, shape, op) for k in range(n)]).astype(np.float64)
    if op == er.Sum:
        out = all_.sum(0)
    elif op == er.Min:
        out = all_.min(0)
    elif op == er.Max:
        out = all_.max(0)
    elif op == er.Product:
        out = all_.prod(0)
    elif np.issubdtype(dt, np.integer):
        out = np.floor_divide(all_.sum(0), n)
    else:
        out = all_.sum(0) / n
    return out.astype(dt)


for dt in DTYPES:
    for op, opname in OPS.items():
        for shape in [(7,), (3, 5), (1,)]:
            got = er.allreduce(inputs(r, dt, shape, op), name=f"ar.{dt.__name__}.{opname}.{shape}", op=op)
            want = reference(dt, shape, op)
            assert got.dtype == dt and got.shape == shape, (got.dtype, got.shape)
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-3)
            checks += 1
    # allgather: rank k contributes k+1 rows.
    mine = np.full((r + 1, 2), r, dtype=dt)
    got = er.allgather(mine, name=f"ag.{dt.__name__}")
    want = np.concatenate([np.full((k + 1, 2), k, dtype=dt) for k in range(n)])
    assert got.dtype == dt and np.array_equal(got, want), (got, want)
    checks += 1
    for root in range(n):
        got = er.broadcast(np.full(4, r, dtype=dt), root, name=f"bc.{dt.__name__}.{root}")
        assert np.array_equal(got, np.full(4, root, dtype=dt)), got
        checks += 1
    # alltoall: rank k sends j+1 rows of value 10k+j to rank j.
    send = np.concatenate([np.full((j + 1, 3), 10 * r + j, dtype=dt) for j in range(n)])
    got, splits = er.alltoall(send, splits=[j + 1 for j in range(n)], name=f"a2a.{dt.__name__}")
    want = np.concatenate([np.full((r + 1, 3), 10 * k + r, dtype=dt) for k in range(n)])
    assert splits == [r + 1] * n and np.array_equal(got, want), (got, splits)
    checks += 1
    # grouped allreduce: members of several shapes, one not contiguous,
    # each member's result its own reduction.
    shapes = [(3,), (2, 4), (1,)]
    parts = [inputs(r + 10 * i, dt, s, er.Sum) for i, s in enumerate(shapes)]
    parts[1] = np.asfortranarray(parts[1])
    got = er.grouped_allreduce(parts, name=f"group.{dt.__name__}", op=er.Sum)
    for i, s in enumerate(shapes):
        want = sum(inputs(k + 10 * i, dt, s, er.Sum).astype(np.float64) for k in range(n)).astype(dt)
        assert got[i].dtype == dt and got[i].shape == s and np.array_equal(got[i], want), (i, got[i], want)
    checks += 1
    # A Fortran-order array is reduced as the array it is, not its memory.
    got = er.allreduce(np.asfortranarray(inputs(r, dt, (2, 3), er.Sum)), name=f"fortran.{dt.__name__}", op=er.Sum)
    assert np.array_equal(got, reference(dt, (2, 3), er.Sum)), got
    checks += 1
    rows = 2 * n
    got = er.reducescatter(np.full((rows, 2), r + 1, dtype=dt), name=f"rs.{dt.__name__}", op=er.Sum)
    assert got.shape == (2, 2) and np.all(got == sum(k + 1 for k in range(n))), got
    checks += 1

# Scale factors (floating point only).
got = er.allreduce(np.ones(3, np.float32), name="scaled", op=er.Sum, prescale_factor=2.0, postscale_factor=0.5)
assert np.allclose(got, n), got
er.barrier()
print(f"OK {r} {checks}", flush=True)
er.shutdown()
