"""Large results are lent from the native module's buffer pool: the memory
of a dropped result serves the next submission, no view of a result is
freed under it, and a reused buffer carries nothing of its last use."""

import numpy as np

import elasticrun as er
from elasticrun import _elasticrun as native

er.init()
r, n = er.rank(), er.size()
a = np.full(1 << 18, r + 1, np.float32)  # 1 MiB
want = sum(range(1, n + 1))
before = native.pool_stats()
out = er.allreduce(a, name="pooled", op=er.Sum)
assert out.flags.writeable and out.shape == a.shape
assert np.all(out == want), out[:4]
out[:] = -7.0
view = out[10:20].reshape(2, 5)
del out
held_with_view = native.pool_stats()[2]
assert held_with_view == before[2], ("a buffer went back while a view of it lived", before, held_with_view)
assert np.all(view == -7.0)
del view
after_drop = native.pool_stats()
assert after_drop[2] >= before[2] + a.nbytes, ("the dropped result's buffer did not come back", before, after_drop)
again = er.allreduce(a, name="pooled", op=er.Sum)
assert np.all(again == want), again[:4]
stats = native.pool_stats()
assert stats[0] >= before[0] + 1, ("the second submission did not reuse the buffer", before, stats)
grouped = er.grouped_allreduce([a, a[:1000].reshape(10, 100)], name="pooled.group", op=er.Sum)
assert grouped[1].shape == (10, 100) and np.all(grouped[0] == want) and np.all(grouped[1] == want)
print(f"OK {r} {before} {stats}", flush=True)
er.shutdown()
