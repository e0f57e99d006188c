# Rill's menu of tasks. `just --list` shows them, one line each; the comments above a recipe
# say more. The test script installs `just` (`cargo install just --locked`) when missing.

# Start the server on the embedded defaults (root user iggy/iggy).
[doc("Start the server on the embedded defaults (root user iggy/iggy)")]
run:
    cargo run --release --bin rill-server -- --with-default-root-credentials

# Every test, exactly as CI runs it.
[doc("Every test, exactly as CI runs it (scripts/test.sh)")]
test:
    bash scripts/test.sh

# Clippy with warnings as errors.
[doc("Clippy over the workspace with warnings as errors")]
lint:
    cargo clippy --workspace --all-targets -- -D warnings

[doc("Format every crate")]
fmt:
    cargo fmt --all

# Deterministic simulation of VSR clusters (release build). `just sim` runs SEEDS seeds
# (default 50000, about three minutes on 2 cores); `just sim <seed>` replays one seed.
[doc("VSR cluster simulation in release: SEEDS seeds, or replay one SEED")]
sim SEED="" SEEDS="50000":
    if [ -n "{{SEED}}" ]; then VSR_SEED={{SEED}} cargo test --release -p rill-simulation --test vsr_sim random_clusters -- --nocapture; else VSR_SEEDS={{SEEDS}} cargo test --release -p rill-simulation --test vsr_sim -- --nocapture; fi

# The same simulation of partition groups (offsets assigned at apply, consumer offsets, their
# checks): SEEDS seeds (default 100000), or replay one SEED.
[doc("Partition-group VSR simulation in release: SEEDS seeds, or replay one SEED")]
sim-groups SEED="" SEEDS="100000":
    if [ -n "{{SEED}}" ]; then VSR_SEED={{SEED}} cargo test --release -p rill-simulation --test vsr_sim partition_groups -- --nocapture; else PARTITION_SEEDS={{SEEDS}} cargo test --release -p rill-simulation --test vsr_sim partition_groups -- --nocapture; fi

# A three-node cluster with replicated partitions next to one node on the same send
# workload, release builds on loopback, then the failover time (docs/vsr.md).
cluster-bench:
    bash scripts/cluster-bench.sh

# kill -9 under load in a loop against the release server, checked against a ledger of
# acknowledged messages (docs/testing.md). `just crash-loop 50 <seed>` fixes the kill moments.
[doc("kill -9 the release server under load CYCLES times, checked against a ledger")]
crash-loop CYCLES="1000" SEED="":
    cargo build --release -p rill-bootstrap --bin rill-server
    RILL_SERVER_BIN="$PWD/target/release/rill-server" CRASH_LOOP_CYCLES={{CYCLES}} CRASH_LOOP_SEED={{SEED}} cargo test --workspace --test blackbox crash_loop -- --nocapture

# Every fuzz target (fuzz/, libFuzzer through cargo-fuzz) for SECONDS each, after the kept
# regression inputs; the corpus grows in target/fuzz-corpus/ from run to run.
[doc("Every fuzz target for SECONDS each, after the kept regression inputs")]
fuzz SECONDS="300":
    bash scripts/fuzz.sh {{SECONDS}}

# A long mixed load (sends, polls, stored offsets, group members joining and leaving, clients
# coming and going) on the release server, a line of RSS, descriptors, pool buffers in use
# and send p99 per minute, then the RSS slope.
[doc("Mixed load on the release server for MINUTES, with RSS, fds, pool and p99 per minute")]
soak MINUTES="30":
    cargo build --release -p rill-bootstrap -p rill-tests --bin rill-server --bin rill-soak
    ./target/release/rill-soak --minutes {{MINUTES}}

# The seeded partition simulation (appends, flushes, offsets, rolls, retention, restarts,
# power loss, storage faults) in release: SEEDS seeds, or one seed with a trace.
[doc("Partition write-path simulation in release: SEEDS seeds, or replay one SEED")]
sim-partition SEED="" SEEDS="200000":
    if [ -n "{{SEED}}" ]; then SIM_PARTITION_SEED={{SEED}} SIM_PARTITION_TRACE=1 cargo test --workspace --release --test partition_sim seeded -- --nocapture; else SIM_PARTITION_SEEDS={{SEEDS}} cargo test --workspace --release --test partition_sim seeded -- --nocapture; fi

# The seeded simulation of whole shards (requests interleaved by a seeded executor, rolls,
# retention, failed writes, restarts, power loss) in release: SEEDS seeds, or one with a trace.
[doc("Whole-shard simulation in release: SEEDS seeds, or replay one SEED with a trace")]
sim-shard SEED="" SEEDS="20000":
    if [ -n "{{SEED}}" ]; then SIM_SHARD_SEED={{SEED}} SIM_SHARD_TRACE=1 cargo test --workspace --release --test shard_sim seeded -- --nocapture; else SIM_SHARD_SEEDS={{SEEDS}} cargo test --workspace --release --test shard_sim seeded -- --nocapture; fi

# Dependency edges, `//!` headers and file sizes.
[doc("Dependency edges, //! headers and file sizes")]
tidy:
    cargo test --workspace --test tidy

# Release-mode benchmark through the official client: 2 producers, 1,000-message batches
# of 1 KB to 2 streams, then 2 consumers reading everything back. Extra flags pass through
# (e.g. `just bench --persisted`). Runs once against 1 shard and once against 2.
[doc("Release benchmark through the official client, on 1 shard and on 2")]
bench *FLAGS:
    cargo build --release -p rill-bootstrap -p rill-tests --bin rill-server --bin rill-bench
    ./target/release/rill-bench --shards 1 {{FLAGS}}
    ./target/release/rill-bench --shards 2 {{FLAGS}}

# The same scenario through both protocol generations' official clients, each run on a
# fresh release server: iggy 0.11.0, iggy 0.11.1-edge.9 (0.12), and 0.12 with idempotent
# producers, alternating for ROUNDS rounds; medians with server and client CPU seconds.
[doc("The benchmark through the 0.11 and the 0.12 client, medians of fresh-server runs")]
bench-generations *FLAGS:
    bash scripts/bench-generations.sh {{FLAGS}}

# The same scenario over each client transport, on the default shard count: tcp, tcp-tls,
# quic, websocket and http.
[doc("The benchmark over tcp, tcp-tls, quic, websocket and http")]
bench-transports *FLAGS:
    cargo build --release -p rill-bootstrap -p rill-tests --bin rill-server --bin rill-bench
    for transport in tcp tcp-tls quic websocket http; do RILL_TEST_TRANSPORT=$transport ./target/release/rill-bench {{FLAGS}}; done

# The shard bus on its own: requests per second through one crossing and back, one call in
# flight and 32, on the inbox loop and on a task per request for comparison.
[doc("Requests per second through one shard-to-shard crossing")]
bench-bus:
    cargo build --release -p rill-adapter-bus-crossfire --example bus_hop
    for flight in 1 32; do ./target/release/examples/bus_hop --in-flight $flight --requests 200000; ./target/release/examples/bus_hop --spawn --in-flight $flight --requests 200000; done

[doc("Lint, tidy, then every test")]
ci: lint tidy test

# The web console's end-to-end tests in headless Chromium, saving the overview, message-browser
# and consumer-group-lag screenshots to docs/console/ (docs/console.md).
[doc("Console tests in headless Chromium, screenshots written to docs/console/")]
console-screenshots:
    cargo build --workspace --bins
    RILL_CONSOLE_SCREENSHOTS=docs/console cargo test --workspace --test console -- --nocapture
