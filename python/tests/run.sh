#!/usr/bin/env bash
# Builds the elasticrun Python package into a virtual environment
# (target/pyenv, made if missing, with maturin, numpy, pytest, scikit-learn
# and PyTorch from PyPI: about 5 GB, PyPI's torch wheel bringing CUDA's
# libraries) and
# runs its tests, which start elasticrun jobs (ELASTICRUN_BIN, or
# target/debug/elasticrun, built here). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv="$PWD/target/pyenv"
if [ ! -x "$venv/bin/python" ]; then
    if ! python3 -m venv "$venv" 2>/dev/null; then
        SUDO=""
        [ "$(id -u)" -eq 0 ] || SUDO="sudo"
        echo "python/tests/run.sh: installing python3-venv" >&2
        $SUDO apt-get update -q
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends python3-venv
        rm -rf "$venv"
        python3 -m venv "$venv"
    fi
fi
"$venv/bin/pip" install -q --disable-pip-version-check "maturin==1.16.0" "numpy>=1.21" pytest "torch>=2.1" scikit-learn
(cd python && VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" maturin develop -q)
# The elasticrun binary: ELASTICRUN_BIN's (scripts/test.sh passes the one its
# test build made), or target/debug/elasticrun, built here.
if [ -z "${ELASTICRUN_BIN:-}" ]; then
    cargo build -q -p coordinator --bin elasticrun
    ELASTICRUN_BIN="$PWD/target/debug/elasticrun"
fi
ELASTICRUN_BIN="$ELASTICRUN_BIN" "$venv/bin/python" -m pytest -q python/tests "$@"
