#!/usr/bin/env python3
"""`--max-restarts` beside torchrun's: the same torch.distributed script (DDP
over Gloo, a checkpoint saved every step, resumed at start; no elasticrun
import: python/tests/workers/torchrun_ckpt.py) under `elasticrun -np N
--max-restarts 10` (and the same with `--prestart-imports
torch,torch.distributed,torch._dynamo`: Python processes started ahead;
torch's optimizers import torch._dynamo at their first use) and `torchrun
--standalone --nproc_per_node N --max-restarts 10`. Each round `kill -9`s rank 1 once the job reached step
KILL_AT (3 s of training: the processes started ahead have finished their
imports by then, as they have in a job that has run a while) and times the gap from the kill to the first training step of the
restarted group (after its first "resumed ... restart N" line, N >= 1: a
restart that fails itself is restarted again, and counts in the gap). Rounds rotate
which launcher goes first; prints each gap and the medians.

Usage: scripts/bench_restarts.py --python-venv VENV [--np 2] [--rounds 3]
       (VENV: torch and its torchrun; build first: cargo build --release --bins)"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from bench_recovery import descendants  # noqa: E402
WORKER = os.path.join(ROOT, "python/tests/workers/torchrun_ckpt.py")
STEPS, KILL_AT, DELAY = 100, 60, "0.05"
DEADLINE = 60


def launchers(args, ckpt):
    py = os.path.join(args.python_venv, "bin/python")
    torchrun = os.path.join(args.python_venv, "bin/torchrun")
    work = [WORKER, ckpt, str(STEPS), DELAY]
    elasticrun = os.path.join(ROOT, "target/release/elasticrun")
    ahead = ["--prestart-imports", "torch,torch.distributed,torch._dynamo"]
    return {
        "elasticrun": [elasticrun, "-np", str(args.np), "--max-restarts", "10", py] + work,
        "elasticrun-prestart": [elasticrun, "-np", str(args.np), "--max-restarts", "10"] + ahead
        + [py] + work,
        "torchrun": [torchrun, "--standalone", "--nproc_per_node", str(args.np),
                     "--max-restarts", "10"] + work,
    }


def one_round(argv):
    """Runs `argv`, kills rank 1 at step KILL_AT; the seconds from the kill
    to the restarted group's first step."""
    job = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)
    lines, lock = [], threading.Lock()

    def read():
        for line in job.stdout:
            with lock:
                lines.append((time.monotonic(), line.rstrip("\n")))

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + DEADLINE
    killed_at, pid, gap = None, None, None
    try:
        while gap is None:
            if time.monotonic() > deadline or job.poll() is not None:
                with lock:
                    said = "\n".join(l for _, l in lines[-30:])
                why = (f"it exited with {job.returncode}" if job.poll() is not None
                       else f"not within {DEADLINE} s")
                sys.exit(f"{argv[0]}: no restarted step ({why}):\n{said}")
            with lock:
                seen = list(lines)
            if pid is None:
                pid = next((int(m.group(1)) for _, l in seen
                            if (m := re.search(r"pid 1 (\d+)", l))), None)
            if killed_at is None and pid and any(re.search(rf"step {KILL_AT}(?!\d)", l) for _, l in seen):
                os.kill(pid, signal.SIGKILL)
                killed_at = time.monotonic()
            if killed_at is not None:
                # The first start after the kill that got as far as its
                # checkpoint (a restart may itself fail: its count is higher).
                resumed = next((i for i, (_, l) in enumerate(seen)
                                if re.search(r"resumed \d+ restart [1-9]", l)), None)
                if resumed is not None:
                    gap = next((t - killed_at for t, l in seen[resumed:]
                                if re.search(r"step \d+$", l)), None)
            time.sleep(0.005)
    finally:
        # torchrun starts its workers in sessions of their own: every
        # descendant, then the launcher's group.
        for p in descendants(job.pid):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(job.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        job.wait(30)
    return gap


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--python-venv", required=True)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    if not os.path.exists(os.path.join(args.python_venv, "bin/torchrun")):
        sys.exit(f"no torchrun in {args.python_venv}: give a venv with torch")
    names = ["elasticrun", "elasticrun-prestart", "torchrun"]
    gaps = {k: [] for k in names}
    failed = {k: 0 for k in names}
    for r in range(args.rounds):
        order = names[r % 3:] + names[:r % 3]
        for name in order:
            with tempfile.TemporaryDirectory() as d:
                try:
                    gap = one_round(launchers(args, os.path.join(d, "ckpt.pt"))[name])
                except SystemExit as e:
                    # Said, counted, and the next round goes on.
                    print(f"round {r + 1} {name}: FAILED: {str(e).splitlines()[0]}", flush=True)
                    failed[name] += 1
                    continue
            gaps[name].append(gap)
            print(f"round {r + 1} {name}: kill -9 to the restarted group's first step "
                  f"{gap * 1000:.0f} ms", flush=True)
    med = {k: statistics.median(v) for k, v in gaps.items() if v}
    for k, v in gaps.items():
        got = f"median {med[k] * 1000:.0f} ms, " if v else ""
        print(f"{k} -np {args.np}: {got}all {[round(g * 1000) for g in v]}, "
              f"rounds failed {failed[k]}")
    for k in ("elasticrun", "elasticrun-prestart"):
        if k in med and "torchrun" in med:
            print(f"torchrun / {k}: {med['torchrun'] / med[k]:.2f}x")


if __name__ == "__main__":
    main()
