#!/usr/bin/env bash
# Both protocol generations' official clients against the release server: rill-bench (iggy
# 0.11.0), rill-edge-bench (iggy 0.11.1-edge.9, protocol 0.12) and rill-edge-bench with
# idempotent producers. Each run gets a fresh server and data directory, so no client inherits
# another's page cache, dirty pages or segments; the three alternate for ROUNDS rounds
# (default 3) and the summary gives each one's medians, the first round left out as warm-up
# when there are more than two. Every run also reports the server's and the client's CPU
# seconds, which tell a server-side cost from a client library's. Flags pass to every client
# (e.g. `--batches 200`); BENCH_DATA_DIR puts the data directories elsewhere (a tmpfs such as
# /dev/shm takes the disk out of the comparison).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p rill-bootstrap -p rill-tests --bin rill-server --bin rill-bench
CARGO_TARGET_DIR="$PWD/target" cargo build --release --manifest-path tests/edge/Cargo.toml --bin rill_edge_bench

ROUNDS="${ROUNDS:-3}"
TICKS="$(getconf CLK_TCK)"
RESULTS="$(mktemp)"
SERVER=""
DATA=""
cleanup() {
    if [ -n "$SERVER" ]; then kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; fi
    if [ -n "$DATA" ]; then rm -rf "$DATA"; fi
}
trap 'cleanup; rm -f "$RESULTS"' EXIT

# One client's run against a fresh server: its output, then one `result` line.
run() {
    local client="$1"
    shift
    DATA="$(mktemp -d "${BENCH_DATA_DIR:-${TMPDIR:-/tmp}}/rill-bench-generations.XXXXXX")"
    local port
    port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    IGGY_SYSTEM_PATH="$DATA" IGGY_TCP_ADDRESS="127.0.0.1:$port" IGGY_HTTP_ENABLED=false IGGY_QUIC_ENABLED=false \
        IGGY_WEBSOCKET_ENABLED=false ./target/release/rill-server --with-default-root-credentials >"$DATA/server.log" 2>&1 &
    SERVER=$!
    for _ in $(seq 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
        sleep 0.1
    done
    local output
    case "$client" in
        0.11) set -- ./target/release/rill-bench --address "127.0.0.1:$port" "$@" ;;
        0.12) set -- ./target/release/rill_edge_bench --address "127.0.0.1:$port" --prefix edge "$@" ;;
        0.12-idempotent)
            set -- ./target/release/rill_edge_bench --address "127.0.0.1:$port" --prefix idempotent --idempotent "$@"
            ;;
    esac
    # bash's `time` reports the client's own user and system seconds.
    output="$({ TIMEFORMAT='client-cpu %U %S'; time "$@"; } 2>&1)"
    echo "$output" | grep -v "^client-cpu" || true
    local server_ticks
    server_ticks="$(awk '{print $14 + $15}' "/proc/$SERVER/stat")"
    cleanup
    SERVER=""
    DATA=""
    echo "$output" | awk -v client="$client" -v ticks="$server_ticks" -v hz="$TICKS" '
        $1 == "send" { send = $4; send_p99 = $15 }
        $1 == "poll" { poll = $4; poll_p99 = $15 }
        $1 == "client-cpu" { cpu = $2 + $3 }
        END { printf "result %s %s %s %s %s %.2f %.2f\n", client, send, send_p99, poll, poll_p99, cpu, ticks / hz }' |
        tee -a "$RESULTS"
}

for round in $(seq "$ROUNDS"); do
    for client in 0.11 0.12 0.12-idempotent; do
        run "$client" "$@"
        sed -i "\$s/\$/ $round/" "$RESULTS"
    done
done

python3 - "$RESULTS" "$ROUNDS" <<'EOF'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
rounds = int(sys.argv[2])
kept = [row for row in rows if rounds <= 2 or int(row[-1]) > 1]
print(f"medians over {len(kept) // 3} round(s) per client, fresh server each run")
print(f"{'client':<16}{'send MB/s':>10}{'p99 ms':>8}{'poll MB/s':>10}{'p99 ms':>8}{'client s':>9}{'server s':>9}")
base = None
for client in ("0.11", "0.12", "0.12-idempotent"):
    runs = [[float(x) for x in row[2:8]] for row in kept if row[1] == client]
    median = [statistics.median(column) for column in zip(*runs)]
    base = base or median
    print(f"{client:<16}{median[0]:>10.0f}{median[1]:>8.2f}{median[2]:>10.0f}{median[3]:>8.2f}{median[4]:>9.2f}{median[5]:>9.2f}"
          f"   vs 0.11: send {median[0] / base[0]:.2f}x poll {median[2] / base[2]:.2f}x server CPU {median[5] / base[5]:.2f}x")
EOF
