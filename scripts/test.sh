#!/usr/bin/env bash
# Runs every test of the workspace: domain unit and property tests, application tests on
# simulated storage, adapter and bootstrap tests, and the black-box suite that drives the
# real rill-server binary with Iggy's official client (iggy 0.11.0).
set -euo pipefail
cd "$(dirname "$0")/.."

# Incremental caches only pay off across edits; a one-shot run would only fill the disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# The official CLI is one of the compatibility judges (tests/tests/blackbox/cli.rs).
CLI="${CARGO_HOME:-$HOME/.cargo}/bin/iggy"
# An unoptimised build without debug info takes half the time of a release one, and the
# tests only run a few of its commands.
if ! "$CLI" --version 2>/dev/null | grep -q "0\.14\.0"; then
    CARGO_PROFILE_DEV_DEBUG=0 cargo install iggy-cli --version 0.14.0 --locked --debug
fi
# The 0.12 line's CLI (tests/edge/tests/edge/cli.rs) installs under a root of its own: both
# are called `iggy`.
EDGE_CLI="${CARGO_HOME:-$HOME/.cargo}/iggy-edge/bin/iggy"
if ! "$EDGE_CLI" --version 2>/dev/null | grep -q "0\.14\.1-edge\.7"; then
    CARGO_PROFILE_DEV_DEBUG=0 cargo install iggy-cli --version 0.14.1-edge.7 --locked --debug \
        --root "${CARGO_HOME:-$HOME/.cargo}/iggy-edge"
fi

# The README's recipes run through `just`; install it once, and check that the menu parses
# and that every recipe says what it does in `just --list`. PyPI's rust-just wheel is the
# same release built for this platform: seconds to install instead of a two-minute build.
if ! command -v just >/dev/null 2>&1 && ! [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/just" ]; then
    python3 -m pip install --quiet rust-just==1.59.0
    mkdir -p "${CARGO_HOME:-$HOME/.cargo}/bin"
    ln -sf "$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')/just" \
        "${CARGO_HOME:-$HOME/.cargo}/bin/just"
fi
JUST="$(command -v just || echo "${CARGO_HOME:-$HOME/.cargo}/bin/just")"
if "$JUST" --list --list-heading '' | grep -v '#'; then
    echo "just recipes without a one-line doc (above)" >&2
    exit 1
fi

# The `numa` build of the pinning adapter links libhwloc; hwlocality-sys asks pkg-config for
# hwloc's static link flags, which add `-ludev`, so libudev's development files are needed too.
if ! pkg-config --exists hwloc libudev 2>/dev/null; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update
    $SUDO apt-get install -y libhwloc-dev libudev-dev pkg-config
fi

# The official Python SDK (apache-iggy 0.9.0, wrapping the 0.11 Rust SDK) is a judge too:
# tests/python/ scripts run from the black-box suite.
if ! python3 -c "import importlib.metadata as m, sys; sys.exit(m.version('apache-iggy') != '0.9.0')" 2>/dev/null; then
    python3 -m pip install --quiet apache-iggy==0.9.0
fi

# The web console's end-to-end tests (tests/tests/console/) drive Debian's headless Chromium
# through its chromedriver.
if ! [ -x /usr/bin/chromium ] || ! [ -x /usr/bin/chromedriver ]; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update
    $SUDO apt-get install -y chromium chromium-driver
fi

# The black-box tests spawn target/debug/rill-server; build it (and everything else) first
# so no test has to.
cargo build --workspace --all-targets
cargo test --workspace --no-fail-fast
# The protocol 0.12 judges (`iggy` 0.11.1-edge.9) are a workspace of their own
# (tests/edge/Cargo.toml says why); they drive the same target/debug/rill-server.
CARGO_TARGET_DIR="$PWD/target" cargo test --manifest-path tests/edge/Cargo.toml --no-fail-fast
# The console's time to first render at a thousand streams and a million messages.
cat target/console-screenshots/render-times.txt 2>/dev/null || true
# Every later run keeps `--workspace` and picks targets with `--test`/`--lib`: selecting a
# package with `-p` resolves its dependencies' features apart from the workspace's, which
# would build the whole dependency graph a second time (gigabytes of disk for nothing).
cargo test --workspace --features rill-adapter-pinning/numa --lib --no-fail-fast

# The black-box suite is one test binary (tests/tests/blackbox/), one module per area.
BLACKBOX="--test blackbox"

# The default run above uses cpu_allocation = "all" (one shard per core). Run the black-box
# suite again against one shard and against three (more shards than this 2-core machine
# has cores, so unpinned), which places connections and partitions on different shards.
# The cluster tests start their nodes with shard counts of their own, so one run of them is
# enough.
OWN_SHARDS="--skip cluster --skip partition_group --skip replica_plane --skip group_membership"
RILL_TEST_SHARDS=1 cargo test --workspace $BLACKBOX --no-fail-fast -- $OWN_SHARDS
RILL_TEST_SHARDS=3 cargo test --workspace $BLACKBOX --no-fail-fast -- $OWN_SHARDS

# The foundation suite once more over every other client transport: the official client
# speaks QUIC, WebSocket, TLS-wrapped TCP and the HTTP REST API to the same server code.
FOUNDATION="messages:: streams_topics:: offsets:: system:: restart::"
for transport in quic websocket tcp-tls http; do
    RILL_TEST_TRANSPORT=$transport cargo test --workspace $BLACKBOX --no-fail-fast -- $FOUNDATION
done

# The soak program for 20 s against the debug server, so `just soak` keeps working.
target/debug/rill-soak --seconds 20 --interval 5 2>/dev/null

# The deterministic VSR simulator in release mode for a fixed budget (about three minutes
# here): clusters of 1, 3 and 5 replicas under seeded network, storage and crash faults, of
# the counters model and of partition groups (about a minute more).
# A failing seed prints itself and `just sim <seed>` to replay it.
VSR_SEEDS=50000 PARTITION_SEEDS=20000 cargo test --release -p rill-simulation --test vsr_sim -- --nocapture

# Every fuzz target for 20 s from the seeds and the regression inputs (scripts/fuzz.sh;
# `just fuzz SECONDS` runs longer). A crash fails the run and leaves its input under
# fuzz/artifacts/.
# Built at opt-level 1 here: two thirds of the build time, about two thirds of the speed.
FUZZ_OPT_LEVEL=1 bash scripts/fuzz.sh 20
