"""What is refused, and how."""

import numpy as np

import elasticrun as er

try:
    er.rank()
    raise AssertionError("rank() before init() must fail")
except er.ElasticrunError as e:
    assert "init()" in str(e), e
er.init()
assert er.is_initialized()
for bad, kind, words in [
    (lambda: er.allreduce(np.ones(2, np.float32), op=er.Adasum), ValueError, "Adasum"),
    (lambda: er.allreduce(np.ones(2, np.float32), op=42), ValueError, "unknown reduction"),
    (lambda: er.allreduce(np.ones(2, np.complex64)), TypeError, "complex64"),
    (lambda: er.allreduce(np.ones(2, np.int32), postscale_factor=2.0), ValueError, "floating-point"),
    (lambda: er.grouped_allreduce([np.ones(1, np.float32), np.ones(1, np.float64)]), TypeError, "one dtype"),
    (lambda: er.grouped_allreduce([np.ones(1, np.float32), np.ones(1, np.complex64)]), TypeError, "complex64"),
    (lambda: er.grouped_allreduce([np.ones(1, np.complex64), np.ones(1, np.float32)]), TypeError, "complex64"),
    (lambda: er.grouped_allreduce([]), ValueError, "at least one array"),
]:
    try:
        bad()
        raise AssertionError(f"{words}: not refused")
    except kind as e:
        assert words in str(e), e
er.shutdown()
assert not er.is_initialized()
print("OK 0", flush=True)
