"""Ranks disagree on a tensor's shape: both get an error naming each view;
the next collective still runs."""

import numpy as np

import elasticrun as er

er.init()
r = er.rank()
try:
    er.allreduce(np.ones(3 + r, np.float32), name="bad")
    raise AssertionError("the mismatch was not reported")
except er.ElasticrunError as e:
    print(str(e), flush=True)
got = er.allreduce(np.ones(2, np.float32), name="good", op=er.Sum)
assert got.tolist() == [2.0, 2.0], got
print(f"OK {r}", flush=True)
er.shutdown()
