#!/usr/bin/env bash
# Both protocol generations' official clients against one release server: rill-bench (iggy
# 0.11.0) and rill-edge-bench (iggy 0.11.1-edge.9) run the same scenario one after the
# other, then rill-edge-bench again with idempotent producers. Flags pass to all three
# (e.g. `--batches 200`).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p rill-bootstrap -p rill-tests --bin rill-server --bin rill-bench
CARGO_TARGET_DIR="$PWD/target" cargo build --release --manifest-path tests/edge/Cargo.toml --bin rill_edge_bench

DATA="$(mktemp -d)"
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
IGGY_SYSTEM_PATH="$DATA" IGGY_TCP_ADDRESS="127.0.0.1:$PORT" IGGY_HTTP_ENABLED=false IGGY_QUIC_ENABLED=false \
    IGGY_WEBSOCKET_ENABLED=false ./target/release/rill-server --with-default-root-credentials >"$DATA/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; rm -rf "$DATA"' EXIT
for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then break; fi
    sleep 0.1
done
./target/release/rill-bench --address "127.0.0.1:$PORT" "$@"
./target/release/rill_edge_bench --address "127.0.0.1:$PORT" --prefix edge "$@"
./target/release/rill_edge_bench --address "127.0.0.1:$PORT" --prefix idempotent --idempotent "$@"
