//! systemd's notify protocol (`sd_notify`): one datagram per state to the socket named by
//! `NOTIFY_SOCKET` (a path, or an abstract name after `@`). READY=1 once every shard serves,
//! STOPPING=1 when shutdown begins, WATCHDOG=1 from shard 0's event loop at half of
//! `WATCHDOG_USEC`, so a shard 0 that stops turning stops the pings and systemd restarts
//! the server. Without `NOTIFY_SOCKET` every call does nothing.

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

/// Where to send notifications, read once at start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Notifier {
    socket: Option<String>,
    watchdog: Option<Duration>,
}

impl Notifier {
    /// From `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` (the pings are for this
    /// process only when the pid, if given, is ours).
    pub fn from_env(env: &std::collections::BTreeMap<String, String>) -> Self {
        let socket = env.get("NOTIFY_SOCKET").filter(|s| !s.is_empty()).cloned();
        let ours = env.get("WATCHDOG_PID").is_none_or(|pid| pid.trim() == std::process::id().to_string());
        let watchdog = env
            .get("WATCHDOG_USEC")
            .and_then(|usec| usec.trim().parse::<u64>().ok())
            .filter(|&usec| usec > 0 && ours)
            .map(Duration::from_micros);
        Self { socket, watchdog }
    }

    /// How often to ping the watchdog: half its timeout, as systemd advises.
    pub fn watchdog_interval(&self) -> Option<Duration> {
        self.socket.as_ref()?;
        self.watchdog.map(|timeout| timeout / 2)
    }

    /// Sends one notification (`READY=1`, ...). Failures are logged, never fatal: the
    /// server serves whether or not systemd listens.
    pub fn notify(&self, state: &str) {
        let Some(socket) = &self.socket else { return };
        if let Err(error) = send(socket, state) {
            tracing::warn!(%error, socket = %socket, state, "cannot notify systemd");
        }
    }
}

fn send(socket: &str, state: &str) -> std::io::Result<()> {
    let address = match socket.strip_prefix('@') {
        Some(name) => <SocketAddr as std::os::linux::net::SocketAddrExt>::from_abstract_name(name.as_bytes())?,
        None => SocketAddr::from_pathname(socket)?,
    };
    let datagram = UnixDatagram::unbound()?;
    datagram.send_to_addr(state.as_bytes(), &address)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_reach_the_socket_and_the_watchdog_runs_at_half_its_timeout() {
        let path = std::env::temp_dir().join(format!("rill-notify-test-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener = UnixDatagram::bind(&path).unwrap();
        let env = std::collections::BTreeMap::from([
            ("NOTIFY_SOCKET".to_owned(), path.to_str().unwrap().to_owned()),
            ("WATCHDOG_USEC".to_owned(), "4000000".to_owned()),
        ]);
        let notifier = Notifier::from_env(&env);
        assert_eq!(notifier.watchdog_interval(), Some(Duration::from_secs(2)));
        notifier.notify("READY=1");
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        let other = std::collections::BTreeMap::from([
            ("NOTIFY_SOCKET".to_owned(), path.to_str().unwrap().to_owned()),
            ("WATCHDOG_USEC".to_owned(), "4000000".to_owned()),
            ("WATCHDOG_PID".to_owned(), "1".to_owned()),
        ]);
        assert_eq!(Notifier::from_env(&other).watchdog_interval(), None, "another process's watchdog");
        Notifier::default().notify("READY=1");
        let _ = std::fs::remove_file(&path);
    }
}
