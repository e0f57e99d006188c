//! The official CLI (`iggy` from crate iggy-cli 0.14.0) against rill-server: create a stream
//! and a topic, send messages and poll them back. `scripts/test.sh` installs the CLI; set
//! `IGGY_CLI_BIN` to use another copy.

use std::path::PathBuf;
use std::process::Command;

use rill_tests::TestServer;

fn cli_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("IGGY_CLI_BIN") {
        return PathBuf::from(path);
    }
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
        .expect("HOME or CARGO_HOME is set");
    let installed = home.join("bin").join("iggy");
    assert!(
        installed.is_file(),
        "{} is missing: install the official CLI with `cargo install iggy-cli --version 0.14.0 --locked` (scripts/test.sh does)",
        installed.display()
    );
    installed
}

/// Runs one CLI command against the server and returns its stdout; fails on a non-zero exit.
fn iggy(server: &TestServer, home: &std::path::Path, args: &[&str]) -> String {
    let output = Command::new(cli_binary())
        .args(["--tcp-server-address", &server.tcp_address(), "-u", "iggy", "-p", "iggy"])
        .args(args)
        .env("HOME", home)
        .output()
        .expect("run the iggy CLI");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "iggy {args:?} failed ({}):\n{stdout}\n{stderr}", output.status);
    stdout
}

#[test]
fn the_official_cli_creates_sends_and_polls() {
    let server = TestServer::start().expect("start rill-server");
    let home = tempfile::tempdir().expect("a home for the CLI");
    iggy(&server, home.path(), &["stream", "create", "orders"]);
    iggy(&server, home.path(), &["topic", "create", "orders", "events", "2", "none"]);
    iggy(
        &server,
        home.path(),
        &["message", "send", "--partition-id", "1", "orders", "events", "first-message", "second-message"],
    );
    let polled = iggy(
        &server,
        home.path(),
        &["message", "poll", "--offset", "0", "--message-count", "10", "orders", "events", "1"],
    );
    assert!(polled.contains("first-message") && polled.contains("second-message"), "poll output:\n{polled}");
    assert!(polled.contains("Polled 2 messages"), "poll output:\n{polled}");
    let streams = iggy(&server, home.path(), &["stream", "list"]);
    assert!(streams.contains("orders"), "stream list:\n{streams}");
    let topics = iggy(&server, home.path(), &["topic", "get", "orders", "events"]);
    assert!(topics.contains("events"), "topic get:\n{topics}");
}

#[test]
fn the_official_cli_lists_the_topic_options() {
    let server = TestServer::start().expect("start rill-server");
    let home = tempfile::tempdir().expect("a home for the CLI");
    let topic = iggy(&server, home.path(), &["options", "topic"]);
    for expected in ["segment_size", "1073741824", "durability", "replicated", "messages_required_to_save", "1024"] {
        assert!(topic.contains(expected), "`{expected}` missing from options topic:\n{topic}");
    }
    let stream = iggy(&server, home.path(), &["options", "stream"]);
    assert!(stream.contains("accept no options"), "options stream:\n{stream}");
}

#[test]
fn the_official_cli_saves_a_snapshot() {
    let server = TestServer::start().expect("start rill-server");
    let home = tempfile::tempdir().expect("a home for the CLI");
    let out = tempfile::tempdir().expect("an output directory");
    let printed = iggy(&server, home.path(), &["snapshot", "--out-dir", out.path().to_str().expect("utf-8 path")]);
    let files: Vec<_> = std::fs::read_dir(out.path()).expect("listing").map(|entry| entry.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "one snapshot file: {files:?}\n{printed}");
    let archive = std::fs::read(&files[0]).expect("the snapshot file");
    let zip = zip::ZipArchive::new(std::io::Cursor::new(archive)).expect("the CLI saved a zip archive");
    // The CLI's default parts: filesystem overview, processes, resource usage and logs.
    let mut names: Vec<String> = zip.file_names().map(|name| name.expect("utf-8 name").to_string()).collect();
    names.sort_unstable();
    assert_eq!(names, ["filesystem_overview.txt", "process_list.txt", "resource_usage.txt", "server_logs.txt"]);
}
