#!/usr/bin/env python3
"""Open MPI's allreduce (through mpi4py) timed as collbench times its own: a barrier before each
call, the slowest rank's time per iteration, the median over iterations, the
same iteration counts. Run by scripts/bench_small.py under mpirun:

    mpirun -np 2 --mca pml ob1 --mca btl self,vader python3 mpi_allreduce.py 4096 268435456

Prints "BYTES MEDIAN_US MIN_US" per size (f32 sum, sizes doubling)."""
import sys
import time

import numpy as np
from mpi4py import MPI


def iters_for(b):
    """collbench's default iterations for a size."""
    if b <= 64 << 10:
        return 200
    if b <= 1 << 20:
        return 50
    if b <= 16 << 20:
        return 15
    return 7 if b <= 64 << 20 else 5


def main():
    lo, hi = int(sys.argv[1]), int(sys.argv[2])
    comm = MPI.COMM_WORLD
    b = lo
    while b <= hi:
        n = b // 4
        src = np.ones(n, dtype=np.float32)
        dst = np.empty_like(src)
        it = iters_for(b)
        for _ in range(max(1, it // 10)):
            comm.Allreduce(src, dst, op=MPI.SUM)
        ts = np.empty(it)
        for i in range(it):
            comm.Barrier()
            t0 = time.perf_counter()
            comm.Allreduce(src, dst, op=MPI.SUM)
            ts[i] = time.perf_counter() - t0
        mx = np.empty_like(ts)
        comm.Allreduce(ts, mx, op=MPI.MAX)
        if dst[0] != comm.size:
            sys.exit(f"wrong sum at {b} bytes: {dst[0]} on rank {comm.rank}")
        if comm.rank == 0:
            print(f"{b} {np.median(mx)*1e6:.1f} {mx.min()*1e6:.1f}", flush=True)
        b *= 2


main()
