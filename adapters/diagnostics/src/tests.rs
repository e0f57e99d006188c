//! The host diagnostics against a temporary data directory and this test's own process.

use super::*;

fn text(diagnostics: &HostDiagnostics, part: SnapshotType) -> String {
    String::from_utf8(diagnostics.collect(part)).expect("text")
}

#[test]
fn the_overview_lists_nested_files_with_their_sizes() {
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(data.path().join("streams/0/topics")).unwrap();
    std::fs::write(data.path().join("streams/0/topics/00000000000000000000.log"), vec![7u8; 1234]).unwrap();
    std::fs::write(data.path().join("a.txt"), b"abc").unwrap();
    let overview = text(&HostDiagnostics::new(data.path()), SnapshotType::FilesystemOverview);
    let line = overview.lines().find(|line| line.ends_with("streams/0/topics/00000000000000000000.log")).unwrap();
    assert!(line.trim_start().starts_with("1234 "), "{line}");
    assert!(overview.lines().any(|line| line.ends_with(" streams/0/")), "{overview}");
    assert!(overview.contains("5 entries, 1237 bytes in files"), "{overview}");
    let paths: Vec<&str> = overview.lines().skip(1).filter_map(|line| line.split_whitespace().nth(2)).collect();
    assert_eq!(
        paths[..5],
        ["a.txt", "streams/", "streams/0/", "streams/0/topics/", "streams/0/topics/00000000000000000000.log"],
        "name order, depth first: {overview}"
    );
}

#[test]
fn the_process_list_holds_this_process() {
    let list = text(&HostDiagnostics::new("/nonexistent"), SnapshotType::ProcessList);
    let me = std::process::id().to_string();
    assert!(list.lines().any(|line| line.split_whitespace().next() == Some(me.as_str())), "{list}");
}

#[test]
fn resource_usage_has_memory_and_this_process() {
    let usage = text(&HostDiagnostics::new("/nonexistent"), SnapshotType::ResourceUsage);
    assert!(usage.contains("MemTotal:") && usage.contains("VmRSS:"), "{usage}");
}

#[test]
fn the_log_part_is_the_tail_and_says_what_it_left_out() {
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(data.path().join("logs")).unwrap();
    std::fs::write(data.path().join("logs/rill.log"), b"0123456789").unwrap();
    let mut diagnostics = HostDiagnostics::new(data.path());
    assert_eq!(diagnostics.collect(SnapshotType::ServerLogs), b"0123456789");
    diagnostics.log_tail_bytes = 4;
    let tail = text(&diagnostics, SnapshotType::ServerLogs);
    assert!(tail.starts_with("[the first 6 bytes of "), "{tail}");
    assert!(tail.ends_with("]\n6789"), "{tail}");
}

#[test]
fn the_configuration_part_is_the_file_the_server_wrote() {
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(data.path().join("runtime")).unwrap();
    let config = "[http.jwt]\nencoding_secret = \"<redacted>\"\n[tcp]\naddress = \"127.0.0.1:8090\"\n";
    std::fs::write(data.path().join("runtime/current_config.toml"), config).unwrap();
    assert_eq!(text(&HostDiagnostics::new(data.path()), SnapshotType::ServerConfig), config);
}

#[test]
fn an_unreadable_data_directory_is_a_note() {
    let overview = text(&HostDiagnostics::new("/nonexistent/rill"), SnapshotType::FilesystemOverview);
    assert!(overview.starts_with("filesystem_overview.txt: not collected: "), "{overview}");
}

#[test]
fn a_missing_file_becomes_a_note_not_a_failure() {
    let data = tempfile::tempdir().unwrap();
    let logs = text(&HostDiagnostics::new(data.path()), SnapshotType::ServerLogs);
    assert!(logs.starts_with("server_logs.txt: not collected: "), "{logs}");
}
