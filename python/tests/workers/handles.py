"""Async handles waited for in reverse order, polled to completion."""

import time

import numpy as np

import elasticrun as er

er.init()
r, n = er.rank(), er.size()
handles = [er.allreduce_async(np.full(100 + i, i + r, np.float64), name=f"h{i}", op=er.Sum) for i in range(12)]
for i, h in reversed(list(enumerate(handles))):
    got = er.synchronize(h)
    assert np.all(got == sum(i + k for k in range(n))), (i, got)
h = er.allgather_async(np.array([r], np.int32), name="polled")
deadline = time.monotonic() + 30
while not er.poll(h):
    assert time.monotonic() < deadline, "the allgather did not complete"
    time.sleep(0.001)
assert er.synchronize(h).tolist() == list(range(n))
try:
    h.wait()
    raise AssertionError("a second wait must fail")
except er.ElasticrunError as e:
    assert "already" in str(e)
print(f"OK {r}", flush=True)
er.shutdown()
