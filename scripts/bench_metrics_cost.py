#!/usr/bin/env python3
"""What `--metrics-address` costs, on one machine, release builds.

Throughput (rounds interleaved, same machine state for both): the engine's
100 x 16 KiB step (synthetic_benchmark, -np 2) and `train`'s steps per second
(-np 2), each with metrics off and with metrics on while a scraper GETs
/metrics and /status.json every second; prints the median of each and the
ratio on/off.

Memory (--memory-minutes M, 0 to skip): an elastic `train` job with metrics
on, scraped every second, a random worker killed every --kill-every seconds
(50 resets in 10 minutes by default); elasticrun's resident memory
(VmRSS) sampled every 5 s: its value after the first minute and its largest
after that, and the growth between them.

Usage: scripts/bench_metrics_cost.py [--rounds 15] [--memory-minutes 10] [--kill-every 12]
       [--engine-steps 4000] [--only-engine] [--scrape /metrics,/status.json]
Build first: cargo build --release --bins"""
import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request

ENGINE_STEPS = 4000
ONLY_ENGINE = False
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release")


SCRAPED = ("/metrics", "/status.json")


def scraper(stderr_path, stop):
    """GETs SCRAPED (/metrics and /status.json) every second once the address is said."""
    addr = None
    while not stop.is_set() and addr is None:
        try:
            with open(stderr_path) as f:
                for line in f:
                    if "metrics at http://" in line:
                        addr = line.split("metrics at http://")[1].split("/metrics")[0]
        except OSError:
            pass
        time.sleep(0.05)
    while not stop.is_set():
        for path in SCRAPED:
            try:
                urllib.request.urlopen(f"http://{addr}{path}", timeout=5).read()
            except OSError:
                pass
        stop.wait(1.0)


def cpu_seconds(pid):
    """A process's own CPU time (user + system), not its children's."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(argv, metrics):
    """Runs argv (an elasticrun command) with or without metrics and a
    scraper; returns its stdout and elasticrun's own CPU seconds (read
    every 100 ms while it runs: the last reading)."""
    if metrics:
        argv = argv[:1] + ["--metrics-address", "127.0.0.1:0"] + argv[1:]
    with tempfile.NamedTemporaryFile("w+", suffix=".err") as err, \
            tempfile.NamedTemporaryFile("w+", suffix=".out") as out:
        stop = threading.Event()
        t = threading.Thread(target=scraper, args=(err.name, stop), daemon=True)
        if metrics:
            t.start()
        job = subprocess.Popen(argv, stdout=out, stderr=err)
        cpu = 0.0
        while job.poll() is None:
            try:
                cpu = cpu_seconds(job.pid)
            except (OSError, IndexError, ValueError):
                pass
            time.sleep(0.1)
        stop.set()
        if job.returncode != 0:
            raise SystemExit(f"{argv} failed: {open(err.name).read()}")
        out.seek(0)
        return out.read(), cpu


def engine_rate(metrics):
    out, cpu = run([f"{BIN}/elasticrun", "-np", "2", f"{BIN}/synthetic_benchmark", "--num-tensors", "100",
               "--tensor-bytes", "16K", "--steps", str(ENGINE_STEPS), "--warmup-steps", "20"],
                   metrics)
    for line in out.splitlines():
        if '"event":"done"' in line:
            done = json.loads(line.split(":", 1)[1] if line.startswith("[") else line)
            return done["steps_per_sec"], cpu
    raise SystemExit("no done line from synthetic_benchmark")


def train_rate(metrics):
    out, cpu = run([f"{BIN}/elasticrun", "-np", "2", f"{BIN}/train", "--epochs", "150",
                    "--log-steps"], metrics)
    ms = [json.loads(l.split(":", 1)[1])["ms"] for l in out.splitlines()
          if l.startswith("[0]") and '"event":"step"' in l]
    return (len(ms) - 1) / ((ms[-1] - ms[0]) / 1000.0), cpu


def throughput(rounds):
    seed = int(time.time())
    print(f"# throughput: {rounds} rounds, order shuffled with seed {seed}")
    rng = random.Random(seed)
    names = ("engine 100 x 16 KiB",) if ONLY_ENGINE else ("engine 100 x 16 KiB", "train")
    results = {(name, m): [] for name in names for m in (False, True)}
    cpu = {(name, m): [] for name in names for m in (False, True)}
    for r in range(rounds):
        cases = list(results)
        rng.shuffle(cases)
        for name, m in cases:
            rate, seconds = engine_rate(m) if name.startswith("engine") else train_rate(m)
            results[(name, m)].append(rate)
            cpu[(name, m)].append(seconds)
        print(f"round {r + 1}: " + ", ".join(f"{n} {'on' if m else 'off'} {v[-1]:.1f}/s"
                                           for (n, m), v in results.items()), flush=True)
    print("| workload | metrics off (steps/s, median) | on, scraped every second | on / off "
          "(medians) | on / off (median of each round's) | elasticrun's CPU s, off / on (median) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in names:
        off, on = results[(name, False)], results[(name, True)]
        paired = statistics.median(b / a for a, b in zip(off, on))
        c_off, c_on = statistics.median(cpu[(name, False)]), statistics.median(cpu[(name, True)])
        print(f"| {name} | {statistics.median(off):.1f} | {statistics.median(on):.1f} | "
              f"{statistics.median(on) / statistics.median(off):.3f} | {paired:.3f} | "
              f"{c_off:.2f} / {c_on:.2f} |")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def anon_kib(pid):
    """(resident, mapped) KiB of the process's writable private anonymous
    mappings (its heaps, the malloc arenas' usable parts, thread stacks and
    larger blocks mapped on their own): what the allocator has taken from the
    kernel, beside how much of it has been touched."""
    resident = mapped = 0
    anon = False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5:
                anon = head[1].startswith("rw") and head[1].endswith("p") and (
                    len(head) == 5 or head[5] in ("[heap]", "[stack]"))
            elif anon and head[0] == "Size:":
                mapped += int(head[1])
            elif anon and head[0] == "Rss:":
                resident += int(head[1])
    return resident, mapped


def memory(minutes, kill_every):
    seed = int(time.time())
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as d:
        hosts = os.path.join(d, "hosts")
        with open(hosts, "w") as f:
            f.write("localhost:3\n")
        script = os.path.join(d, "discover.sh")
        with open(script, "w") as f:
            f.write(f"#!/bin/sh\ncat {hosts}\n")
        os.chmod(script, 0o755)
        err_path = os.path.join(d, "err")
        err = open(err_path, "w")
        argv = [f"{BIN}/elasticrun", "--metrics-address", "127.0.0.1:0", "--host-discovery-script",
                script, "--min-np", "2", "--max-np", "3", f"{BIN}/train", "--epochs", "100000",
                "--step-delay-ms", "20"]
        job = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        stop = threading.Event()
        threading.Thread(target=scraper, args=(err_path, stop), daemon=True).start()
        print(f"# memory: {minutes} min, a worker killed every {kill_every} s (seed {seed})")
        start = time.time()
        samples, next_kill, kills = [], start + kill_every, 0
        while time.time() - start < minutes * 60:
            time.sleep(5)
            samples.append((time.time() - start, rss_kib(job.pid), *anon_kib(job.pid)))
            if time.time() >= next_kill:
                workers = subprocess.run(["pgrep", "-P", str(job.pid)], stdout=subprocess.PIPE,
                                         text=True).stdout.split()
                if workers:
                    try:
                        os.kill(int(rng.choice(workers)), signal.SIGKILL)
                        kills += 1
                    except ProcessLookupError:
                        pass  # it ended on its own meanwhile
                next_kill += kill_every
        stop.set()
        os.killpg(job.pid, signal.SIGTERM)
        job.wait(timeout=30)
        resets = sum(1 for l in open(err_path) if "generation" in l and "workers" in l) - 1
    print(f"kills: {kills}; generations after the first: {resets} (a kill drops its worker, its replacement joins)")
    print("seconds, VmRSS KiB: " + ", ".join(f"{s[0]:.0f}:{s[1]}" for s in samples[::6]))
    print("seconds, anonymous resident/mapped KiB: " + ", ".join(f"{s[0]:.0f}:{s[2]}/{s[3]}" for s in samples[::6]))
    after_first = [s for s in samples if s[0] >= 60]
    if after_first:
        print("| | at 1 min | largest after | at the end | growth after 1 min |")
        print("|---|---:|---:|---:|---:|")
        for i, what in ((1, "VmRSS"), (2, "anonymous, resident"), (3, "anonymous, mapped")):
            at_1min, peak, last = after_first[0][i], max(s[i] for s in after_first), after_first[-1][i]
            print(f"| {what} | {at_1min} KiB | {peak} KiB | {last} KiB | {peak - at_1min:+d} KiB, "
                  f"{100 * (peak - at_1min) / at_1min:+.1f}% |")


def main():
    global ENGINE_STEPS, ONLY_ENGINE, SCRAPED
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--memory-minutes", type=float, default=10)
    p.add_argument("--kill-every", type=float, default=12)
    p.add_argument("--engine-steps", type=int, default=ENGINE_STEPS,
                   help="timed steps of each engine run (default 4000: a few seconds, several scrapes)")
    p.add_argument("--only-engine", action="store_true", help="leave train out")
    p.add_argument("--scrape", default=",".join(SCRAPED),
                   help="the paths GET every second, comma-separated ('' for none)")
    a = p.parse_args()
    ENGINE_STEPS, ONLY_ENGINE = a.engine_steps, a.only_engine
    SCRAPED = tuple(x for x in a.scrape.split(",") if x)
    if a.rounds > 0:
        throughput(a.rounds)
    if a.memory_minutes > 0:
        memory(a.memory_minutes, a.kill_every)


if __name__ == "__main__":
    main()
