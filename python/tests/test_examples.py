"""examples/python/: the digits CNN reaches its stated accuracy data-parallel,
elastic with a worker killed, and as the torch.distributed variant."""

import json
import pathlib
import subprocess
import sys
import tempfile

from conftest import ROOT, elasticrun, rank_lines, run_and_kill

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
        code, out, err, killed = run_and_kill(cmd, r"\[1\]<stdout>:pid 1 (\d+)", r"<stdout>:epoch 3 ")
    assert killed and code == 0, out + err
    assert "was killed by signal 9 (SIGKILL)" in err, err
    r = result(out)
    assert r["accuracy"] >= STATED and r["epochs"] == 20, r
