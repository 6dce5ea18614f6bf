#!/usr/bin/env python3
"""Two builds of elasticrun side by side, interleaved: collbench allreduce at
n = 2 (4 KiB .. 256 MiB), synthetic_benchmark (100 x 16 KiB and ResNet-50's
161 tensors) and kill-to-next-step recovery (scripts/bench_recovery.py of each
tree). Every round runs A then B (then B then A the next round, so that
neither always goes first); prints per-figure medians of the rounds and the
ratio B/A.

Usage: scripts/bench_compare.py A_TREE B_TREE [--rounds 5] [--no-recovery]
       (each tree built with `cargo build --release --bins`)"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def run(argv, timeout=900):
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return out.stdout


def collbench(tree):
    bin_ = os.path.join(tree, "target/release/collbench")
    lines = run([bin_, "--np", "2", "--op", "allreduce", "--dtype", "f32", "--min-bytes", "4K",
                 "--max-bytes", "256M", "--step-factor", "4", "--json"])
    figs = {}
    for line in lines.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            if r.get("check") != "ok":
                sys.exit(f"collbench check failed: {line}")
            figs[f"allreduce {r['bytes']} B (us)"] = r["time_us"]
    return figs


def synthetic(tree, extra, label, steps):
    rel = os.path.join(tree, "target/release")
    out = run([os.path.join(rel, "elasticrun"), "-np", "2", os.path.join(rel, "synthetic_benchmark"),
               "--steps", str(steps)] + extra)
    for line in out.splitlines():
        i = line.find("{")
        if i >= 0 and '"event":"done"' in line:
            r = json.loads(line[i:])
            return {f"{label} step (ms, median)": r["step_ms"]["median"]}
    sys.exit(f"no summary from synthetic_benchmark in {tree}:\n{out[-2000:]}")


def recovery(tree):
    out = run([sys.executable, os.path.join(tree, "scripts/bench_recovery.py"), "--np", "4",
               "--kills", "5"])
    figs = {}
    for line in out.splitlines():
        # "elasticrun -np 4: kills 5, median 27 ms, max 35 ms, all [...]"
        if line.startswith("elasticrun") and ", median " in line:
            figs["recovery kill->step (ms, median)"] = float(line.split(", median ")[1].split(" ms")[0])
    if not figs:
        sys.exit(f"no elasticrun line from bench_recovery.py in {tree}:\n{out[-2000:]}")
    return figs


def measure(tree, with_recovery):
    figs = {}
    figs.update(collbench(tree))
    figs.update(synthetic(tree, ["--num-tensors", "100", "--tensor-bytes", "16K"], "100 x 16 KiB", 100))
    figs.update(synthetic(tree, [], "ResNet-50 shape", 20))
    if with_recovery:
        figs.update(recovery(tree))
    return figs


def main():
    p = argparse.ArgumentParser()
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--no-recovery", action="store_true")
    args = p.parse_args()
    seen = {"a": [], "b": []}
    for i in range(args.rounds):
        order = ["a", "b"] if i % 2 == 0 else ["b", "a"]
        for who in order:
            seen[who].append(measure(getattr(args, who), not args.no_recovery))
        print(f"round {i + 1} of {args.rounds} done", file=sys.stderr)
    print(f"{'figure':40} {'A median':>12} {'B median':>12} {'B/A':>7}")
    for key in seen["a"][0]:
        a = statistics.median(r[key] for r in seen["a"])
        b = statistics.median(r[key] for r in seen["b"])
        print(f"{key:40} {a:12.2f} {b:12.2f} {b / a:7.3f}")
        print(json.dumps({"figure": key, "a": [r[key] for r in seen["a"]],
                          "b": [r[key] for r in seen["b"]]}), file=sys.stderr)


if __name__ == "__main__":
    main()
