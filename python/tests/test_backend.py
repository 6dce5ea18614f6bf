"""torch.distributed's backend "elasticrun" (python/elasticrun/torch/backend.py)."""

import os
import socket
import subprocess
import sys

import pytest

from conftest import WORKERS, rank_lines, run_job


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
