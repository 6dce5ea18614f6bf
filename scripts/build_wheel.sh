#!/usr/bin/env bash
# Builds the elasticrun Python package's wheel, the file users install
# without a Rust toolchain: `pip install elasticrun-*.whl`. One wheel serves
# every CPython from 3.9 on (abi3). By default it is a release build linked
# with zig (ziglang from PyPI) against glibc 2.17, tagged manylinux2014, so
# that it installs on every Linux distribution of the last ten years; maturin
# checks the symbols it links before tagging it.
#   scripts/build_wheel.sh               release, manylinux2014 (zig)
#   scripts/build_wheel.sh --native      release, this machine's glibc
#                                         (manylinux_2_X as maturin finds it)
#   scripts/build_wheel.sh --native --profile dev   (what scripts/test.sh does)
# The wheel lands in target/wheels/; its path is the last line printed.
# maturin (and ziglang) are installed in target/wheelenv if missing; a
# VIRTUAL_ENV that has maturin is used instead.
set -euo pipefail
cd "$(dirname "$0")/.."
zig=1
profile=release
while [ "$#" -gt 0 ]; do
    case "$1" in
        --native) zig=0 ;;
        --profile) profile="$2"; shift ;;
        *) echo "scripts/build_wheel.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
env="${VIRTUAL_ENV:-}"
if [ -z "$env" ] || [ ! -x "$env/bin/maturin" ]; then
    env="$PWD/target/wheelenv"
    [ -x "$env/bin/python" ] || python3 -m venv "$env"
fi
need=()
[ -x "$env/bin/maturin" ] || need+=("maturin==1.16.0")
if [ "$zig" -eq 1 ] && ! "$env/bin/python" -m ziglang version >/dev/null 2>&1; then
    need+=("ziglang==0.17.1")
fi
if [ "${#need[@]}" -gt 0 ]; then
    "$env/bin/pip" install -q --disable-pip-version-check --no-cache-dir "${need[@]}"
fi
out="$PWD/target/wheels"
rm -f "$out"/elasticrun-*.whl
args=(build --profile "$profile" -o "$out")
if [ "$zig" -eq 1 ]; then
    # Its own target directory: zig's linker changes every artifact.
    args+=(--zig --compatibility manylinux2014)
    export CARGO_TARGET_DIR="$PWD/target/manylinux2014"
fi
(cd python && VIRTUAL_ENV="$env" PATH="$env/bin:$PATH" maturin "${args[@]}" >&2)
ls -t "$out"/elasticrun-*.whl | head -n 1
