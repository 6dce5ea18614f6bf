#!/usr/bin/env python3
"""etcd mode on one machine, release build: a real etcd (Debian's etcd-server)
on loopback, `elasticrun serve` replicas and 4 "pods" (`train` processes with a
pod's environment). Measures, in one run:

  1. leader kill: `kill -9` of the leading replica, KILLS times (a new standby
     started after each): time to the next completed training step, and to
     the moment the standby leads; new generations counted (target: none);
  2. pod kill: `kill -9` of a random non-zero-rank pod: time to the first step
     of the generation formed after it, beside launcher mode
     (`elasticrun --host-discovery-script`, a worker killed) measured here too.
     Every pod is on a node of its own (its replacement too, as a rescheduled
     pod may be), so that the kills do not blacklist a node;
  3. start-up: 4 pods started to the first step, beside `elasticrun -np 4`;
  4. with $PEERS_VENV set (../shared/peers/setup.sh, plus `pip install
     python-etcd`): torchrun on the same etcd (started with --enable-v2),
     `--rdzv-backend etcd-v2`, 4 agents of one worker each, each agent a "pod"
     (scripts/torchrun_elastic_peer.py, the same model, step delay and commit
     interval): TORCH_KILLS kills of a random pod that does not hold rank 0
     (agent and worker, `kill -9`), and as many of the pod whose worker hosts
     the workers' store (rank 0), each on a fresh 4-pod job (a replacement pod
     joining made torchrun's rounds restart one another here); time from the
     kill to the first step after it, or none within 60 s. torchrun's etcd-v2 `last_call_timeout`
     is set to 1 s (default 30 s) so that it does not wait that long for more
     nodes after one is lost.

Usage: scripts/bench_etcd.py [--kills 10] [--torch-kills 3] [--delay-ms 10] [--lease-ttl 2]
Build first: cargo build --release --bins"""
import argparse
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_recovery import Job, comm, descendants, report, wait_steps  # noqa: E402
import bench_recovery  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REL = os.path.join(ROOT, "target", "release")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Etcd:
    def __init__(self, v2=False):
        self.dir = tempfile.mkdtemp(prefix="bench-etcd-")
        self.port, peer = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = ["etcd", "--data-dir", self.dir, "--listen-client-urls", self.url,
                "--advertise-client-urls", self.url, "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-cluster", f"default=http://127.0.0.1:{peer}", "--log-level", "error",
                "--logger", "zap"]
        if v2:
            argv.append("--enable-v2")
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise SystemExit("etcd did not start")

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def pods_steps(pods, t):
    """(arrival, step, pid, world size) of every pod's step lines since t, in
    order of arrival."""
    return sorted(x for p in pods for x in p.steps(t))


class PodJob:
    def __init__(self, etcd, args, job, np=4):
        self.etcd, self.args, self.job, self.np = etcd, args, job, np
        self.secret = os.path.join(tempfile.mkdtemp(prefix="bench-etcd-secret-"), "secret")
        with open(self.secret, "w") as f:
            f.write(os.urandom(32).hex())
        self.serves, self.pods = [], []

    def serve(self):
        j = Job([os.path.join(REL, "elasticrun"), "serve", "--etcd", self.etcd.url, "--job", self.job,
                 "--secret-file", self.secret, "--lease-ttl", str(self.args.lease_ttl),
                 "-np", str(self.np), "--min-np", "2", "--max-np", str(self.np)])
        self.serves.append(j)
        return j

    def pod(self, i):
        env = {k: v for k, v in os.environ.items() if not k.startswith("ELASTICRUN_")}
        env.update(ELASTICRUN_ETCD=self.etcd.url, ELASTICRUN_JOB=self.job,
                   ELASTICRUN_SECRET_FILE=self.secret, NODE_NAME=f"node-{i}",
                   POD_NAME=f"{self.job}-{i}", POD_UID=f"uid-{i}-{time.time()}", POD_IP="127.0.0.1")
        p = Job([os.path.join(REL, "train"), "--epochs", "100000", "--samples", "4096",
                 "--step-delay-ms", str(self.args.delay_ms), "--commit-every", "10", "--log-steps"], env=env)
        self.pods.append(p)
        return p

    def leader(self, limit=30):
        deadline = time.time() + limit
        while time.time() < deadline:
            for s in self.serves:
                if s.proc.poll() is None and any("leading job" in l for _, _, l in s.since(0)):
                    return s
            time.sleep(0.005)
        raise SystemExit("no replica leads")

    def steps(self, t):
        return pods_steps(self.pods, t)

    def stop(self):
        for j in self.pods + self.serves:
            j.stop()


def wait_pod_steps(job, t, n, limit):
    deadline = time.time() + limit
    while time.time() < deadline:
        s = job.steps(t)
        if len(s) >= n:
            return s
        time.sleep(0.005)
    raise SystemExit("no training progress")


def generations(job, t):
    return sum(1 for s in job.serves for at, st, l in s.since(t) if st == "err" and "generation " in l
               and "workers" in l)


def leader_kills(etcd, args):
    job = PodJob(etcd, args, "bench-leader")
    try:
        job.serve()
        job.leader()
        job.serve()
        for i in range(4):
            job.pod(i)
        wait_pod_steps(job, 0, 20, 120)
        t_start = time.time()
        to_step, to_lead = [], []
        for _ in range(args.kills):
            old = job.leader()
            t_kill = time.time()
            os.kill(old.proc.pid, signal.SIGKILL)
            s = wait_pod_steps(job, t_kill, 1, 60)
            to_step.append(s[0][0] - t_kill)
            deadline = t_kill + 60
            new = None
            while new is None and time.time() < deadline:
                for r in job.serves:
                    if r is not old and r.proc.poll() is None:
                        lines = [at for at, _, l in r.since(t_kill) if "leading job" in l]
                        if lines:
                            new = lines[0]
                time.sleep(0.005)
            if new is None:
                raise SystemExit("no standby took over")
            to_lead.append(new - t_kill)
            job.serve()  # a fresh standby, as the Deployment would start
            wait_pod_steps(job, time.time(), 20, 60)
        return to_step, to_lead, generations(job, t_start)
    finally:
        job.stop()


def pod_kills(etcd, args, rng):
    job = PodJob(etcd, args, "bench-pods")
    try:
        job.serve()
        t0 = time.time()
        for i in range(4):
            job.pod(i)
        first = wait_pod_steps(job, t0, 1, 120)[0][0] - t0
        wait_pod_steps(job, 0, 20, 120)
        times = []
        for _ in range(args.kills):
            rank0 = wait_pod_steps(job, time.time(), 1, 30)[-1][2]
            victims = [p for p in job.pods if p.proc.poll() is None and p.proc.pid != rank0]
            victim = rng.choice(victims)
            t_kill = time.time()
            os.kill(victim.proc.pid, signal.SIGKILL)
            deadline = t_kill + 60
            while True:
                gens = [at for s in job.serves for at, st, l in s.since(t_kill)
                        if st == "err" and "generation " in l and "workers" in l]
                s = job.steps(gens[0]) if gens else []
                if s:
                    times.append(s[0][0] - t_kill)
                    break
                if time.time() > deadline:
                    said = "\n".join(l for s in job.serves for _, _, l in s.since(t_kill - 1))
                    raise SystemExit(f"training did not resume after a pod kill:\n{said}")
                time.sleep(0.002)
            job.pod(len(job.pods))  # the replacement pod Kubernetes would start
            wait_pod_steps(job, time.time(), 20, 60)
        return times, first
    finally:
        job.stop()


class TorchrunPods:
    """torchrun agents on etcd-v2 rendezvous, one worker each: a pod each."""

    def __init__(self, etcd, args, venv, rdzv_id):
        self.etcd, self.args, self.venv, self.rdzv_id = etcd, args, venv, rdzv_id
        self.ckpt = os.path.join(tempfile.mkdtemp(prefix="bench-etcd-torch-"), "ckpt.pt")
        self.pods = []

    def pod(self):
        argv = [os.path.join(self.venv, "bin", "torchrun"), "--nnodes", "2:4", "--nproc-per-node", "1",
                "--max-restarts", "1000", "--monitor-interval", "0.1", "--rdzv-backend", "etcd-v2",
                "--rdzv-endpoint", f"127.0.0.1:{self.etcd.port}", "--rdzv-id", self.rdzv_id,
                "--rdzv-conf", f"last_call_timeout={getattr(self.args, 'torch_last_call', 1)}",
                os.path.join(ROOT, "scripts", "torchrun_elastic_peer.py"), self.ckpt, "100000000",
                str(self.args.delay_ms)]
        p = Job(argv, env={**os.environ, "OMP_NUM_THREADS": "1"})
        self.pods.append(p)
        return p

    def steps(self, t):
        return pods_steps(self.pods, t)

    def wait_world(self, t, n, limit):
        deadline = time.time() + limit
        while time.time() < deadline:
            s = [x for x in self.steps(t) if x[3] == n]
            if len(s) >= 5:
                return s
            time.sleep(0.01)
        said = "\n".join(l for p in self.pods for _, _, l in p.since(t)[-10:])
        raise SystemExit(f"torchrun did not train on {n} workers within {limit} s:\n{said}")

    def stop(self):
        for p in self.pods:
            p.stop()


# How long a torchrun job gets to train again after a kill.
TORCH_LIMIT = 60


def kill_pod(pod):
    pids = descendants(pod.proc.pid) + [pod.proc.pid]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


def torchrun_kill(etcd, args, rng, venv, kind, n):
    """One kill on a fresh 4-pod torchrun job (rendezvous `bench-torchrun-N`):
    (start-up, seconds from the kill to the next step or None when training
    did not resume within TORCH_LIMIT)."""
    job = TorchrunPods(etcd, args, venv, f"bench-torchrun-{n}")
    try:
        t0 = time.time()
        for _ in range(4):
            job.pod()
        first = job.wait_world(t0, 4, 300)[0][0] - t0
        rank0 = job.steps(time.time() - 1)[-1][2]
        live = [p for p in job.pods if p.proc.poll() is None]
        holder = [p for p in live if rank0 in descendants(p.proc.pid)]
        victim = holder[0] if kind == "store" else rng.choice([p for p in live if p not in holder])
        t_kill = time.time()
        killed = kill_pod(victim)
        deadline = t_kill + TORCH_LIMIT
        while time.time() < deadline:
            after = [x for x in job.steps(t_kill) if x[2] not in killed and x[2] != rank0]
            if after:
                return first, after[0][0] - t_kill
            time.sleep(0.005)
        return first, None
    finally:
        job.stop()


def torchrun_kills(etcd, args, rng, venv):
    """torchrun etcd-v2: {kind: [seconds or None]}, start-ups."""
    out, starts = {"pod": [], "store": []}, []
    for n, kind in enumerate(["pod", "store"] * args.torch_kills):
        first, t = torchrun_kill(etcd, args, rng, venv, kind, n)
        starts.append(first)
        out[kind].append(t)
        print(f"torchrun etcd-v2 {kind} kill {n // 2 + 1}: "
              + (f"next step after {t * 1000:.0f} ms" if t is not None
                 else f"no step within {TORCH_LIMIT} s"), flush=True)
    return out["pod"], out["store"], starts


def launcher_startup(args):
    t0 = time.time()
    job = Job([os.path.join(REL, "elasticrun"), "-np", "4", os.path.join(REL, "train"), "--epochs",
               "100000", "--samples", "4096", "--step-delay-ms", str(args.delay_ms), "--log-steps"])
    try:
        return wait_steps(job, t0, 1, 60)[0][0] - t0
    finally:
        job.stop()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--delay-ms", type=int, default=10)
    p.add_argument("--lease-ttl", type=int, default=2)
    p.add_argument("--torch-kills", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    rng = random.Random(args.seed)
    print(f"seed {args.seed}, lease TTL {args.lease_ttl} s, step delay {args.delay_ms} ms")
    venv = os.environ.get("PEERS_VENV")
    etcd = Etcd(v2=bool(venv))
    torch = None
    try:
        to_step, to_lead, gens = leader_kills(etcd, args)
        report("leader kill -9 -> next step", to_step)
        report("leader kill -9 -> standby leads", to_lead)
        print(f"generations formed during the leader kills: {gens} (0 = no reset)")
        pods, first = pod_kills(etcd, args, rng)
        report("etcd mode: pod kill -9 -> next step", pods)
        if venv:
            torch = torchrun_kills(etcd, args, rng, venv)
    finally:
        etcd.stop()
    ours = bench_recovery.elasticrun(argparse.Namespace(np=4, kills=args.kills, delay_ms=args.delay_ms), rng)
    report("launcher mode: worker kill -9 -> next step", ours)
    print(f"median ratio pod kill / launcher kill: {statistics.median(pods) / statistics.median(ours):.2f}")
    starts = [launcher_startup(args) for _ in range(3)]
    print(f"start-up to the first step: 4 pods {first * 1000:.0f} ms; elasticrun -np 4 "
          f"{[round(s * 1000) for s in starts]} ms")
    if torch:
        t_pods, t_store, t_first = torch
        for what, times, ours_ in [("pod kill -9", t_pods, pods),
                                   ("kill -9 of the pod hosting the store (rank 0)", t_store, to_step)]:
            done = [t for t in times if t is not None]
            print(f"torchrun etcd-v2: {what}: resumed after {len(done)} of {len(times)} kills "
                  f"(within {TORCH_LIMIT} s)")
            if done:
                report(f"torchrun etcd-v2: {what} -> next step (resumed only)", done)
                print(f"  median ratio to etcd mode's figure: "
                      f"{statistics.median(done) / statistics.median(ours_):.0f}")
        print(f"torchrun start-up, 4 pods to the first step on 4 workers: "
              f"{[round(t * 1000) for t in t_first]} ms")


if __name__ == "__main__":
    main()
