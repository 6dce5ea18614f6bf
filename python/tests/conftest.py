"""Runs worker scripts as elasticrun jobs: ``run_job(np, "grid.py")`` starts
``elasticrun -np NP python workers/grid.py`` and returns its output. Every
job has a deadline; a job that fails, or outlives it, fails the test with
its output."""

import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORKERS = pathlib.Path(__file__).resolve().parent / "workers"


def elasticrun():
    path = pathlib.Path(os.environ.get("ELASTICRUN_BIN", ROOT / "target" / "debug" / "elasticrun"))
    if not path.exists():
        pytest.fail(f"no elasticrun binary at {path}: build it (cargo build -p coordinator) or set ELASTICRUN_BIN")
    return str(path)


def run_job(np, script, *args, expect=0, timeout=120, extra=()):
    cmd = [elasticrun(), "-np", str(np), *extra, sys.executable, str(WORKERS / script), *map(str, args)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{' '.join(cmd)} did not finish within {timeout} s\nstdout:\n{e.stdout}\nstderr:\n{e.stderr}")
    if done.returncode != expect:
        pytest.fail(
            f"{' '.join(cmd)} exited {done.returncode}, not {expect}\n"
            f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
        )
    return done.stdout, done.stderr


def rank_lines(stdout, rank):
    """What rank ``rank`` printed, without elasticrun's prefix."""
    prefix = f"[{rank}]<stdout>:"
    return [l[len(prefix):] for l in stdout.splitlines() if l.startswith(prefix)]


def run_and_kill(cmd, victim, trigger, timeout=300, ready=None):
    """Runs ``cmd`` (an elasticrun command line), and once its output has
    matched both ``victim`` (a pattern whose group 1 is a pid) and
    ``trigger`` (and ``ready(pid of elasticrun)`` says so, if given), kills
    that pid with SIGKILL; waits for the job, within ``timeout`` seconds.
    Returns (exit code, stdout, stderr, whether the kill happened)."""
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines, errs = [], []
    readers = [threading.Thread(target=lambda: lines.extend(job.stdout), daemon=True),
               threading.Thread(target=lambda: errs.extend(job.stderr), daemon=True)]
    for t in readers:
        t.start()
    killed, deadline = False, time.monotonic() + timeout
    while job.poll() is None:
        out = "".join(lines)
        m = re.search(victim, out, re.M)
        if m and not killed and re.search(trigger, out, re.M) and (ready is None or ready(job.pid)):
            os.kill(int(m.group(1)), signal.SIGKILL)
            killed = True
        if time.monotonic() > deadline:
            job.kill()
            pytest.fail("the job did not finish in time:\n" + out + "".join(errs))
        time.sleep(0.01)
    for t in readers:
        t.join(10)
    return job.returncode, "".join(lines), "".join(errs), killed
