#!/usr/bin/env python3
"""Time from `kill -9` of a worker to the next completed training step, on one
machine: elasticrun (elastic mode, the worker replaced, survivors roll back to
their last commit and go on) beside torchrun (its agent restarts every worker,
which reload the last checkpoint). Kills a random non-zero rank KILLS times,
waiting for training to resume in between; prints median and max per launcher.

Usage: scripts/bench_recovery.py [--np 4] [--kills 10] [--delay-ms 10] [--python-venv VENV]
       [--connections all,on-demand [--rounds 3]]
       (torchrun from $PEERS_VENV, see ../shared/peers; skipped when unset;
       --python-venv adds the same job written with elasticrun.torch,
       scripts/torch_elastic_worker.py, and as DistributedDataParallel on
       the elasticrun torch.distributed backend; --hot-spares N gives the
       elasticrun jobs N more slots and `--hot-spares N`, and kills only
       workers that train, each once a spare waits; --connections runs
       the Rust worker's job once per mode listed (elasticrun's
       --connections), in --rounds interleaved rounds of --kills kills each,
       and prints each mode's figures over all rounds)
Build first: cargo build --release --bins"""
import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Job:
    """A running launcher whose output lines are timestamped as they arrive."""

    def __init__(self, argv, env=None):
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env, start_new_session=True,
        )
        self.lines = []  # (arrival time, stream, line)
        self.lock = threading.Lock()
        for stream, pipe in (("out", self.proc.stdout), ("err", self.proc.stderr)):
            threading.Thread(target=self._read, args=(stream, pipe), daemon=True).start()

    def _read(self, stream, pipe):
        for line in pipe:
            with self.lock:
                self.lines.append((time.time(), stream, line.rstrip("\n")))

    def since(self, t):
        with self.lock:
            return [l for l in self.lines if l[0] >= t]

    def steps(self, t):
        """Step events that arrived at or after t: (arrival, step, pid, world
        size or None)."""
        out = []
        for at, _, line in self.since(t):
            body = line.split(":", 1)[1] if line.startswith("[") else line
            if '"event": "step"' in body or '"event":"step"' in body:
                e = json.loads(body)
                out.append((at, e["step"], e["pid"], e.get("world_size")))
        return out

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def descendants(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:
            kids = []
        out += kids
        todo += kids
    return out


def comm(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def wait_steps(job, t, n, limit, world_size=None):
    """n steps logged at or after t (on `world_size` ranks, when given)."""
    deadline = time.time() + limit
    while time.time() < deadline:
        s = [x for x in job.steps(t) if world_size is None or x[3] in (None, world_size)]
        if len(s) >= n:
            return s
        time.sleep(0.005)
    raise SystemExit(f"no training progress within {limit}s:\n" + "\n".join(l[2] for l in job.lines[-20:]))


def slot_of(pid):
    """The slot elasticrun started worker `pid` on (None if unknown)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
        return int(env.get(b"ELASTICRUN_SLOT", b"-1"))
    except (OSError, ValueError):
        return None


def spare_slots(job, spares, kills_done):
    """Waits until the job's spares are all waiting (elasticrun said so for
    each: `spares` at the start, one more after each kill); their slots."""
    deadline = time.time() + 120
    while time.time() < deadline:
        said = [l for _, s, l in job.since(0) if s == "err" and "waits as a hot spare" in l]
        if len(said) >= spares + kills_done:
            return {int(l.split(" slot ")[1].split(" ")[0]) for l in said[-spares:]}
        time.sleep(0.01)
    raise SystemExit("no hot spare waiting within 120 s")


def measure(job, is_worker, resumed, kills, rng, np, spares=0):
    """Kills a random non-zero rank `kills` times; seconds until training resumed."""
    times = []
    wait_steps(job, 0, 20, 120, world_size=np)
    for k in range(kills):
        waiting = spare_slots(job, spares, k) if spares else set()
        t0 = time.time()
        rank0 = wait_steps(job, t0, 1, 30)[-1][2]
        victims = [p for p in descendants(job.proc.pid) if is_worker(p) and p != rank0
                   and slot_of(p) not in waiting]
        victim = rng.choice(victims)
        t_kill = time.time()
        os.kill(victim, signal.SIGKILL)
        deadline = t_kill + 120
        while True:
            r = resumed(job, t_kill, rank0)
            if r is not None:
                times.append(r - t_kill)
                break
            if time.time() > deadline:
                raise SystemExit("training did not resume within 120 s")
            time.sleep(0.002)
        # Let it settle before the next kill: 20 steps with every worker back
        # (a replacement that joins after the survivors went on is no member
        # yet, and killing it would time its late join, not a recovery).
        wait_steps(job, time.time(), 20, 60, world_size=np)
    return times


def elasticrun(args, rng, worker, is_worker):
    tmp = tempfile.mkdtemp(prefix="bench-recovery-")
    hosts = os.path.join(tmp, "hosts.txt")
    with open(hosts, "w") as f:
        f.write(f"localhost:{args.np + args.hot_spares}\n")
    spares = ["--hot-spares", str(args.hot_spares)] if args.hot_spares else []
    connections = ["--connections", args.mode] if getattr(args, "mode", None) else []
    job = Job([
        os.path.join(ROOT, "target", "release", "elasticrun"), "--min-np", "2", "--max-np", str(args.np),
        "--host-discovery-script", f"{ROOT}/discovery-scripts/hosts-from-file.sh {hosts}",
    ] + spares + connections + worker)

    def resumed(job, t_kill, _rank0):
        # The first step completed in a generation assigned after the kill.
        gens = [at for at, s, l in job.since(t_kill) if s == "err" and "generation" in l]
        if not gens:
            return None
        s = job.steps(gens[0])
        return s[0][0] if s else None

    try:
        return measure(job, is_worker, resumed, args.kills, rng, args.np, args.hot_spares)
    finally:
        job.stop()


def elasticrun_rust(args, rng):
    train = os.path.join(ROOT, "target", "release", "train")
    worker = [train, "--epochs", "100000", "--samples", "4096", "--step-delay-ms", str(args.delay_ms),
              "--commit-every", "10", "--log-steps"]
    return elasticrun(args, rng, worker, lambda p: comm(p).startswith(train))


def elasticrun_python(args, rng, api=()):
    """The same job in Python with elasticrun.torch (hvd.elastic.run,
    TorchState); with api ["ddp"], as DDP on the elasticrun backend."""
    script = os.path.join(ROOT, "scripts", "torch_elastic_worker.py")
    worker = [os.path.join(args.python_venv, "bin", "python"), script, "100000000", str(args.delay_ms),
              *api]
    return elasticrun(args, rng, worker, lambda p: script in comm(p))


def torchrun(args, rng):
    venv = os.environ.get("PEERS_VENV")
    if not venv:
        return None
    tmp = tempfile.mkdtemp(prefix="bench-recovery-torch-")
    port = rng.randint(20000, 40000)
    job = Job([
        os.path.join(venv, "bin", "torchrun"), "--nnodes", "1", "--nproc-per-node", str(args.np),
        "--max-restarts", "1000", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
        os.path.join(ROOT, "scripts", "torchrun_elastic_peer.py"), os.path.join(tmp, "ckpt.pt"),
        "100000000", str(args.delay_ms),
    ], env={**os.environ, "OMP_NUM_THREADS": "1"})

    def resumed(job, t_kill, rank0):
        # torchrun restarts every worker: the first step of a new rank 0.
        s = [x for x in job.steps(t_kill) if x[2] != rank0]
        return s[0][0] if s else None

    try:
        return measure(job, lambda p: "torchrun_elastic_peer.py" in comm(p) and "torchrun " not in comm(p)
                       and "/torchrun" not in comm(p).split(" ")[0], resumed, args.kills, rng, args.np)
    finally:
        job.stop()


def report(name, times):
    ms = [t * 1000 for t in times]
    print(f"{name}: kills {len(ms)}, median {statistics.median(ms):.0f} ms, max {max(ms):.0f} ms, "
          f"all {[round(m) for m in ms]}")


def compare_connections(args, rng):
    modes = [m for m in args.connections.split(",") if m]
    times = {m: [] for m in modes}
    for r in range(args.rounds):
        for m in modes:
            args.mode = m
            times[m] += elasticrun_rust(args, rng)
            print(f"# round {r + 1}, --connections {m}: {len(times[m])} kills so far", flush=True)
    for m in modes:
        report(f"elasticrun -np {args.np} --connections {m}, Rust worker", times[m])
    base = statistics.median(times[modes[0]])
    for m in modes[1:]:
        print(f"median ratio {modes[0]}/{m}: {base / statistics.median(times[m]):.2f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--np", type=int, default=4)
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--delay-ms", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--hot-spares", type=int, default=0, help="elasticrun's --hot-spares")
    p.add_argument("--python-venv", help="also the elasticrun.torch worker, from this venv (with torch and elasticrun)")
    p.add_argument("--connections", help="modes of elasticrun's --connections to compare (all,on-demand): "
                   "the Rust worker only, interleaved rounds")
    p.add_argument("--rounds", type=int, default=3, help="rounds of --connections (default 3)")
    args = p.parse_args()
    rng = random.Random(args.seed)
    print(f"# seed {args.seed}, {args.np} ranks")
    if args.connections:
        return compare_connections(args, rng)
    tag = f" --hot-spares {args.hot_spares}" if args.hot_spares else ""
    ours = elasticrun_rust(args, rng)
    report(f"elasticrun -np {args.np}{tag}, Rust worker", ours)
    if args.python_venv:
        py = elasticrun_python(args, rng)
        report(f"elasticrun -np {args.np}{tag}, elasticrun.torch worker", py)
        ddp = elasticrun_python(args, rng, ["ddp"])
        report(f"elasticrun -np {args.np}{tag}, DDP on the elasticrun backend", ddp)
    theirs = torchrun(args, rng)
    if theirs:
        report(f"torchrun --nproc-per-node {args.np}", theirs)
        print(f"median ratio torchrun/elasticrun (Rust worker): {statistics.median(theirs) / statistics.median(ours):.1f}")
        if args.python_venv:
            print(f"median ratio torchrun/elasticrun (elasticrun.torch worker): "
                  f"{statistics.median(theirs) / statistics.median(py):.1f}")
            print(f"median ratio torchrun/elasticrun (DDP on the elasticrun backend): "
                  f"{statistics.median(theirs) / statistics.median(ddp):.1f}")


if __name__ == "__main__":
    sys.exit(main())
