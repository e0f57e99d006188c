//! systemd integration: the server speaks the notify protocol to a socket that stands in for
//! systemd's (READY=1 once serving, WATCHDOG=1 at half of WATCHDOG_USEC, STOPPING=1 at
//! shutdown), and the unit file under packaging/ asks for exactly that.

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use iggy::prelude::*;
use rill_tests::{TestServer, connect_root, workspace_dir};

/// The notifications that arrive within `within`, until `until` is among them.
fn receive_until(socket: &UnixDatagram, until: &str, within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    while Instant::now() < deadline && !seen.iter().any(|s| s == until) {
        socket
            .set_read_timeout(Some(deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1))))
            .ok();
        if let Ok(n) = socket.recv(&mut buf) {
            seen.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }
    seen
}

#[tokio::test]
async fn the_server_tells_systemd_it_is_ready_alive_and_stopping() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("notify");
    let socket = UnixDatagram::bind(&path)?;
    let mut server = TestServer::start_with_env(&[
        ("NOTIFY_SOCKET", path.to_str().unwrap()),
        // A 400 ms watchdog: pings every 200 ms.
        ("WATCHDOG_USEC", "400000"),
    ])?;
    let seen = receive_until(&socket, "READY=1", Duration::from_secs(10));
    assert!(seen.iter().any(|s| s == "READY=1"), "no READY=1: {seen:?}");
    connect_root(&server.tcp_address()).await?.ping().await?;
    let pings = receive_until(&socket, "WATCHDOG=1", Duration::from_secs(5));
    assert!(pings.iter().any(|s| s == "WATCHDOG=1"), "no watchdog ping: {pings:?}");
    server.stop_graceful()?;
    let stopping = receive_until(&socket, "STOPPING=1", Duration::from_secs(5));
    assert!(stopping.iter().any(|s| s == "STOPPING=1"), "no STOPPING=1: {stopping:?}");
    Ok(())
}

#[test]
fn the_unit_file_waits_for_ready_watches_the_server_and_stops_it_with_sigterm() -> anyhow::Result<()> {
    let unit = std::fs::read_to_string(workspace_dir().join("packaging/rill.service"))?;
    let settings: Vec<(&str, &str)> = unit
        .lines()
        .map(str::trim)
        .filter(|line| !line.starts_with('#') && !line.starts_with('['))
        .filter_map(|line| line.split_once('='))
        .collect();
    let value = |key: &str| settings.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
    assert_eq!(value("Type"), Some("notify"));
    assert_eq!(value("NotifyAccess"), Some("main"));
    assert!(value("WatchdogSec").is_some());
    assert!(value("ExecStart").is_some_and(|exec| exec.ends_with("rill-server")));
    assert_eq!(value("KillSignal"), Some("SIGTERM"));
    for section in ["[Unit]", "[Service]", "[Install]"] {
        assert!(unit.contains(section), "no {section}");
    }
    Ok(())
}
