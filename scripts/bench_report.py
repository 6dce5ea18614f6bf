#!/usr/bin/env python3
"""Summarises a scripts/bench_allreduce.sh run as markdown tables.

Per size and world size: the median over rounds of each tool's median time, bus
bandwidth (nccl-tests convention), and collbench's ratio to Gloo. The ceiling is
iperf3 over loopback: one-way, and --bidir counted per direction (sum / 2).
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
    for n in (2, 4):
        gl = [gloo_rows(p) for p in sorted(glob.glob(f"{d}/gloo_n{n}_*.txt"))]
        ou = [ours_rows(p) for p in sorted(glob.glob(f"{d}/collbench_n{n}_*.jsonl"))]
        if not gl or not ou:
            continue
        factor = 2 * (n - 1) / n
        sizes = sorted(ou[0])
        print(f"\n**n = {n}** (busbw = bytes / time x {factor:g}; times are medians over "
              f"{len(ou)} rounds of each round's median)\n")
        print("| bytes | collbench µs | collbench busbw GB/s | Gloo µs | Gloo busbw GB/s | "
              "busbw ratio (ours/Gloo) | latency ratio (ours/Gloo) | of --bidir per direction | check |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for s in sizes:
            t = med([o[s][0] for o in ou if s in o])
            checks = {o[s][1] for o in ou if s in o}
            bw = s / (t * 1e-6) / 1e9 * factor
            gts = [g[s] for g in gl if s in g]
            if gts:
                g = med(gts)
                gbw = s / (g * 1e-6) / 1e9 * factor
                gcols = f"{g:.1f} | {gbw:.3f} | {bw / gbw:.2f}x | {t / g:.3f} |"
            else:
                gcols = " | | | |"
            print(f"| {s} | {t:.1f} | {bw:.3f} | {gcols} {bw / ceiling:.0%} | {','.join(sorted(checks))} |")


if __name__ == "__main__":
    main(sys.argv[1])
