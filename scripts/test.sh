#!/usr/bin/env bash
# Runs every test of the workspace: domain unit and property tests, application tests on
# simulated storage, adapter and bootstrap tests, and the black-box suite that drives the
# real rill-server binary with Iggy's official client (iggy 0.11.0).
set -euo pipefail
cd "$(dirname "$0")/.."

# The black-box tests spawn target/debug/rill-server; build it (and everything else) first
# so no test has to.
cargo build --workspace --all-targets
cargo test --workspace --no-fail-fast
