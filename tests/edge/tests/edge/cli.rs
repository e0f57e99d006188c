//! The official CLI of the 0.12 line (`iggy` from crate iggy-cli 0.14.1-edge.7) against
//! rill-server: the everyday commands of a user who follows Iggy's current release.
//! `scripts/test.sh` installs it under `$CARGO_HOME/iggy-edge`; `IGGY_EDGE_CLI_BIN` names
//! another copy.

use std::path::{Path, PathBuf};
use std::process::Command;

use rill_edge_tests::TestServer;

fn cli_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("IGGY_EDGE_CLI_BIN") {
        return PathBuf::from(path);
    }
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
        .expect("HOME or CARGO_HOME is set");
    let installed = home.join("iggy-edge/bin/iggy");
    assert!(
        installed.is_file(),
        "{} is missing: install it with `cargo install iggy-cli --version 0.14.1-edge.7 --locked --root $CARGO_HOME/iggy-edge` (scripts/test.sh does)",
        installed.display()
    );
    installed
}

/// Runs one CLI command as root; its stdout and whether it succeeded.
fn run(server: &TestServer, home: &Path, args: &[&str]) -> (String, bool) {
    let output = Command::new(cli_binary())
        .args(["--tcp-server-address", &server.tcp_address(), "-u", "iggy", "-p", "iggy"])
        .args(args)
        .env("HOME", home)
        .output()
        .expect("run the 0.12 CLI");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    (stdout + &String::from_utf8_lossy(&output.stderr), output.status.success())
}

/// Runs one CLI command that must succeed; its output.
fn iggy(server: &TestServer, home: &Path, args: &[&str]) -> String {
    let (output, succeeded) = run(server, home, args);
    assert!(succeeded, "iggy {args:?} failed:\n{output}");
    output
}

#[test]
fn the_0_12_cli_creates_sends_polls_and_manages() {
    let server = TestServer::start().expect("start rill-server");
    let home = tempfile::tempdir().expect("a home for the CLI");
    let home = home.path();
    iggy(&server, home, &["stream", "create", "orders"]);
    iggy(&server, home, &["topic", "create", "orders", "events", "2", "none"]);
    iggy(&server, home, &["message", "send", "--partition-id", "1", "orders", "events", "first", "second"]);
    let polled =
        iggy(&server, home, &["message", "poll", "--offset", "0", "--message-count", "10", "orders", "events", "1"]);
    assert!(polled.contains("Polled 2 messages") && polled.contains("second"), "poll:\n{polled}");
    assert!(iggy(&server, home, &["stream", "list"]).contains("orders"));
    assert!(iggy(&server, home, &["topic", "get", "orders", "events"]).contains("segment_size"));
    assert!(iggy(&server, home, &["options", "topic"]).contains("replication_factor"));
    assert!(iggy(&server, home, &["cluster", "metadata"]).contains("leader"));
    iggy(&server, home, &["user", "create", "alice", "secret-pw"]);
    assert!(iggy(&server, home, &["user", "list"]).contains("alice"));
    assert!(iggy(&server, home, &["pat", "create", "mytoken"]).contains("Token:"));
    iggy(&server, home, &["consumer-group", "create", "orders", "events", "workers"]);
    assert!(iggy(&server, home, &["consumer-group", "list", "orders", "events"]).contains("workers"));
    iggy(&server, home, &["consumer-offset", "set", "c1", "orders", "events", "1", "1"]);
    let offset = iggy(&server, home, &["consumer-offset", "get", "c1", "orders", "events", "1"]);
    assert!(offset.contains("Stored offset"), "offset:\n{offset}");
    iggy(&server, home, &["topic", "delete", "orders", "events"]);
    iggy(&server, home, &["stream", "delete", "orders"]);
    assert!(!iggy(&server, home, &["stream", "list"]).contains("orders"));
}

/// The `"next"` cursor of the last page the CLI printed (one JSON object per line).
fn last_next_cursor(output: &str) -> String {
    let line = output.lines().rfind(|line| line.starts_with('{')).expect("a page");
    let start = line.find("\"next\":\"").expect("a next cursor") + "\"next\":\"".len();
    line[start..].split('"').next().expect("a closing quote").to_owned()
}

#[test]
fn the_0_12_cli_reads_the_metadata_change_feed() {
    let server = TestServer::start().expect("start rill-server");
    let home = tempfile::tempdir().expect("a home for the CLI");
    let home = home.path();
    iggy(&server, home, &["stream", "create", "orders"]);
    iggy(&server, home, &["topic", "create", "orders", "events", "2", "none"]);
    iggy(&server, home, &["consumer-group", "create", "orders", "events", "workers"]);
    iggy(&server, home, &["user", "create", "alice", "secret-pw"]);
    iggy(&server, home, &["pat", "create", "mytoken"]);
    iggy(&server, home, &["topic", "delete", "orders", "events"]);

    let changes = iggy(&server, home, &["metadata", "changes"]);
    for name in ["orders", "events", "workers", "alice", "mytoken"] {
        assert!(changes.contains(name), "no {name} in the change feed:\n{changes}");
    }
    let topics = iggy(&server, home, &["metadata", "changes", "--groups", "topics"]);
    assert!(topics.contains("events") && !topics.contains("alice"), "topics only:\n{topics}");

    // The current state, one item a page: the deleted topic is gone, the rest is there.
    let current = iggy(&server, home, &["metadata", "changes", "--from", "current", "--limit", "1"]);
    assert!(current.lines().count() > 3, "one item a page:\n{current}");
    assert!(current.contains("orders") && current.contains("alice") && !current.contains("events"), "{current}");

    // A cursor from one run goes on in the next: only what came after it.
    let cursor = last_next_cursor(&changes);
    let quiet = iggy(&server, home, &["metadata", "changes", "--after", &cursor]);
    assert!(!quiet.contains("orders"), "nothing after the cursor yet:\n{quiet}");
    iggy(&server, home, &["stream", "create", "audit"]);
    let later = iggy(&server, home, &["metadata", "changes", "--after", &cursor]);
    assert!(later.contains("audit") && !later.contains("orders"), "after the cursor:\n{later}");
}
