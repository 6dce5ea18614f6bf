#!/usr/bin/env bash
# Builds the elasticrun Python package with maturin into the virtual
# environment of python/tests/env.sh (target/pyenv, or ELASTICRUN_PYENV, made
# and filled if needed; ELASTICRUN_WHEEL instead names a wheel to install, and
# ELASTICRUN_EXTENSION a native module cargo built) and
# runs its tests, which start elasticrun jobs (ELASTICRUN_BIN, or
# target/debug/elasticrun, built here). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv="$(realpath -m "${ELASTICRUN_PYENV:-target/pyenv}")"
python/tests/env.sh
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [ -n "${ELASTICRUN_WHEEL:-}" ]; then
    # The package as users install it: the wheel scripts/build_wheel.sh made.
    rm -f "$site/elasticrun.pth"
    "$venv/bin/pip" install -q --disable-pip-version-check --no-cache-dir \
        --force-reinstall --no-deps "$ELASTICRUN_WHEEL"
elif [ -n "${ELASTICRUN_EXTENSION:-}" ]; then
    # The native module cargo already built (scripts/test.sh: its one build
    # of the workspace), installed as `maturin develop` installs it: beside
    # the package's Python files, which a .pth file puts on the path.
    cp "$ELASTICRUN_EXTENSION" python/elasticrun/_elasticrun.abi3.so
    echo "$PWD/python" > "$site/elasticrun.pth"
else
    (cd python && VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" maturin develop -q)
fi
# The elasticrun binary: ELASTICRUN_BIN's (scripts/test.sh passes the one its
# test build made), or target/debug/elasticrun, built here.
if [ -z "${ELASTICRUN_BIN:-}" ]; then
    cargo build -q -p coordinator --bin elasticrun
    ELASTICRUN_BIN="$PWD/target/debug/elasticrun"
fi
# PYTHONFAULTHANDLER: a worker killed by a fatal signal (SIGABRT, SIGSEGV)
# prints every thread's Python stack first, into the failing test's output.
ELASTICRUN_BIN="$ELASTICRUN_BIN" PYTHONFAULTHANDLER=1 "$venv/bin/python" -m pytest -q python/tests "$@"
