#!/usr/bin/env python3
"""Allreduce from 4 KiB to 256 MiB beside Open MPI, interleaved rounds, with
this machine's latency floor.

Each round runs, at n = 2 and n = 4, collbench over shared memory and over
loopback TCP (--no-shared-memory), and Open MPI 4.1's own allreduce through
mpi4py (scripts/mpi_allreduce.py) over its shared-memory transport (vader)
and over TCP, in an order that turns each round; every figure is the median
over iterations of the slowest rank's time after a barrier. Prints, per
size, the range of the rounds' medians and the ratio of the medians of the
rounds (elasticrun / Open MPI; below 1 is faster), then latfloor's
ping-pongs (a shared cache line, loopback TCP).

Needs: `cargo build --release -p elasticrun-examples --bin collbench --bin
latfloor`; Open MPI and mpi4py (`apt-get install openmpi-bin libopenmpi-dev`,
`pip install mpi4py numpy`).

Usage: scripts/bench_small.py [--rounds 5] [--np 2,4] [--max-bytes 256M]"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REL = os.path.join(ROOT, "target", "release")


def run(argv, timeout=1200):
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return out.stdout


def collbench(np_, max_bytes, shm):
    argv = [os.path.join(REL, "collbench"), "--np", str(np_), "--min-bytes", "4K",
            "--max-bytes", str(max_bytes), "--json"]
    if not shm:
        argv.append("--no-shared-memory")
    figs = {}
    for line in run(argv).splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            if r.get("check") != "ok":
                sys.exit(f"collbench check failed: {line}")
            figs[r["bytes"]] = r["time_us"]
    return figs


def open_mpi(np_, max_bytes, btl):
    argv = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(np_),
            "--mca", "pml", "ob1", "--mca", "btl", f"self,{btl}", sys.executable,
            os.path.join(ROOT, "scripts", "mpi_allreduce.py"), "4096", str(max_bytes)]
    figs = {}
    for line in run(argv).splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].isdigit():
            figs[int(parts[0])] = float(parts[1])
    return figs


CASES = [
    ("elasticrun shm", lambda n, m: collbench(n, m, True)),
    ("Open MPI vader", lambda n, m: open_mpi(n, m, "vader")),
    ("elasticrun tcp", lambda n, m: collbench(n, m, False)),
    ("Open MPI tcp", lambda n, m: open_mpi(n, m, "tcp")),
]


def parse_bytes(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def size(b):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def span(xs):
    lo, hi = min(xs), max(xs)
    fmt = (lambda v: f"{v / 1000:.2f} ms") if lo >= 1000 else (lambda v: f"{v:.1f}")
    return f"{fmt(lo)}-{fmt(hi)}" if lo >= 1000 else f"{fmt(lo)}-{fmt(hi)} µs"


def report(np_, figs):
    print(f"\n### n = {np_}\n")
    names = [c[0] for c in CASES]
    print("| bytes | " + " | ".join(names) + " | shm / vader | tcp / tcp |")
    print("|---:|" + "---:|" * (len(names) + 2))
    for b in sorted(figs[names[0]][0]):
        cells = [span([r[b] for r in figs[n]]) for n in names]
        med = {n: statistics.median(r[b] for r in figs[n]) for n in names}
        ratios = [med["elasticrun shm"] / med["Open MPI vader"],
                  med["elasticrun tcp"] / med["Open MPI tcp"]]
        print(f"| {size(b)} | " + " | ".join(cells) + " | " +
              " | ".join(f"{x:.2f}" for x in ratios) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--np", default="2,4")
    ap.add_argument("--max-bytes", default="256M")
    a = ap.parse_args()
    for tool in ("collbench", "latfloor"):
        if not os.path.exists(os.path.join(REL, tool)):
            sys.exit(f"no {tool}: cargo build --release -p elasticrun-examples --bin {tool}")
    if shutil.which("mpirun") is None:
        sys.exit("no mpirun: apt-get install openmpi-bin libopenmpi-dev; pip install mpi4py numpy")
    max_bytes = parse_bytes(a.max_bytes)
    sizes = [int(n) for n in a.np.split(",")]
    figs = {n: {c[0]: [] for c in CASES} for n in sizes}
    for rnd in range(a.rounds):
        for n in sizes:
            k = (rnd + n) % len(CASES)
            for name, fn in CASES[k:] + CASES[:k]:
                figs[n][name].append(fn(n, max_bytes))
        print(f"round {rnd + 1} of {a.rounds} done", file=sys.stderr)
    print(f"Allreduce f32 sum, median per round of the slowest rank's time, {a.rounds} rounds")
    for n in sizes:
        report(n, figs[n])
    print("\n### Latency floor\n")
    print("```\n" + run([os.path.join(REL, "latfloor")]).rstrip() + "\n```")


if __name__ == "__main__":
    main()
