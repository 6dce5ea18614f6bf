#!/usr/bin/env bash
# Makes the virtual environment the Python package's tests run in
# (target/pyenv, made if missing) and installs into it what they need from
# PyPI: maturin, numpy, pytest, scikit-learn and PyTorch (about 5 GB, PyPI's
# torch wheel bringing CUDA's libraries). Run by python/tests/run.sh, and by
# scripts/test.sh at its start, beside the Rust build, since it waits on the
# network and the disk rather than the CPU. Installs nothing already there,
# and keeps no copy of the downloaded wheels (pip's cache would hold another
# 3.5 GB of them on a machine whose disk the build already fills).
# ELASTICRUN_PYENV names another environment and ELASTICRUN_TORCH another
# torch (`ELASTICRUN_PYENV=target/pyenv-2.14 ELASTICRUN_TORCH=torch==2.14.1
# python/tests/run.sh python/tests/test_backend.py`: the backend on torch 2.14).
set -euo pipefail
cd "$(dirname "$0")/../.."
venv="$(realpath -m "${ELASTICRUN_PYENV:-target/pyenv}")"
if [ ! -x "$venv/bin/python" ]; then
    if ! python3 -m venv "$venv" 2>/dev/null; then
        SUDO=""
        [ "$(id -u)" -eq 0 ] || SUDO="sudo"
        echo "python/tests/env.sh: installing python3-venv" >&2
        $SUDO apt-get update -q
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends python3-venv
        rm -rf "$venv"
        python3 -m venv "$venv"
    fi
fi
"$venv/bin/pip" install -q --disable-pip-version-check --no-cache-dir "maturin==1.16.0" "numpy>=1.21" pytest "${ELASTICRUN_TORCH:-torch>=2.1}" scikit-learn
