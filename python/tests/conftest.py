"""Runs worker scripts as elasticrun jobs: ``run_job(np, "grid.py")`` starts
``elasticrun -np NP python workers/grid.py`` and returns its output. Every
job has a deadline; a job that fails, or outlives it, fails the test with
its output."""

import os
import pathlib
import subprocess
import sys

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
