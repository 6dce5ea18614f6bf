#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs what the tests need
# beyond the Rust toolchain, then builds every test binary with the GPU path's
# feature on, clippy linting the workspace's crates as they compile, and runs
# them all (even after a failure), runs the Python package's tests, and fails
# if anything failed.
#   openssh-server, openssh-client: the ssh launch tests start a throw-away sshd
#   on 127.0.0.x (integration-tests/tests/it/ssh.rs, hierarchical.rs) and in
#   network namespaces.
#   iproute2: the multi-host elastic tests create network namespaces
#   (integration-tests/tests/it/elastic_netns.rs); they also need root
#   (CAP_NET_ADMIN) and a kernel with veth and bridge support.
#   nftables: a firewall between namespaces (integration-tests/tests/it/mixed_hosts.rs).
#   etcd-server, etcd-client: a real etcd (and etcdctl) for the tests of
#   `elasticrun serve` and self-joining workers (integration-tests/tests/it/etcd_*.rs).
#   kubernetes-validate (PyPI, with pip): deploy/kubernetes/ checked against
#   the Kubernetes API schema offline (integration-tests/tests/it/kubernetes_manifests.rs).
#   slurm-wlm, munge: a real Slurm (munged, slurmctld, slurmd started by the
#   tests on this machine) for jobs inside an allocation (integration-tests/tests/it/slurm.rs).
#   prometheus (with promtool): a real Prometheus scraping a job's metrics
#   (integration-tests/tests/it/metrics.rs).
#   chromium: a real headless browser showing the status page
#   (integration-tests/tests/it/status_page.rs).
# Once installed they must work: ELASTICRUN_REQUIRE_SSHD,
# ELASTICRUN_REQUIRE_NETNS, ELASTICRUN_REQUIRE_ETCD,
# ELASTICRUN_REQUIRE_SLURM, ELASTICRUN_REQUIRE_PROMETHEUS and
# ELASTICRUN_REQUIRE_CHROMIUM turn a test's
# "skipped: ..." for lack of them into a failure that says what is missing
# (integration-tests/src/needs.rs). A plain
# `cargo test --workspace` skips those tests instead, one line each.
# Extra arguments go to `cargo test` (e.g. `scripts/test.sh -p coordinator`).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's wall time, for reading a slow run's log.
phase_began=$SECONDS
phase() {
    echo "scripts/test.sh: $1 took $((SECONDS - phase_began)) s" >&2
    phase_began=$SECONDS
}

missing=()
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ssh >/dev/null && command -v ssh-keygen >/dev/null || missing+=(openssh-client)
command -v ip >/dev/null || missing+=(iproute2)
command -v nft >/dev/null || missing+=(nftables)
command -v etcd >/dev/null || missing+=(etcd-server)
command -v etcdctl >/dev/null || missing+=(etcd-client)
[ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && command -v srun >/dev/null || missing+=(slurm-wlm)
[ -x /usr/sbin/munged ] || missing+=(munge)
command -v prometheus >/dev/null && command -v promtool >/dev/null || missing+=(prometheus)
command -v chromium >/dev/null || missing+=(chromium)
if [ "${#missing[@]}" -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "scripts/test.sh: installing ${missing[*]}" >&2
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
if ! command -v kubernetes-validate >/dev/null; then
    if ! python3 -m pip --version >/dev/null 2>&1; then
        SUDO=""
        [ "$(id -u)" -eq 0 ] || SUDO="sudo"
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends python3-pip
    fi
    echo "scripts/test.sh: installing kubernetes-validate" >&2
    python3 -m pip install --quiet --disable-pip-version-check kubernetes-validate==1.37.0 \
        || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages kubernetes-validate==1.37.0
    hash -r
fi
phase "installing the tests' tools"
export ELASTICRUN_REQUIRE_SSHD=1
export ELASTICRUN_REQUIRE_KUBERNETES_VALIDATE=1
export ELASTICRUN_REQUIRE_NETNS=1
export ELASTICRUN_REQUIRE_ETCD=1
export ELASTICRUN_REQUIRE_SLURM=1
export ELASTICRUN_REQUIRE_PROMETHEUS=1
export ELASTICRUN_REQUIRE_CHROMIUM=1
# pip may put console scripts in ~/.local/bin.
export PATH="$PATH:$HOME/.local/bin"
# A clean build (CI's) gains nothing from incremental compilation's caches
# and spends time and disk writing them; a caller's setting wins.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
whole=0
if [ "$#" -eq 0 ]; then
    whole=1
    # The GPU path (cargo feature `cuda`, docs/gpu.md) is in the one build of
    # every test binary: cudarc loads CUDA and NCCL at run time, so this needs
    # no CUDA toolkit, and on a machine without a GPU each GPU test prints one
    # `skipped ...: no CUDA driver` line and passes. (One build instead of a
    # second one of the GPU crates with the feature: minutes of CI.)
    # The dev profile, not cargo test's own (the same settings, another
    # name): the Python package's native module below is then built on the
    # very artifacts of this build.
    set -- --workspace --features gpu/cuda,worker/cuda,elasticrun-examples/cuda --profile dev
    # Clippy lints the workspace's crates as this very build compiles them
    # (cargo's documented wrapper for workspace members, and clippy's
    # documented -Dwarnings for CI): what `cargo clippy --workspace
    # --all-targets --features ... -- -D warnings` checks, the GPU path's
    # `cuda` code included, without a second pass over every crate in check
    # mode (2 minutes of CI). Any warning, rustc's or clippy's, fails the
    # build.
    RUSTC_WORKSPACE_WRAPPER="$(rustc --print sysroot)/bin/clippy-driver"
    if [ ! -x "$RUSTC_WORKSPACE_WRAPPER" ] && command -v rustup >/dev/null; then
        rustup component add clippy
    fi
    if [ ! -x "$RUSTC_WORKSPACE_WRAPPER" ]; then
        echo "scripts/test.sh: no clippy-driver in $(rustc --print sysroot)/bin (rustup component add clippy)" >&2
        exit 1
    fi
    export RUSTC_WORKSPACE_WRAPPER
    export RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-Dwarnings"
    # Four tests at a time in each test binary, not one per core: the
    # integration tests wait on processes, etcd's leases and the network
    # (160 tests, 0.6 of a core at four at a time: 140 s against 300 s at
    # two), and the CPU-bound collectives' take no longer. A caller's
    # setting wins.
    export RUST_TEST_THREADS="${RUST_TEST_THREADS:-4}"
fi
status=0
if [ "$whole" -eq 1 ]; then
    # The Python tests' environment (PyPI's packages, 5 GB) is fetched and
    # installed beside the Rust build: it waits on the network and the disk.
    mkdir -p target
    python/tests/env.sh > target/pyenv-install.log 2>&1 &
    pyenv=$!
fi
if [ "$whole" -eq 1 ]; then
    # README's main command needs only Rust: this build runs every build
    # script of the main command's graph (and of the tests' graph around it)
    # with a `protoc` first on PATH, and as PROTOC, that fails whenever it is
    # run. The etcd client's gRPC code is generated ahead of time
    # (third_party/README.md). One build for both: a clean check of the
    # main command's graph on its own took a minute of CI.
    noprotoc="$PWD/target/no-protoc"
    rm -rf "$noprotoc" && mkdir -p "$noprotoc/bin"
    printf '#!/bin/sh\necho "protoc was run: the build of README'"'"'s main command must need only Rust" >&2\nexit 1\n' > "$noprotoc/bin/protoc"
    chmod +x "$noprotoc/bin/protoc"
    PATH="$noprotoc/bin:$PATH" PROTOC="$noprotoc/bin/protoc" cargo test --no-run --no-fail-fast "$@" || status=$?
    rm -rf "$noprotoc"
    phase "the build of every test binary"
fi
if [ "$whole" -eq 0 ]; then
    cargo test --no-fail-fast "$@" || status=$?
else
    cargo test --no-fail-fast "$@" &
    rust=$!
    # The package as users install it: its wheel (abi3; maturin checks its
    # symbols against the manylinux policy it tags it with), built by
    # maturin on this build's artifacts (the dev profile, this machine's
    # glibc: scripts/build_wheel.sh's release wheel links against glibc 2.17
    # with zig instead), into the Python tests' environment, beside the
    # tests: cargo holds no lock while the test binaries run, and the
    # extension module's features make artifacts of their own (a minute and
    # a half of CPU). At the tests' priority, not below it: the
    # documentation's check waits for it, and at `nice -n 10` it took as
    # long as the Rust tests. Should cargo build it while the tests' cargo
    # still checks what is fresh, the tests wait for it, as they did when
    # it came after them.
    wheel_ok=0
    if wait "$pyenv"; then
        pyenv_ok=1
        if wheel=$(VIRTUAL_ENV="$PWD/target/pyenv" scripts/build_wheel.sh --native --profile dev \
            2> target/wheel-build.log | tail -n 1) \
            && [[ "$wheel" == *-cp39-abi3-manylinux*_x86_64.whl || "$wheel" == *-cp39-abi3-manylinux*_aarch64.whl ]]; then
            wheel_ok=1
        fi
    else
        pyenv_ok=0
    fi
    # The crates' documentation, private items included (architecture.md
    # points into it): a broken or ambiguous link fails. rustdoc needs every
    # dependency checked anew (metadata, not this build's libraries); in this
    # build's target directory it reuses the build's procedural macros and
    # build scripts, two thirds of that work (106 s of CPU against 341 s in
    # a directory of its own). Made after the wheel (cargo lets one build at
    # a time use a target directory; the tests' cargo holds no lock while
    # its binaries run), at the lowest priority, beside the tests.
    (RUSTDOCFLAGS="-Dwarnings" nice -n 19 cargo doc "$@" --no-deps --document-private-items \
        --quiet > target/doc-check.log 2>&1) &
    docs=$!
    wait "$rust" || status=$?
    phase "the Rust tests (the wheel and the documentation's check beside them)"
    # The Python package (python/, docs/python.md), in a virtual environment
    # under target/, its tests run as elasticrun jobs started by the
    # elasticrun binary the Rust tests' build made. After the Rust tests,
    # not beside them on the two cores. (A torch DDP script's rank that
    # once aborted as its interpreter ended, "terminate called without an
    # active exception", did so after the Rust tests too: torch kept the
    # group alive into the teardown; docs/python.md says why and what ends
    # it.)
    if [ "$pyenv_ok" -eq 0 ]; then
        cat target/pyenv-install.log >&2
        echo "scripts/test.sh: the Python tests' environment could not be made" >&2
        status=1
    elif [ "$wheel_ok" -eq 1 ]; then
        ELASTICRUN_BIN="$PWD/target/debug/elasticrun" ELASTICRUN_WHEEL="$wheel" \
            python/tests/run.sh || status=1
    else
        cat target/wheel-build.log >&2
        echo "scripts/test.sh: the Python package's wheel was not built as an abi3 manylinux wheel: ${wheel:-none}" >&2
        status=1
    fi
    phase "the Python tests"
    # The documentation, waited for last: it is made at the lowest priority
    # in whatever room the tests leave.
    if ! wait "$docs"; then
        cat target/doc-check.log >&2
        echo "scripts/test.sh: cargo doc found broken documentation (see above)" >&2
        status=1
    fi
    phase "waiting for the documentation"
fi
if [ "$status" -ne 0 ]; then
    # A full disk fails builds, etcd and pip in ways that look like bugs.
    df -h . /tmp >&2 || true
fi
exit "$status"
