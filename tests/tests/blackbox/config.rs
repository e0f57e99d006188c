//! Configuration at start: unknown keys are reported by name, invalid values stop the start
//! naming key and value, and the effective configuration is written to the data directory.

use iggy::prelude::*;
use rill_tests::{TestServer, connect_root};

/// Runs the server with `env` on a fresh data directory until it exits by itself (it is
/// expected to refuse to start): its exit code and stderr.
fn run_refused(env: &[(&str, &str)]) -> anyhow::Result<(Option<i32>, String)> {
    rill_tests::run_until_exit(tempfile::tempdir()?.path(), env)
}

#[test]
fn an_invalid_value_stops_the_start_naming_key_and_value() -> anyhow::Result<()> {
    let (code, stderr) = run_refused(&[("IGGY_TCP_ENABLED", "maybe")])?;
    assert_eq!(code, Some(2), "stderr: {stderr}");
    assert!(stderr.contains("tcp.enabled") && stderr.contains("maybe"), "stderr: {stderr}");
    let (code, stderr) = run_refused(&[("IGGY_SYSTEM_LOGGING_LEVEL", "shouting")])?;
    assert_eq!(code, Some(2), "stderr: {stderr}");
    assert!(stderr.contains("system.logging.level") && stderr.contains("shouting"), "stderr: {stderr}");
    Ok(())
}

#[test]
fn a_bad_config_file_value_stops_the_start() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("rill.toml");
    std::fs::write(&path, "[tcp]\naddress = 8090\n")?;
    let (code, stderr) = run_refused(&[("IGGY_CONFIG_PATH", path.to_str().unwrap())])?;
    assert_eq!(code, Some(2), "stderr: {stderr}");
    assert!(stderr.contains("tcp.address"), "stderr: {stderr}");
    Ok(())
}

#[tokio::test]
async fn unknown_keys_are_reported_and_the_effective_config_is_written() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("rill.toml");
    std::fs::write(&path, "[tcp]\nadress = \"127.0.0.1:1\"\n\n[system.logging]\nlevel = \"debug\"\n")?;
    let server =
        TestServer::start_with_env(&[("IGGY_CONFIG_PATH", path.to_str().unwrap()), ("IGGY_BOGUS_SETTING", "1")])?;
    let client = connect_root(&server.tcp_address()).await?;
    client.ping().await?;
    let logs = server.logs();
    assert!(logs.contains("tcp.adress"), "unknown file key not reported:\n{logs}");
    assert!(logs.contains("IGGY_BOGUS_SETTING"), "unknown variable not reported:\n{logs}");
    let effective = std::fs::read_to_string(server.data_dir().join("runtime/current_config.toml"))?;
    assert!(effective.contains(&server.tcp_address()), "effective config lacks the address:\n{effective}");
    assert!(effective.contains("level = \"debug\""), "effective config lacks the file's level:\n{effective}");
    Ok(())
}

#[test]
fn an_allocation_beyond_the_machine_stops_the_start() -> anyhow::Result<()> {
    let (code, stderr) = run_refused(&[("IGGY_SYSTEM_SHARDING_CPU_ALLOCATION", "4096")])?;
    assert_ne!(code, Some(0), "stderr: {stderr}");
    assert!(
        stderr.contains("cpu_allocation") && stderr.contains("4096") && stderr.contains("cores"),
        "stderr: {stderr}"
    );
    let (code, stderr) = run_refused(&[("IGGY_SYSTEM_SHARDING_CPU_ALLOCATION", "3..1")])?;
    assert_ne!(code, Some(0), "stderr: {stderr}");
    assert!(stderr.contains("3..1"), "stderr: {stderr}");
    Ok(())
}

/// The keys a server's log reports as unknown.
fn reported_unknown(logs: &str) -> Vec<String> {
    logs.lines()
        .filter(|line| line.contains("unknown configuration key"))
        .filter_map(|line| line.split("key=").nth(1))
        .map(|key| key.split_whitespace().next().unwrap_or(key).to_owned())
        .collect()
}

#[tokio::test]
async fn iggys_shipped_config_file_starts_rill_naming_only_the_keys_rill_lacks() -> anyhow::Result<()> {
    let path = rill_tests::workspace_dir().join("tests/data/iggy-server-config.toml");
    let server = TestServer::start_with_env(&[("IGGY_CONFIG_PATH", path.to_str().unwrap())])?;
    let client = connect_root(&server.tcp_address()).await?;
    client.ping().await?;
    client.create_stream("from-iggy").await?;
    let logs = server.logs();
    let unknown = reported_unknown(&logs);
    // Keys Rill has under its own names are taken, not reported.
    for taken in [
        "system.sharding.pin_cores",
        "cluster.nodes",
        "message_bus.max_message_size",
        "system.sharding.cpu_allocation",
        "system.sharding.inbox_capacity",
        "http.cors.allowed_origins",
        "http.web_ui",
    ] {
        assert!(!unknown.iter().any(|key| key == taken), "`{taken}` reported unknown:\n{logs}");
    }
    // Keys Rill lacks are named, one by one.
    for lacking in ["quic.max_concurrent_bidi_streams", "metadata.journal_slots", "partition.prepare_queue_depth"] {
        assert!(unknown.iter().any(|key| key == lacking), "`{lacking}` not reported:\n{logs}");
    }
    if std::env::var_os("RILL_TEST_SHARDS").is_none() {
        // The file asks for "numa:auto"; the test build has no NUMA support.
        assert!(logs.contains("NUMA placement is not available"), "no NUMA fallback warning:\n{logs}");
    }
    Ok(())
}

/// Without `require_numa`, the same allocation falls back (see the Iggy config test).
#[test]
fn a_numa_allocation_that_was_required_stops_the_start() -> anyhow::Result<()> {
    let (code, stderr) = run_refused(&[
        ("IGGY_SYSTEM_SHARDING_CPU_ALLOCATION", "numa:auto"),
        ("IGGY_SYSTEM_SHARDING_REQUIRE_NUMA", "true"),
    ])?;
    assert_eq!(code, Some(1), "stderr: {stderr}");
    assert!(stderr.contains("--features numa"), "says how to get the NUMA build: {stderr}");
    Ok(())
}

#[test]
fn a_protection_rill_cannot_give_stops_the_start() -> anyhow::Result<()> {
    let (code, stderr) = run_refused(&[("IGGY_HTTP_JWT_ALGORITHM", "RS256")])?;
    assert_eq!(code, Some(2), "stderr: {stderr}");
    assert!(stderr.contains("http.jwt.algorithm"), "stderr: {stderr}");
    Ok(())
}

#[tokio::test]
async fn a_cluster_without_a_replica_key_starts_only_when_told_it_may() -> anyhow::Result<()> {
    let (tcp, plane) = (rill_tests::free_port(), rill_tests::free_port());
    let (tcp_address, plane_address) = (format!("127.0.0.1:{tcp}"), format!("127.0.0.1:{plane}"));
    let cluster = [
        ("IGGY_TCP_ADDRESS", tcp_address.as_str()),
        ("IGGY_CLUSTER_ENABLED", "true"),
        ("IGGY_CLUSTER_REPLICAS", plane_address.as_str()),
        ("IGGY_CLUSTER_CLIENT_ADDRESSES", tcp_address.as_str()),
    ];
    let (code, stderr) = run_refused(&cluster)?;
    assert_eq!(code, Some(2), "stderr: {stderr}");
    assert!(
        stderr.contains("the replica plane has no key") && stderr.contains("cluster.auth.allow_unauthenticated_peers"),
        "stderr: {stderr}"
    );
    // Told it may, the same node starts, serves and says its plane is open.
    let mut open = cluster.to_vec();
    open.push(("IGGY_CLUSTER_AUTH_ALLOW_UNAUTHENTICATED_PEERS", "true"));
    let server = TestServer::start_node(tcp, &open, &["--replica-id", "0"])?;
    let client = connect_root(&server.tcp_address()).await?;
    client.ping().await?;
    assert!(server.logs().contains("the replica plane is open"), "logs: {}", server.logs());
    Ok(())
}

#[test]
fn a_replica_key_too_short_or_tls_without_a_key_stops_the_start() -> anyhow::Result<()> {
    let (code, stderr) =
        run_refused(&[("IGGY_CLUSTER_AUTH_ENABLED", "true"), ("IGGY_CLUSTER_AUTH_SHARED_SECRET", "short")])?;
    assert_eq!(code, Some(2), "stderr: {stderr}");
    assert!(stderr.contains("cluster.auth.shared_secret") && stderr.contains("5 bytes"), "stderr: {stderr}");
    assert!(!stderr.contains("short"), "the key itself is never printed: {stderr}");
    let (code, stderr) = run_refused(&[("IGGY_CLUSTER_TLS_ENABLED", "true")])?;
    assert_eq!(code, Some(2), "stderr: {stderr}");
    assert!(stderr.contains("needs `cluster.auth.enabled`"), "stderr: {stderr}");
    Ok(())
}

#[tokio::test]
async fn a_dotenv_file_sets_variables_the_environment_does_not() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let dotenv = dir.path().join("rill.env");
    // The harness sets IGGY_TCP_ADDRESS itself: the file's must lose, or no client gets in.
    std::fs::write(&dotenv, "# for the test\nIGGY_SYSTEM_LOGGING_LEVEL=debug\nIGGY_TCP_ADDRESS=127.0.0.1:1\n")?;
    let server = TestServer::start_with_env(&[("IGGY_ENV_PATH", dotenv.to_str().unwrap())])?;
    let client = connect_root(&server.tcp_address()).await?;
    client.ping().await?;
    let logs = server.logs();
    assert!(logs.contains("read environment variables from a .env file"), "{logs}");
    assert!(logs.contains("DEBUG"), "the file's log level did not apply:\n{logs}");
    Ok(())
}

#[tokio::test]
async fn the_log_file_rotates_by_size_and_keeps_under_its_total_cap() -> anyhow::Result<()> {
    let server = TestServer::start_with_env(&[
        ("IGGY_SYSTEM_LOGGING_MAX_FILE_SIZE", "1 KiB"),
        ("IGGY_SYSTEM_LOGGING_MAX_TOTAL_SIZE", "4 KiB"),
        // Every connection past the first is refused with a warning: a log line each.
        ("IGGY_CONNECTIONS_MAX_CONNECTIONS", "1"),
    ])?;
    let client = connect_root(&server.tcp_address()).await?;
    for _ in 0..60 {
        let mut refused = std::net::TcpStream::connect(server.tcp_address())?;
        refused.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
        let _ = std::io::Read::read_to_end(&mut refused, &mut Vec::new());
    }
    client.ping().await?;
    let dir = server.data_dir().join("logs");
    let files: Vec<(String, u64)> = std::fs::read_dir(&dir)?
        .filter_map(Result::ok)
        .map(|entry| (entry.file_name().to_string_lossy().into_owned(), entry.metadata().map_or(0, |m| m.len())))
        .collect();
    let rotated = files.iter().filter(|(name, _)| name != "rill.log" && name.ends_with(".log")).count();
    assert!(rotated >= 1, "nothing rotated: {files:?}");
    // A single line longer than the limit gets a file of its own, so allow one line over.
    assert!(files.iter().all(|(_, len)| *len <= 1024 + 512), "a file past max_file_size: {files:?}");
    let total: u64 = files.iter().map(|(_, len)| len).sum();
    assert!(total <= 4096 + 512, "log files past max_total_size: {total} bytes, {files:?}");
    Ok(())
}

#[tokio::test]
async fn rust_log_wins_over_the_configured_level_from_the_environment_or_a_dotenv_file() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let dotenv = dir.path().join("rill.env");
    std::fs::write(&dotenv, "RUST_LOG=warn\n")?;
    let from_env = [("RUST_LOG", "warn"), ("IGGY_SYSTEM_LOGGING_LEVEL", "info"), ("IGGY_BOGUS_SETTING", "1")];
    let from_file = [
        ("IGGY_ENV_PATH", dotenv.to_str().unwrap()),
        ("IGGY_SYSTEM_LOGGING_LEVEL", "info"),
        ("IGGY_BOGUS_SETTING", "1"),
    ];
    for env in [&from_env[..], &from_file[..]] {
        let server = TestServer::start_with_env(env)?;
        connect_root(&server.tcp_address()).await?.ping().await?;
        let logs = server.logs();
        assert!(logs.contains("unknown configuration key"), "the WARN line passes the filter:\n{logs}");
        assert!(!logs.contains("rill-server is listening"), "INFO lines are filtered out:\n{logs}");
    }
    Ok(())
}
