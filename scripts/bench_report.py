#!/usr/bin/env python3
"""Summarises a scripts/bench_allreduce.sh run as markdown tables.

Per size and world size: the median over rounds of each tool's median time and
bus bandwidth (nccl-tests convention) for collbench over shared memory, over TCP
(--no-shared-memory) and Gloo, with the ratios. The ceilings are iperf3 over
loopback (one-way, and --bidir counted per direction: sum / 2) and membench (one
thread's copy and a += b).
"""
import glob
import json
import os
import statistics
import sys


def iperf_gbps(path, bidir):
    end = json.load(open(path))["end"]
    fwd = end["sum_received"]["bits_per_second"] / 8e9
    if not bidir:
        return fwd, None
    rev = end["sum_received_bidir_reverse"]["bits_per_second"] / 8e9
    return fwd, rev


def gloo_rows(path):
    rows = {}
    for line in open(path):
        f = line.split()
        if f and f[0] == "allreduce":
            rows[int(f[1])] = float(f[3])
    return rows


def ours_rows(path):
    return {r["bytes"]: (r["time_us"], r["check"]) for r in map(json.loads, open(path))}


def membench_rows(path):
    rows = {}
    for line in open(path):
        f = line.split()
        if f and f[0].isdigit():
            rows[int(f[0])] = (float(f[1]), float(f[2]))
    return rows


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main(d):
    print(f"Run: `{d}` ({open(os.path.join(d, 'machine.txt')).read().split(chr(10))[-2]})\n")
    one = [iperf_gbps(p, False)[0] for p in sorted(glob.glob(f"{d}/iperf_oneway_*.json"))]
    bi = [iperf_gbps(p, True) for p in sorted(glob.glob(f"{d}/iperf_bidir_*.json"))]
    per_dir = [(a + b) / 2 for a, b in bi]
    print("| loopback TCP (iperf3) | GB/s per round | median |")
    print("|---|---|---|")
    print(f"| one-way, 1 stream | {', '.join(f'{x:.2f}' for x in one)} | {med(one):.2f} |")
    print(f"| --bidir, forward / reverse | {', '.join(f'{a:.2f}/{b:.2f}' for a, b in bi)} | |")
    print(f"| --bidir, per direction ((fwd+rev)/2) | {', '.join(f'{x:.2f}' for x in per_dir)} | {med(per_dir):.2f} |")
    ceiling = med(per_dir)
    mem = [membench_rows(p) for p in sorted(glob.glob(f"{d}/membench_*.txt"))]
    if mem:
        print("\n| membench bytes | copy GB/s | a += b GB/s |")
        print("|---:|---:|---:|")
        for s in sorted(mem[0]):
            print(f"| {s} | {med([m[s][0] for m in mem]):.2f} | {med([m[s][1] for m in mem]):.2f} |")
    for n in (2, 4):
        gl = [gloo_rows(p) for p in sorted(glob.glob(f"{d}/gloo_n{n}_*.txt"))]
        ou = [ours_rows(p) for p in sorted(glob.glob(f"{d}/collbench_n{n}_*.jsonl"))]
        tc = [ours_rows(p) for p in sorted(glob.glob(f"{d}/collbenchtcp_n{n}_*.jsonl"))]
        if not ou:
            continue
        factor = 2 * (n - 1) / n
        busbw = lambda s, t: s / (t * 1e-6) / 1e9 * factor
        print(f"\n**n = {n}** (busbw = bytes / time x {factor:g}; times are medians over "
              f"{len(ou)} rounds of each round's median)\n")
        print("| bytes | shm µs | shm busbw GB/s | TCP µs | TCP busbw GB/s | shm time / TCP | "
              "Gloo µs | Gloo busbw GB/s | TCP busbw / Gloo | TCP of --bidir | check |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for s in sorted(ou[0]):
            t = med([o[s][0] for o in ou if s in o])
            checks = {o[s][1] for o in ou + tc if s in o}
            tt = med([o[s][0] for o in tc if s in o])
            gt = med([g[s] for g in gl if s in g])
            print(f"| {s} | {t:.1f} | {busbw(s, t):.3f} | {tt:.1f} | {busbw(s, tt):.3f} | "
                  f"{t / tt:.2f} | {gt:.1f} | {busbw(s, gt):.3f} | {gt / tt:.2f}x | "
                  f"{busbw(s, tt) / ceiling:.0%} | {','.join(sorted(checks))} |")

if __name__ == "__main__":
    main(sys.argv[1])
