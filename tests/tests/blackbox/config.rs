//! Configuration at start: unknown keys are reported by name, invalid values stop the start
//! naming key and value, and the effective configuration is written to the data directory.

use std::process::{Command, Stdio};

use iggy::prelude::*;
use rill_tests::{TestServer, connect_root, free_port, server_binary};

/// Runs the server with `env` and returns its exit code and stderr; the server must stop
/// by itself (it is expected to refuse to start).
fn run_refused(env: &[(&str, &str)]) -> anyhow::Result<(Option<i32>, String)> {
    let data = tempfile::tempdir()?;
    let mut command = Command::new(server_binary());
    command.arg("--with-default-root-credentials").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("IGGY_") {
            command.env_remove(key);
        }
    }
    command.env("IGGY_SYSTEM_PATH", data.path()).env("IGGY_TCP_ADDRESS", format!("127.0.0.1:{}", free_port()));
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output()?;
    Ok((output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned()))
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

#[test]
fn a_numa_allocation_without_numa_support_says_how_to_enable_it() -> anyhow::Result<()> {
    let (code, stderr) = run_refused(&[("IGGY_SYSTEM_SHARDING_CPU_ALLOCATION", "numa:auto")])?;
    assert_ne!(code, Some(0), "stderr: {stderr}");
    assert!(stderr.contains("--features numa"), "stderr: {stderr}");
    Ok(())
}
