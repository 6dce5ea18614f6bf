#!/usr/bin/env bash
# Builds the elasticrun Python package with maturin into the virtual
# environment of python/tests/env.sh (target/pyenv, made and filled if
# needed) and runs its tests, which start elasticrun jobs (ELASTICRUN_BIN,
# or target/debug/elasticrun, built here). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv="$PWD/target/pyenv"
python/tests/env.sh
(cd python && VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" maturin develop -q)
# The elasticrun binary: ELASTICRUN_BIN's (scripts/test.sh passes the one its
# test build made), or target/debug/elasticrun, built here.
if [ -z "${ELASTICRUN_BIN:-}" ]; then
    cargo build -q -p coordinator --bin elasticrun
    ELASTICRUN_BIN="$PWD/target/debug/elasticrun"
fi
ELASTICRUN_BIN="$ELASTICRUN_BIN" "$venv/bin/python" -m pytest -q python/tests "$@"
