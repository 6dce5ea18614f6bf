#!/usr/bin/env python3
"""Real processes at this machine's limit: an elastic `train` job of N ranks
on one machine (shared memory on), for each mode of elasticrun's
--connections in interleaved rounds: start-up (elasticrun started to the
first step of the full world), sockets and resident memory per worker
after 20 steps, elasticrun's own memory, and recovery (kill -9 of a random
non-zero rank to the first step of the next generation).

Usage: scripts/bench_ranks.py [--np 64,256] [--connections all,on-demand] [--rounds 2]
       [--kills 1] [--delay-ms 10] [--seed 1] [--transport tcp|tls|quic]
Prints one JSON line per job (fields carry their unit) and a table.
Build first: cargo build --release --bins"""
import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_recovery as br  # noqa: E402  (Job, measure, the worker's command)

ROOT = br.ROOT


def sockets(pid):
    try:
        return sum(1 for fd in os.listdir(f"/proc/{pid}/fd")
                   if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"))
    except OSError:
        return None


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def run_job(np, mode, kills, delay_ms, rng, transport="tcp"):
    tmp = tempfile.mkdtemp(prefix="bench-ranks-")
    hosts = os.path.join(tmp, "hosts.txt")
    with open(hosts, "w") as f:
        f.write(f"localhost:{np}\n")
    train = os.path.join(ROOT, "target", "release", "train")
    t0 = time.time()
    job = br.Job([
        os.path.join(ROOT, "target", "release", "elasticrun"), "--min-np", "2", "--max-np", str(np),
        "--host-discovery-script", f"{ROOT}/discovery-scripts/hosts-from-file.sh {hosts}",
        "--connections", mode, "--transport", transport,
        "--elastic-timeout", "600", "--start-timeout", "600",
        train, "--epochs", "100000", "--samples", "4096", "--step-delay-ms", str(delay_ms),
        "--commit-every", "10", "--log-steps",
    ])
    try:
        first = br.wait_steps(job, 0, 1, 900, world_size=np)[0][0]
        br.wait_steps(job, first, 20, 900, world_size=np)
        workers = [p for p in br.descendants(job.proc.pid) if br.comm(p).startswith(train)]
        socks = [s for s in map(sockets, workers) if s is not None]
        mem = [m for m in map(rss_kib, workers) if m is not None]
        row = {
            "np": np, "transport": transport, "connections": mode, "startup_ms": round((first - t0) * 1000),
            "sockets_per_worker_median": statistics.median(socks), "sockets_per_worker_max": max(socks),
            "worker_rss_mib_median": round(statistics.median(mem) / 1024, 1),
            "coordinator_rss_mib": round((rss_kib(job.proc.pid) or 0) / 1024, 1),
        }

        def resumed(job, t_kill, _rank0):
            gens = [at for at, s, l in job.since(t_kill) if s == "err" and "generation" in l]
            s = job.steps(gens[0]) if gens else []
            return s[0][0] if s else None

        if kills:
            times = br.measure(job, lambda p: br.comm(p).startswith(train), resumed, kills, rng, np)
            row["recovery_ms"] = [round(t * 1000) for t in times]
        return row
    finally:
        job.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", default="64,256")
    p.add_argument("--connections", default="all,on-demand")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--kills", type=int, default=1)
    p.add_argument("--delay-ms", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--transport", default="tcp", choices=["tcp", "tls", "quic"],
                   help="elasticrun's --transport (default tcp)")
    a = p.parse_args()
    rng = random.Random(a.seed)
    print(f"# seed {a.seed}")
    rows = []
    for np in [int(x) for x in a.np.split(",")]:
        for r in range(a.rounds):
            for mode in a.connections.split(","):
                row = run_job(np, mode, a.kills, a.delay_ms, rng, a.transport)
                row["round"] = r + 1
                print(json.dumps(row), flush=True)
                rows.append(row)
    print("| ranks | connections | start-up ms | recovery ms | sockets/worker (median, max) "
          "| worker RSS MiB | elasticrun RSS MiB |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for np in sorted({r["np"] for r in rows}):
        for mode in a.connections.split(","):
            rs = [r for r in rows if r["np"] == np and r["connections"] == mode]
            rec = [t for r in rs for t in r.get("recovery_ms", [])]
            print(f"| {np} | {mode} | {statistics.median(r['startup_ms'] for r in rs):.0f} "
                  f"| {statistics.median(rec) if rec else float('nan'):.0f} "
                  f"| {statistics.median(r['sockets_per_worker_median'] for r in rs):.0f}, "
                  f"{max(r['sockets_per_worker_max'] for r in rs)} "
                  f"| {statistics.median(r['worker_rss_mib_median'] for r in rs)} "
                  f"| {statistics.median(r['coordinator_rss_mib'] for r in rs)} |")


if __name__ == "__main__":
    sys.exit(main())
