"""examples/python/: the digits CNN reaches its stated accuracy data-parallel,
elastic with a worker killed, and as the torch.distributed variant."""

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

from conftest import ROOT, elasticrun, rank_lines

EXAMPLES = ROOT / "examples" / "python"
STATED = 0.95


def result(stdout):
    for line in rank_lines(stdout, 0):
        if line.startswith('{"accuracy"'):
            return json.loads(line)
    raise AssertionError(f"no result line in\n{stdout}")


def run(args, timeout=300):
    done = subprocess.run([elasticrun(), *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_data_parallel_digits_reach_the_stated_accuracy():
    out = run(["-np", "2", sys.executable, str(EXAMPLES / "digits.py")])
    r = result(out)
    assert r["accuracy"] >= STATED and r["world_size"] == 2, r


def test_the_torch_distributed_variant_runs_under_elasticrun_unchanged():
    out = run(["-np", "2", sys.executable, str(EXAMPLES / "digits_ddp.py")])
    r = result(out)
    assert r["accuracy"] >= STATED and r["world_size"] == 2, r


def test_elastic_digits_survive_a_killed_worker_and_reach_the_stated_accuracy():
    with tempfile.TemporaryDirectory() as d:
        hosts = pathlib.Path(d) / "hosts.sh"
        hosts.write_text("#!/bin/sh\necho localhost:2\n")
        hosts.chmod(0o755)
        cmd = [elasticrun(), "-np", "2", "--min-np", "1", "--max-np", "2",
               "--host-discovery-script", str(hosts), sys.executable,
               str(EXAMPLES / "digits.py"), "--elastic", "--log", "--epochs", "20"]
        job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines, errs = [], []
        readers = [threading.Thread(target=lambda: lines.extend(job.stdout), daemon=True),
                   threading.Thread(target=lambda: errs.extend(job.stderr), daemon=True)]
        for t in readers:
            t.start()
        killed, deadline = False, time.monotonic() + 300
        while job.poll() is None:
            out = "".join(lines)
            m = re.search(r"\[1\]<stdout>:pid 1 (\d+)", out)
            if m and not killed and re.search(r"<stdout>:epoch 3 ", out):
                os.kill(int(m.group(1)), signal.SIGKILL)
                killed = True
            if time.monotonic() > deadline:
                job.kill()
                raise AssertionError("the job did not finish in time:\n" + out + "".join(errs))
            time.sleep(0.01)
        for t in readers:
            t.join(10)
        out, err = "".join(lines), "".join(errs)
    assert killed and job.returncode == 0, out + err
    assert "was killed by signal 9 (SIGKILL)" in err, err
    r = result(out)
    assert r["accuracy"] >= STATED and r["epochs"] == 20, r
