"""``--max-restarts``: a torch.distributed script written for torchrun,
which checkpoints and resumes, survives a ``kill -9`` of a rank by
elasticrun starting every worker again."""

import pathlib
import re
import sys
import tempfile
import time

from conftest import WORKERS, elasticrun, rank_lines, run_and_kill, run_job
from test_elastic import final_weights

STEPS = 30


def test_a_checkpointing_torchrun_script_is_restarted_and_ends_on_the_undisturbed_weights():
    out = restarted_through_a_kill([])
    assert "prestarted 1" not in out, out


def test_a_restart_runs_the_script_in_python_processes_started_ahead():
    """``--prestart-imports``: the restarted workers are processes that had
    imported torch before the failure; they end on the same weights."""
    # Long enough for the processes started ahead to be ready (2 s after
    # the start, then their imports) before the kill.
    out = restarted_through_a_kill(["--prestart-imports", "torch,torch.distributed"],
                                   ready=waiting_processes(2), steps=200)
    for rank in (0, 1):
        lines = rank_lines(out, rank)
        assert any(l.endswith("restart 0 prestarted 0") for l in lines), out
        assert any(re.search(r"restart 1 prestarted 1$", l) for l in lines), out
    # The processes still waiting when the job ended went with it.
    deadline = time.monotonic() + 10
    while bootstraps() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not bootstraps(), bootstraps()


def bootstraps():
    """The pids of Python processes started ahead that are still alive."""
    found = []
    for p in pathlib.Path("/proc").iterdir():
        try:
            if b"import json, os, runpy" in (p / "cmdline").read_bytes():
                state = (p / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(p.name)
        except OSError:
            continue
    return found


def waiting_processes(n):
    """Whether ``n`` children of elasticrun are Python processes started
    ahead (their command line holds the bootstrap) that have finished their
    imports: blocked reading their standard input (the kernel's wait
    channel, else the system call: read of fd 0 on x86-64 or arm64)."""
    def ready(pid):
        found = 0
        for p in pathlib.Path("/proc").iterdir():
            try:
                stat = (p / "stat").read_text()
                cmdline = (p / "cmdline").read_bytes()
                wchan = (p / "wchan").read_text()
                call = (p / "syscall").read_text().split()[:2]
            except (OSError, ValueError):
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            reading = "pipe" in wchan or call in (["0", "0x0"], ["63", "0x0"])
            if ppid == pid and b"runpy" in cmdline and reading:
                found += 1
        return found >= n
    return ready


def restarted_through_a_kill(options, ready=None, steps=STEPS):
    """Runs the checkpointing script under ``--max-restarts 2`` and
    ``options``, kills rank 1 at step 10, and checks the restart: it resumed
    from the checkpoint and ended on the undisturbed weights. Its stdout."""
    with tempfile.TemporaryDirectory() as d:
        quiet, _ = run_job(2, "torchrun_ckpt.py", f"{d}/quiet.pt", steps, 0)
    want = final_weights(quiet)
    with tempfile.TemporaryDirectory() as d:
        cmd = [elasticrun(), "-np", "2", "--max-restarts", "2", *options, sys.executable,
               str(WORKERS / "torchrun_ckpt.py"), f"{d}/ckpt.pt", str(steps), "0.05"]
        code, out, err, killed = run_and_kill(cmd, r"\[1\]<stdout>:pid 1 (\d+)", r"<stdout>:step 10$",
                                              ready=ready)
    assert killed and code == 0, out + err
    assert "was killed by signal 9 (SIGKILL)" in err, err
    assert "restart 1 of 2 (TORCHELASTIC_RESTART_COUNT=1)" in err, err
    resumed = [int(m) for m in re.findall(r"resumed (\d+) restart 1", "\n".join(rank_lines(out, 0)))]
    assert resumed and resumed[0] >= 10, out
    got = final_weights(out)
    assert all(abs(a - b) < 1e-5 for a, b in zip(got, want)), (got, want)
    return out
