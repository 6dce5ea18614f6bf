#!/usr/bin/env python3
"""Start-up of a 4-rank torch.distributed job inside a Slurm allocation:
`elasticrun` (every worker a step through srun) against the recipe people
copy (`srun --ntasks-per-node=1 torchrun --nnodes $SLURM_JOB_NUM_NODES
--nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint HEAD:PORT`, HEAD dug
out of `scontrol show hostnames`) and against `elasticrun -np 4` outside
Slurm. The program is the same for all: import torch, init_process_group
("gloo") from the launcher's variables, one barrier, exit. Each timing runs
from the command's start to its exit; `salloc ... true` (the allocation
alone) is timed beside them. Rounds are interleaved, the order rotating;
prints every time and the medians.

It starts a Slurm of its own on this machine, as the tests do (munged,
slurmctld, slurmd on free loopback ports, files in a temporary directory;
one node under this host's short name), and stops it at the end. Needs
root, Debian's slurm-wlm and munge, and a Python with torch.

Usage: scripts/bench_slurm_startup.py --python-venv VENV [--rounds 5]
       (build first: cargo build --release --bins)"""
import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAM = """import torch, torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
dist.destroy_process_group()
"""
DEADLINE = 120


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config(d, node, cpus):
    return f"""ClusterName=bench
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
AuthInfo=socket={d}/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


class Slurm:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="elasticrun-slurm-bench-")
        d = self.dir
        for sub in ("state", "spool"):
            os.makedirs(os.path.join(d, sub))
        key = os.path.join(d, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o600)
        self.conf = os.path.join(d, "slurm.conf")
        node = socket.gethostname().split(".")[0]
        with open(self.conf, "w") as f:
            f.write(config(d, node, os.cpu_count() or 1))
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        log = open(os.path.join(d, "daemons.out"), "w")
        self.daemons = [subprocess.Popen(
            ["munged", "-F", f"--socket={d}/munge.sock", f"--key-file={key}",
             f"--pid-file={d}/munged.pid", f"--log-file={d}/munged.log",
             f"--seed-file={d}/munge.seed", "--force"], stdout=log, stderr=log)]
        self.wait("munge's socket", lambda: os.path.exists(f"{d}/munge.sock"))
        for daemon in ("slurmctld", "slurmd"):
            self.daemons.append(subprocess.Popen(
                [daemon, "-D", "-f", self.conf], env=self.env, stdout=log, stderr=log))
        self.wait("the node idle", lambda: "idle" in subprocess.run(
            ["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True,
            text=True).stdout)

    @staticmethod
    def wait(what, ready, limit=60):
        end = time.monotonic() + limit
        while not ready():
            if time.monotonic() > end:
                sys.exit(f"no {what} within {limit} s")
            time.sleep(0.1)

    def stop(self):
        subprocess.run(["scancel", "--full", "--user", "root"], env=self.env,
                       capture_output=True)
        for p in reversed(self.daemons):
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def commands(args, program):
    py = os.path.join(args.python_venv, "bin/python")
    torchrun = os.path.join(args.python_venv, "bin/torchrun")
    elasticrun = os.path.join(ROOT, "target/release/elasticrun")
    np = str(args.np)
    alloc = ["salloc", "-N1", f"-n{np}", "--overcommit", "--quiet"]
    recipe = (
        'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1); '
        f'exec srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" '
        f'--ntasks-per-node=1 --overlap {torchrun} '
        f'--nnodes "$SLURM_JOB_NUM_NODES" --nproc-per-node {np} '
        f'--rdzv-id "$SLURM_JOB_ID" --rdzv-backend c10d '
        f'--rdzv-endpoint "$head:{free_port()}" {program}')
    return {
        "allocation alone": alloc + ["true"],
        "elasticrun local": [elasticrun, "--no-slurm", "-np", np, py, program],
        "elasticrun in Slurm": alloc + [elasticrun, py, program],
        "srun + torchrun": alloc + ["sh", "-c", recipe],
    }


def timed(name, cmd, env):
    start = time.monotonic()
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=DEADLINE)
    took = time.monotonic() - start
    if run.returncode != 0:
        sys.exit(f"{name} failed ({run.returncode}):\n{run.stdout}\n{run.stderr}")
    return took


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python-venv", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--np", type=int, default=4)
    args = ap.parse_args()
    slurm = Slurm()
    try:
        program = os.path.join(slurm.dir, "program.py")
        with open(program, "w") as f:
            f.write(PROGRAM)
        times = {}
        for r in range(args.rounds):
            cmds = list(commands(args, program).items())
            cmds = cmds[r % len(cmds):] + cmds[:r % len(cmds)]
            for name, cmd in cmds:
                took = timed(name, cmd, slurm.env)
                times.setdefault(name, []).append(took)
                print(f"round {r + 1}: {name}: {took:.3f} s", flush=True)
        print(f"\nmedians of {args.rounds} rounds, {args.np} ranks:")
        for name, ts in times.items():
            print(f"  {name:22} {statistics.median(ts):.3f} s  "
                  f"({min(ts):.3f}-{max(ts):.3f})")
    finally:
        slurm.stop()


if __name__ == "__main__":
    main()
