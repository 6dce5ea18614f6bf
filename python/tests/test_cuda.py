"""CUDA tensors (docs/python.md, "GPUs"). Everywhere: the build answers
truthfully, the NCCL the engine would use is the one torch mapped into the
process, and a CUDA collective where none can run says why. With a GPU: the
GPU checks of python/tests/gpu/ as elasticrun jobs (on a machine without one
each skips, saying so)."""

import os
import pathlib
import subprocess
import sys

import pytest
import torch

from conftest import elasticrun

GPU = pathlib.Path(__file__).resolve().parent / "gpu"


def run_python(code, env=None):
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip().splitlines()


def test_the_build_says_it_has_the_gpu_path():
    out = run_python("import elasticrun.torch as hvd; print(hvd.cuda_built(), hvd.nccl_built())")
    assert out == ["True True"]


MAPPED = """
import torch
from elasticrun import _elasticrun as n
maps = open("/proc/self/maps").read().split()
mapped = sorted({p for p in maps if p.startswith("/") and p.rsplit("/", 1)[-1].startswith("libnccl.so")})
print(mapped[0] if mapped else None)
print(n.nccl_library())
"""


def test_the_engine_uses_the_nccl_torch_mapped():
    mapped, used = run_python(MAPPED, {"ELASTICRUN_NCCL_LIBRARY": ""})
    if mapped == "None":
        # A torch without NCCL (a CPU wheel): the loader's search path only.
        assert used in ("None", "libnccl.so.2", "libnccl.so"), used
    else:
        assert used == mapped


def test_a_named_nccl_library_is_the_only_one_tried():
    mapped, used = run_python(MAPPED, {"ELASTICRUN_NCCL_LIBRARY": "/nonexistent/libnccl.so.2"})
    assert used == "None", (mapped, used)
    out = run_python("from elasticrun import _elasticrun as n; print(n.gpu_unavailable())",
                     {"ELASTICRUN_NCCL_LIBRARY": "/nonexistent/libnccl.so.2"})
    if not torch.cuda.is_available():
        assert out[0].startswith("no CUDA driver"), out
    else:
        assert "/nonexistent/libnccl.so.2" in out[0] and "ELASTICRUN_NCCL_LIBRARY" in out[0], out


def test_a_cuda_collective_where_none_can_run_says_why():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the GPU checks below run instead")
    out = run_python("""
import elasticrun.torch as hvd
try:
    hvd._cuda.check()
except hvd.ElasticrunError as e:
    print(e)
""")
    assert out == ["CUDA tensors cannot go through elasticrun here: no CUDA driver: libcuda.so could not be "
                   "loaded (no NVIDIA driver on this machine?)"], out


def gpu_job(args, timeout=240, env=None):
    if not torch.cuda.is_available():
        pytest.skip("no GPU here: run on a GPU machine (docs/gpu.md, \"Checking on a GPU machine\")")
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done.stdout


def per_process_host(tmp_path):
    """Two ranks on one GPU are two hosts to NCCL (docs/gpu.md)."""
    wrap = tmp_path / "host_per_process.sh"
    wrap.write_text('#!/bin/sh\nNCCL_HOSTID=pid-$$ exec "$@"\n')
    wrap.chmod(0o755)
    return str(wrap)


def test_every_collective_on_cuda_matches_the_cpu_path(tmp_path):
    out = gpu_job([elasticrun(), "-np", "2", per_process_host(tmp_path), sys.executable, str(GPU / "collectives.py")])
    assert "cuda collectives: ok" in out


def test_training_on_cuda_matches_training_on_cpu(tmp_path):
    out = gpu_job([elasticrun(), "-np", "2", per_process_host(tmp_path), sys.executable, str(GPU / "train.py")])
    assert "cuda training: ok" in out


def test_a_killed_rank_during_cuda_training_is_replaced(tmp_path):
    out = gpu_job([sys.executable, str(GPU / "kill.py"), per_process_host(tmp_path)],
                  env={"ELASTICRUN": elasticrun()})
    assert "cuda elastic kill: ok" in out
