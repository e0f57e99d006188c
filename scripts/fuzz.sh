#!/usr/bin/env bash
# Runs every fuzz target (fuzz/fuzz_targets/) for SECONDS each (default 20): first once over
# every input kept in fuzz/regressions/<target>/ (crashes found before), then fuzzing from
# the seeds fuzz_seeds writes and the corpus kept in target/fuzz-corpus/. Any crash fails
# the run; its input is saved under fuzz/artifacts/<target>/. docs/fuzzing.md says more.
set -euo pipefail
cd "$(dirname "$0")/.."
BUDGET="${1:-20}"

if ! cargo fuzz --version 2>/dev/null | grep -q "0\.13\."; then
    cargo install cargo-fuzz --version 0.13.2 --locked
fi
# cargo-fuzz passes nightly-only flags (-Zsanitizer, -Cpasses=sancov-module); the one
# stable toolchain here accepts them once told it may.
export RUSTC_BOOTSTRAP=1
export CARGO_INCREMENTAL=0
# FUZZ_OPT_LEVEL trades fuzzing speed for build time (the test script's short run uses 1).
export CARGO_PROFILE_RELEASE_OPT_LEVEL="${FUZZ_OPT_LEVEL:-3}"
FLAGS=(--sanitizer none --debug-assertions --target-dir ../target/fuzz)
CORPUS="$PWD/target/fuzz-corpus"

# The seed writer is an example of the main workspace (built with its features, as
# scripts/test.sh builds it).
cargo build --quiet --workspace --examples
target/debug/examples/fuzz_seeds "$CORPUS/seeds"
mkdir -p "$CORPUS/seeds/config_toml"
cp bootstrap/src/defaults.toml "$CORPUS/seeds/config_toml/defaults"

cd fuzz
cargo fuzz build "${FLAGS[@]}"
SUMMARY=()
for target in $(cargo fuzz list); do
    if [ -d "regressions/$target" ]; then
        cargo fuzz run "${FLAGS[@]}" "$target" "regressions/$target" -- -runs=0
    fi
    mkdir -p "$CORPUS/$target" "$CORPUS/seeds/$target"
    LOG="$CORPUS/$target.log"
    if ! cargo fuzz run "${FLAGS[@]}" "$target" "$CORPUS/$target" "$CORPUS/seeds/$target" -- \
        -max_total_time="$BUDGET" -max_len=65536 -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
        >"$LOG" 2>&1; then
        tail -n 60 "$LOG"
        echo "fuzz target $target failed; the input is under fuzz/artifacts/$target/" >&2
        exit 1
    fi
    EXECS=$(grep -o 'number_of_executed_units: [0-9]*' "$LOG" | grep -o '[0-9]*$' || echo "?")
    SUMMARY+=("$target: $EXECS executions in ${BUDGET} s, corpus $(ls "$CORPUS/$target" | wc -l) inputs")
done
printf '%s\n' "${SUMMARY[@]}"
