"""torch.distributed's backend "elasticrun" (python/elasticrun/torch/backend.py)."""

import os
import re
import socket
import subprocess
import sys

import pytest

from conftest import WORKERS, rank_lines, run_job
from test_elastic import final_weights, kill_rank_2_at_step_10


@pytest.mark.parametrize("np_", [2, 3])
def test_every_collective_and_type_matches_gloo(np_):
    out, _ = run_job(np_, "c10d_collectives.py", timeout=240)
    for r in range(np_):
        lines = [l for l in rank_lines(out, r) if l.startswith("OK ")]
        assert lines and int(lines[0].split()[2]) > 150, out


@pytest.mark.parametrize("np_", [1, 2, 3])
def test_ddp_on_elasticrun_trains_to_the_weights_of_one_process(np_):
    out, _ = run_job(np_, "c10d_ddp.py")
    for r in range(np_):
        assert "OK" in " ".join(rank_lines(out, r)), out


def test_a_program_not_started_by_elasticrun_is_told_how_to_start_it():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELASTICRUN_")}
    env.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    done = subprocess.run([sys.executable, str(WORKERS / "c10d_ddp.py")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0, done.stdout
    assert "programs started by elasticrun" in done.stderr, done.stderr
    assert "elasticrun -np 2 python train.py" in done.stderr, done.stderr


@pytest.mark.parametrize("np_", [2, 3])
def test_fsdp2_on_elasticrun_trains_to_the_weights_of_one_process(np_):
    out, _ = run_job(np_, "c10d_fsdp.py")
    for r in range(np_):
        assert "OK" in " ".join(rank_lines(out, r)), out


def test_elastic_ddp_through_a_killed_rank_ends_on_the_undisturbed_weights():
    steps = 40
    quiet, _ = run_job(2, "elastic_ddp.py", steps, 0)
    want = final_weights(quiet)
    out, _ = kill_rank_2_at_step_10("elastic_ddp.py", steps)
    got = final_weights(out)
    assert all(abs(a - b) < 1e-4 for a, b in zip(got, want)), (got, want)
    # The last steps ran with three ranks again: the replacement joined a
    # process group made for the new world.
    assert re.search(rf"step {steps} size 3", out), out


def test_elastic_fsdp2_through_a_killed_rank_ends_on_the_undisturbed_weights():
    steps = 30
    quiet, _ = run_job(2, "elastic_fsdp.py", steps, 0)
    want = final_weights(quiet)
    assert len(want) == 97, want
    # The survivors wait for the replacement: the model is sharded again on
    # a new mesh of three, the newcomer given rank 0's committed state.
    out, _ = kill_rank_2_at_step_10("elastic_fsdp.py", steps)
    got = final_weights(out)
    assert all(abs(a - b) < 1e-4 for a, b in zip(got, want)), (got, want)
    assert re.search(rf"step {steps} size 3", out), out
    # They go on at once: sharded again for two (the model, and Adam's
    # state, restored from the commit and cut in halves instead of thirds).
    out, _ = kill_rank_2_at_step_10("elastic_fsdp.py", steps, replacement_wait=0)
    got = final_weights(out)
    assert all(abs(a - b) < 1e-4 for a, b in zip(got, want)), (got, want)
    assert re.search(r"step \d+ size 2", out), out


@pytest.mark.parametrize("spec,cpu_backend", [("cpu:gloo,cuda:elasticrun", "ProcessGroupGloo"),
                                              ("cpu:elasticrun,cuda:gloo", "ElasticrunBackend")])
def test_a_backend_per_device_type_mixes_with_gloo(spec, cpu_backend):
    out, _ = run_job(2, "c10d_mixed.py", spec)
    for r in range(2):
        assert f"OK {r} 3.0 {cpu_backend}" in " ".join(rank_lines(out, r)), out


def test_an_older_torch_is_told_which_version_the_backend_needs():
    code = ("import torch\n"
            "torch.__version__ = '2.13.1+cpu'\n"
            "from elasticrun.torch import backend\n"
            "try:\n"
            "    backend.register()\n"
            "except RuntimeError as e:\n"
            "    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "needs torch 2.14 or newer (this is 2.13.1+cpu)" in done.stdout, done.stdout
