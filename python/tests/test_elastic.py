"""Elastic training from Python: ``kill -9`` of a rank mid-run, and the job
finishes on the same weights as an undisturbed run."""

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

from conftest import WORKERS, elasticrun, run_job, rank_lines

STEPS = 40


def final_weights(stdout):
    for line in rank_lines(stdout, 0):
        if line.startswith('{"weights"'):
            return json.loads(line)["weights"]
    raise AssertionError(f"no weights in\n{stdout}")


def test_a_killed_rank_is_replaced_and_training_ends_on_the_undisturbed_weights():
    quiet, _ = run_job(2, "elastic_train.py", STEPS, 0)
    want = final_weights(quiet)
    with tempfile.TemporaryDirectory() as d:
        hosts = pathlib.Path(d) / "hosts.sh"
        hosts.write_text("#!/bin/sh\necho localhost:3\n")
        hosts.chmod(0o755)
        cmd = [elasticrun(), "-np", "3", "--min-np", "2", "--max-np", "3",
               "--host-discovery-script", str(hosts), sys.executable,
               str(WORKERS / "elastic_train.py"), str(STEPS), "0.05"]
        job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines, errs = [], []
        readers = [threading.Thread(target=lambda: lines.extend(job.stdout), daemon=True),
                   threading.Thread(target=lambda: errs.extend(job.stderr), daemon=True)]
        for t in readers:
            t.start()
        victim, killed, deadline = None, False, time.monotonic() + 180
        while job.poll() is None:
            out = "".join(lines)
            if victim is None:
                m = re.search(r"\[2\]<stdout>:pid 2 (\d+)", out)
                victim = int(m.group(1)) if m else None
            if victim and not killed and re.search(r"<stdout>:step 10 ", out):
                os.kill(victim, signal.SIGKILL)
                killed = True
            if time.monotonic() > deadline:
                job.kill()
                raise AssertionError("the job did not finish in time:\n" + out + "".join(errs))
            time.sleep(0.01)
        for t in readers:
            t.join(10)
        out, err = "".join(lines), "".join(errs)
        assert killed, out + err
        assert job.returncode == 0, out + err
        assert "was killed by signal 9 (SIGKILL)" in err, err
    got = final_weights(out)
    assert all(abs(a - b) < 1e-4 for a, b in zip(got, want)), (got, want)
    # The last steps ran with three ranks again (the replacement joined).
    assert re.search(rf"step {STEPS} size 3", out), out
