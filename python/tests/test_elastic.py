"""Elastic training from Python: ``kill -9`` of a rank mid-run, and the job
finishes on the same weights as an undisturbed run."""

import json
import pathlib
import re
import sys
import tempfile

from conftest import WORKERS, elasticrun, rank_lines, run_and_kill, run_job

STEPS = 40


def final_weights(stdout):
    for line in rank_lines(stdout, 0):
        if line.startswith('{"weights"'):
            return json.loads(line)["weights"]
    raise AssertionError(f"no weights in\n{stdout}")


def kill_rank_2_at_step_10(script, steps, replacement_wait=30):
    """Runs worker ``script`` (``STEPS DELAY`` arguments, ``pid <rank>
    <pid>`` and ``step <n>`` lines) as an elastic job of 3 ranks, ``kill
    -9`` of rank 2 at step 10; its stdout and stderr once it succeeded.
    By default the survivors wait for the replacement (by default they would
    go on after 0.5 s), so that it surely joins before the last steps; with
    ``replacement_wait=0`` they go on at once, two of them."""
    with tempfile.TemporaryDirectory() as d:
        hosts = pathlib.Path(d) / "hosts.sh"
        hosts.write_text("#!/bin/sh\necho localhost:3\n")
        hosts.chmod(0o755)
        cmd = [elasticrun(), "-np", "3", "--min-np", "2", "--max-np", "3",
               "--replacement-wait", str(replacement_wait),
               "--host-discovery-script", str(hosts), sys.executable,
               str(WORKERS / script), str(steps), "0.05"]
        code, out, err, killed = run_and_kill(cmd, r"\[2\]<stdout>:pid 2 (\d+)", r"<stdout>:step 10 ")
        assert killed and code == 0, out + err
        assert "was killed by signal 9 (SIGKILL)" in err, err
    return out, err


def test_a_killed_rank_is_replaced_and_training_ends_on_the_undisturbed_weights():
    quiet, _ = run_job(2, "elastic_train.py", STEPS, 0)
    want = final_weights(quiet)
    out, err = kill_rank_2_at_step_10("elastic_train.py", STEPS)
    # The recovery line counts the steps the survivors rolled back from
    # the step they had reached (it used to say "from step 0").
    assert re.search(r"rolled back \(step [1-9]\d*", err), err
    got = final_weights(out)
    assert all(abs(a - b) < 1e-4 for a, b in zip(got, want)), (got, want)
    # The last steps ran with three ranks again (the replacement joined).
    assert re.search(rf"step {STEPS} size 3", out), out


def test_a_hot_spare_takes_a_killed_ranks_place():
    quiet, _ = run_job(2, "elastic_train.py", STEPS, 0)
    want = final_weights(quiet)
    with tempfile.TemporaryDirectory() as d:
        hosts = pathlib.Path(d) / "hosts.sh"
        hosts.write_text("#!/bin/sh\necho localhost:3\n")
        hosts.chmod(0o755)
        # Two train, the third waits inside hvd.init() as a spare; the first
        # generation waits for all three, so the spare waits before step 10.
        cmd = [elasticrun(), "-np", "2", "--min-np", "2", "--max-np", "2", "--hot-spares", "1",
               "--replacement-wait", "30", "--host-discovery-script", str(hosts),
               sys.executable, str(WORKERS / "elastic_train.py"), str(STEPS), "0.05"]
        code, out, err, killed = run_and_kill(cmd, r"\]<stdout>:pid 1 (\d+)", r"<stdout>:step 10 ")
    assert killed and code == 0, out + err
    assert "waits as a hot spare (--hot-spares)" in err, err
    assert "was killed by signal 9 (SIGKILL)" in err, err
    got = final_weights(out)
    assert all(abs(a - b) < 1e-4 for a, b in zip(got, want)), (got, want)
    assert re.search(rf"step {STEPS} size 2", out), out
    # The spare (it printed its pid once placed, as rank 1) trained.
    pids = re.findall(r"\]<stdout>:pid 1 (\d+)", out)
    assert len(set(pids)) == 2, out
