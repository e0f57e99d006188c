//! Black-box test harness for rill-server: runs the real binary on a temporary data directory and a free TCP port, and builds Iggy 0.11 clients that talk to it.
//!
//! Every integration test starts its own [`TestServer`], so tests can run in parallel.
//! The harness only speaks to the server through its process interface (environment,
//! signals, exit code) and the Iggy binary protocol over TCP.

pub mod browser;
pub mod http;
pub mod proxy;
pub mod quic_raw;
pub mod raw;
pub mod tls;
pub mod transport;

use anyhow::{Context, bail};
use iggy::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::str::FromStr;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// Root credentials seeded by `--with-default-root-credentials`.
pub const ROOT_USERNAME: &str = "iggy";
/// Root password seeded by `--with-default-root-credentials`.
pub const ROOT_PASSWORD: &str = "iggy";

const READY_TIMEOUT: Duration = Duration::from_secs(20);
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a (re)start keeps relaunching a server that exits at once, e.g. because
/// the port of the previous instance is not free yet.
const BIND_RETRY_WINDOW: Duration = Duration::from_secs(10);
const LOG_TAIL_LINES: usize = 80;

/// Ports handed out by [`free_port`] in this test process, never handed out twice.
static HANDED_OUT_PORTS: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
/// The next candidate for [`free_port`], as an offset into `listener_ports`.
static NEXT_PORT: AtomicU32 = AtomicU32::new(u32::MAX);
/// The server binary, resolved (and built if needed) once per test process.
static SERVER_BINARY: OnceLock<PathBuf> = OnceLock::new();

/// The cargo workspace that contains this crate.
pub fn workspace_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// Makes every later `TestServer` use `binary` (the benchmark picks the release build).
/// Returns false when a binary was already chosen.
pub fn use_server_binary(binary: PathBuf) -> bool {
    SERVER_BINARY.set(binary).is_ok()
}

/// Path of the `rill-server` binary: `RILL_SERVER_BIN`, else
/// `<workspace>/target/debug/rill-server`, else a binary built on demand.
/// Runs the server binary on `data` with `env` as its only `IGGY_*` variables (besides a
/// free TCP port, and QUIC, HTTP and WebSocket off unless `env` says otherwise) and waits,
/// 20 s at most, for it to exit by itself, as a start it refuses does: its exit code and
/// stderr. A server that keeps running is killed and reported as an error.
pub fn run_until_exit(data: &Path, env: &[(&str, &str)]) -> anyhow::Result<(Option<i32>, String)> {
    use std::io::{Read, Seek};
    let mut stderr = tempfile::tempfile()?;
    let mut command = Command::new(server_binary());
    command.arg("--with-default-root-credentials").stdin(Stdio::null()).stdout(Stdio::null());
    command.stderr(stderr.try_clone()?);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("IGGY_") {
            command.env_remove(key);
        }
    }
    command.env("IGGY_SYSTEM_PATH", data).env("IGGY_TCP_ADDRESS", format!("127.0.0.1:{}", free_port()));
    for transport in ["QUIC", "HTTP", "WEBSOCKET"] {
        command.env(format!("IGGY_{transport}_ENABLED"), "false");
    }
    command.envs(env.iter().copied());
    let mut child = command.spawn()?;
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the server kept running with {env:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut text = String::new();
    stderr.rewind()?;
    stderr.read_to_string(&mut text)?;
    Ok((status.code(), text))
}

pub fn server_binary() -> PathBuf {
    SERVER_BINARY
        .get_or_init(|| {
            if let Some(path) = std::env::var_os("RILL_SERVER_BIN") {
                return PathBuf::from(path);
            }
            let default = workspace_dir().join("target/debug/rill-server");
            if default.is_file() {
                return default;
            }
            build_server_binary()
        })
        .clone()
}

/// Runs `cargo build -p rill-bootstrap --bin rill-server` once.
///
/// `cargo test` keeps the lock of its own target directory while the tests run, so a
/// nested build into the same directory would wait forever. The build therefore goes
/// to a target directory of its own.
fn build_server_binary() -> PathBuf {
    let workspace = workspace_dir();
    let target_dir = workspace.join("target/rill-tests-server");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!("rill-server binary missing; building it into {}", target_dir.display());
    let status = Command::new(cargo)
        .args(["build", "-p", "rill-bootstrap", "--bin", "rill-server"])
        .current_dir(&workspace)
        .env("CARGO_TARGET_DIR", &target_dir)
        .status()
        .expect("failed to run cargo build for rill-server");
    assert!(status.success(), "cargo build of rill-server failed: {status}");
    let binary = target_dir.join("debug/rill-server");
    assert!(binary.is_file(), "cargo build did not produce {}", binary.display());
    binary
}

/// A TCP port on 127.0.0.1 that was free a moment ago and that this process has not
/// handed out before. It lies below the kernel's ephemeral range, which every outgoing
/// connection (a server's replica links, a client) takes its local port from: a port from
/// that range can be a live connection's by the time a restarted node binds it again.
pub fn free_port() -> u16 {
    let (low, high) = listener_ports();
    let span = u32::from(high - low);
    // Each test process starts somewhere else in the range, so two at once rarely meet.
    let _ = NEXT_PORT.compare_exchange(u32::MAX, std::process::id().wrapping_mul(7919) % span, SeqCst, SeqCst);
    loop {
        let port = low + (NEXT_PORT.fetch_add(1, SeqCst) % span) as u16;
        let mut handed_out = HANDED_OUT_PORTS.lock().unwrap_or_else(|e| e.into_inner());
        if !handed_out.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.insert(port);
            return port;
        }
    }
}

/// Where test listeners' ports come from: from 10000 up to the start of the ephemeral range
/// (`ip_local_port_range`), or 10000-30000 when that cannot be read or leaves too little.
fn listener_ports() -> (u16, u16) {
    let ephemeral_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next().and_then(|first| first.parse::<u16>().ok()));
    match ephemeral_start {
        Some(start) if start >= 15_000 => (10_000, start),
        _ => (10_000, 30_000),
    }
}

/// The first of `count` consecutive TCP ports that were all free a moment ago and that this
/// process has not handed out before (a replica port and the partition groups' above it).
pub fn free_ports(count: u16) -> u16 {
    loop {
        let first = free_port();
        let Some(last) = first.checked_add(count - 1).filter(|&last| last < listener_ports().1) else { continue };
        let mut handed_out = HANDED_OUT_PORTS.lock().unwrap_or_else(|e| e.into_inner());
        let free = (first + 1..=last)
            .all(|port| !handed_out.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok());
        if free {
            handed_out.extend(first + 1..=last);
            return first;
        }
    }
}

/// One rill-server process (and its restarts) with its own data directory and port.
pub struct TestServer {
    binary: PathBuf,
    root: TempDir,
    address: SocketAddr,
    extra_env: Vec<(String, String)>,
    extra_args: Vec<String>,
    child: Option<Child>,
    launches: u32,
    /// Ports of the QUIC, WebSocket and HTTP listeners (enabled when the run tests them).
    ports: transport::ListenerPorts,
    /// Whether dropping the server prints every launch's logs (a long loop of restarts
    /// reports its own failures instead).
    logs_on_drop: bool,
}

impl TestServer {
    /// Starts a server with the default test environment and waits until it accepts
    /// TCP connections.
    pub fn start() -> anyhow::Result<Self> {
        Self::start_with_env(&[])
    }

    /// Like [`TestServer::start`], with extra environment variables (which override the
    /// defaults of the harness).
    pub fn start_with_env(extra_env: &[(&str, &str)]) -> anyhow::Result<Self> {
        Self::start_node(free_port(), extra_env, &[])
    }

    /// A server on a chosen TCP port with extra environment and arguments (a cluster node:
    /// its roster names every node's ports before any starts).
    pub fn start_node(tcp_port: u16, extra_env: &[(&str, &str)], extra_args: &[&str]) -> anyhow::Result<Self> {
        let root = tempfile::Builder::new().prefix("rill-test-").tempdir()?;
        std::fs::create_dir_all(root.path().join("data"))?;
        let address = SocketAddr::from(([127, 0, 0, 1], tcp_port));
        let mut server = TestServer {
            binary: server_binary(),
            root,
            address,
            extra_env: extra_env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
            extra_args: extra_args.iter().map(|a| (*a).to_owned()).collect(),
            child: None,
            launches: 0,
            ports: transport::ListenerPorts { quic: free_port(), websocket: free_port(), http: free_port() },
            logs_on_drop: true,
        };
        server.launch()?;
        Ok(server)
    }

    /// `127.0.0.1:<port>` of the TCP listener.
    pub fn tcp_address(&self) -> String {
        self.address.to_string()
    }

    /// The TCP port of the server.
    pub fn port(&self) -> u16 {
        self.address.port()
    }

    /// The directory passed as `IGGY_SYSTEM_PATH`.
    pub fn data_dir(&self) -> PathBuf {
        self.root.path().join("data")
    }

    /// The OS process id of the running server, if it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends SIGTERM and waits for the process to exit; fails unless it exits with 0.
    pub fn stop_graceful(&mut self) -> anyhow::Result<()> {
        let mut child = self.child.take().context("server is not running")?;
        let status =
            Command::new("kill").args(["-TERM", &child.id().to_string()]).status().context("run kill -TERM")?;
        if !status.success() {
            bail!("kill -TERM failed: {status}");
        }
        let exit = wait_with_timeout(&mut child, STOP_TIMEOUT);
        match exit {
            Some(exit) if exit.code() == Some(0) => Ok(()),
            Some(exit) => bail!("server exited with {exit} after SIGTERM\n{}", self.logs()),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("server did not exit within {STOP_TIMEOUT:?} of SIGTERM\n{}", self.logs())
            }
        }
    }

    /// Kills the process with SIGKILL (no chance to flush anything) and reaps it.
    pub fn kill9(&mut self) -> anyhow::Result<()> {
        let mut child = self.child.take().context("server is not running")?;
        child.kill().context("SIGKILL the server")?;
        child.wait().context("reap the killed server")?;
        Ok(())
    }

    /// Sets one environment variable (replacing an earlier value) for the launches to come.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.extra_env.retain(|(k, _)| k != key);
        self.extra_env.push((key.to_owned(), value.to_owned()));
    }

    /// Starts the server again on the same data directory and port. A server that still
    /// runs is stopped gracefully first.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        if self.child.is_some() {
            self.stop_graceful()?;
        }
        self.launch()
    }

    /// The tails of the stdout and stderr files of every launch, for diagnostics.
    pub fn logs(&self) -> String {
        self.log_tails(1..=self.launches)
    }

    fn log_tails(&self, launches: std::ops::RangeInclusive<u32>) -> String {
        let mut out = String::new();
        for launch in launches {
            for stream in ["stdout", "stderr"] {
                let path = self.log_path(launch, stream);
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
                out.push_str(&format!("----- {} (last {} lines)\n", path.display(), tail.len()));
                for line in tail {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
        out
    }

    /// Whether dropping the server prints its logs (on by default).
    pub fn print_logs_on_drop(&mut self, on: bool) {
        self.logs_on_drop = on;
    }

    /// The tails of the last launch's stdout and stderr.
    pub fn logs_of_last_launch(&self) -> String {
        self.log_tails(self.launches..=self.launches)
    }

    fn log_path(&self, launch: u32, stream: &str) -> PathBuf {
        self.root.path().join(format!("server-{launch}.{stream}.log"))
    }

    /// Spawns the binary until one instance is up, retrying instances that exit at
    /// once (e.g. the port is still held) for [`BIND_RETRY_WINDOW`].
    fn launch(&mut self) -> anyhow::Result<()> {
        let first_attempt = Instant::now();
        loop {
            let mut child = self.spawn_child()?;
            let stdout = self.log_path(self.launches, "stdout");
            match wait_until_accepting(&mut child, &stdout, self.address, READY_TIMEOUT) {
                Ok(()) => {
                    self.child = Some(child);
                    return Ok(());
                }
                Err(Readiness::Exited(status)) if first_attempt.elapsed() < BIND_RETRY_WINDOW => {
                    eprintln!("rill-server exited early ({status}); retrying launch");
                    std::thread::sleep(Duration::from_millis(250));
                }
                Err(Readiness::Exited(status)) => {
                    bail!("rill-server exited during startup: {status}\n{}", self.logs())
                }
                Err(Readiness::TimedOut) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    bail!("rill-server did not accept TCP within {READY_TIMEOUT:?}\n{}", self.logs())
                }
            }
        }
    }

    fn spawn_child(&mut self) -> anyhow::Result<Child> {
        self.launches += 1;
        let stdout = File::create(self.log_path(self.launches, "stdout"))?;
        let stderr = File::create(self.log_path(self.launches, "stderr"))?;
        let mut command = Command::new(&self.binary);
        command
            .arg("--with-default-root-credentials")
            .args(&self.extra_args)
            .current_dir(self.root.path())
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("IGGY_") {
                command.env_remove(key);
            }
        }
        command.env("IGGY_SYSTEM_PATH", self.data_dir()).env("IGGY_TCP_ADDRESS", self.address.to_string());
        for (key, value) in transport::server_env(&self.address.to_string(), &self.data_dir(), self.ports) {
            command.env(key, value);
        }
        // RILL_TEST_SHARDS=N runs the whole suite against N shards; unpinned, so N may
        // exceed the cores of the machine.
        if let Ok(shards) = std::env::var("RILL_TEST_SHARDS") {
            command.env("IGGY_SYSTEM_SHARDING_CPU_ALLOCATION", shards).env("IGGY_SYSTEM_SHARDING_PIN_THREADS", "false");
        }
        for (key, value) in &self.extra_env {
            command.env(key, value);
        }
        command.spawn().with_context(|| format!("spawn {}", self.binary.display()))
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Test output is captured and shown only for failing tests, where these logs
        // are the first thing one wants to read.
        if self.logs_on_drop {
            eprintln!("rill-server logs for {}:\n{}", self.address, self.logs());
        }
    }
}

enum Readiness {
    Exited(ExitStatus),
    TimedOut,
}

/// Ready means this launch announced its listener on stdout and the port accepts. The
/// announcement matters: a killed predecessor's socket can linger in the kernel for a
/// moment (io_uring tears its rings down asynchronously) and still accept connections.
fn wait_until_accepting(
    child: &mut Child,
    stdout: &Path,
    address: SocketAddr,
    timeout: Duration,
) -> Result<(), Readiness> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(Readiness::Exited(status));
        }
        let announced = std::fs::read_to_string(stdout).is_ok_and(|text| text.contains("listening on"));
        if announced && TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Readiness::TimedOut);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn wait_with_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => return None,
        }
    }
}

// ---------------------------------------------------------------------------------
// Clients
// ---------------------------------------------------------------------------------

/// TCP client settings for tests: Nagle off, and a bounded number of reconnection
/// passes so a dead server turns into an error instead of an endless retry loop.
pub fn client_config(address: &str, reconnect: bool) -> TcpClientConfig {
    let mut config =
        TcpClientConfig { server_address: address.to_owned(), nodelay: true, ..TcpClientConfig::default() };
    config.reconnection.enabled = reconnect;
    config.reconnection.max_retries = Some(3);
    config.reconnection.interval = NonZeroIggyDuration::from_str("200ms").expect("duration");
    config.reconnection.reestablish_after = IggyDuration::from(0u64);
    config
}

/// An `IggyClient` connected over TCP but not logged in.
pub async fn connect_anonymous(address: &str) -> anyhow::Result<IggyClient> {
    connect_with(client_config(address, true)).await
}

/// An `IggyClient` connected over TCP and logged in as the root user.
pub async fn connect_root(address: &str) -> anyhow::Result<IggyClient> {
    let client = connect_anonymous(address).await?;
    client.login_user(ROOT_USERNAME, ROOT_PASSWORD).await?;
    Ok(client)
}

/// A logged-in root client that never reconnects: once the server is gone every call
/// fails instead of dialing again (used by producers racing a kill -9).
pub async fn connect_root_no_reconnect(address: &str) -> anyhow::Result<IggyClient> {
    let client = connect_with(client_config(address, false)).await?;
    client.login_user(ROOT_USERNAME, ROOT_PASSWORD).await?;
    Ok(client)
}

async fn connect_with(config: TcpClientConfig) -> anyhow::Result<IggyClient> {
    let client = IggyClient::new(transport::client_for(config)?);
    client.connect().await?;
    Ok(client)
}

// ---------------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------------

/// A numeric identifier.
pub fn id(value: u32) -> Identifier {
    Identifier::numeric(value).expect("numeric identifier")
}

/// A string identifier.
pub fn named(value: &str) -> Identifier {
    Identifier::named(value).expect("string identifier")
}

/// The Iggy error code of a call that must fail; panics with context if it succeeded.
/// Over HTTP the code travels in the JSON error document (`{"id": code, ...}`), which the
/// client hands back as the error's text.
pub fn error_code<T: std::fmt::Debug>(result: Result<T, IggyError>, what: &str) -> u32 {
    match result {
        Ok(value) => panic!("{what}: expected an error, got Ok({value:?})"),
        Err(IggyError::HttpResponseError(_, reason) | IggyError::ResourceNotFound(reason))
            if !transport::is_binary() =>
        {
            let document: serde_json::Value = serde_json::from_str(&reason)
                .unwrap_or_else(|error| panic!("{what}: error body is not JSON ({error}): {reason}"));
            document["id"].as_u64().unwrap_or_else(|| panic!("{what}: no error id in {reason}")) as u32
        }
        Err(error) => error.as_code(),
    }
}

/// Topic options used by most tests: `partitions` partitions, no compression, never
/// expiring messages, server default size cap, default durability.
pub fn topic_options(partitions: u32) -> TopicCreateOptions {
    TopicCreateOptions {
        partitions_count: Some(partitions),
        compression_algorithm: Some(CompressionAlgorithm::None),
        message_expiry: Some(IggyExpiry::NeverExpire),
        ..TopicCreateOptions::default()
    }
}

/// Creates a stream and one topic in it; returns their ids.
pub async fn create_stream_and_topic(
    client: &IggyClient,
    stream: &str,
    topic: &str,
    partitions: u32,
) -> anyhow::Result<(u32, u32)> {
    let stream_details = client.create_stream(stream).await?;
    let topic_details = client.create_topic(&id(stream_details.id), topic, &topic_options(partitions)).await?;
    Ok((stream_details.id, topic_details.id))
}

/// Deterministic payload of varying length (1..=300 bytes) that covers every byte value.
pub fn sample_payload(seed: u64) -> Vec<u8> {
    let len = 1 + (seed.wrapping_mul(7919) % 300) as usize;
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut payload = format!("m{seed}:").into_bytes();
    while payload.len() < len {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        payload.push((state >> 56) as u8);
    }
    payload
}

/// Deterministic user headers of several kinds for message number `seed`.
pub fn sample_headers(seed: u64) -> BTreeMap<HeaderKey, HeaderValue> {
    let mut headers = BTreeMap::new();
    let key = |k: &str| HeaderKey::from_str(k).expect("header key");
    headers.insert(key("seq"), HeaderValue::from(seed));
    headers.insert(key("even"), HeaderValue::from(seed.is_multiple_of(2)));
    let text = format!("text-{seed}");
    headers.insert(key("label"), HeaderValue::from_str(&text).expect("header value"));
    let raw: Vec<u8> = (0..(1 + seed % 16) as u8).map(|b| b.wrapping_mul(37)).collect();
    headers.insert(key("raw"), HeaderValue::try_from(raw).expect("raw header value"));
    headers
}

/// A message with an explicit id, a payload and optional headers.
pub fn message(message_id: u128, payload: Vec<u8>, headers: Option<BTreeMap<HeaderKey, HeaderValue>>) -> IggyMessage {
    let builder = IggyMessage::builder().id(message_id).payload(payload.into());
    match headers {
        Some(headers) => builder.user_headers(headers).build(),
        None => builder.build(),
    }
    .expect("valid message")
}

/// Message number `seed` of the standard sample set: id `seed + 1`, sample payload and
/// sample headers.
pub fn sample_message(seed: u64) -> IggyMessage {
    message(u128::from(seed) + 1, sample_payload(seed), Some(sample_headers(seed)))
}

/// Panics unless `got` carries the same id, payload, user headers (byte for byte) and
/// origin timestamp as `sent`.
pub fn assert_same_message(sent: &IggyMessage, got: &IggyMessage, context: &str) {
    assert_eq!(got.header.id, sent.header.id, "{context}: id");
    assert_eq!(got.payload.as_ref(), sent.payload.as_ref(), "{context}: payload");
    assert_eq!(got.user_headers.as_deref(), sent.user_headers.as_deref(), "{context}: user headers bytes");
    assert_eq!(got.header.payload_length, sent.header.payload_length, "{context}: payload length");
    assert_eq!(got.header.user_headers_length, sent.header.user_headers_length, "{context}: user headers length");
    // The HTTP API carries no origin timestamp (the SDK sends id, payload and headers), so
    // the server stamps its own; every binary transport must keep the producer's.
    if transport::is_binary() {
        assert_eq!(got.header.origin_timestamp, sent.header.origin_timestamp, "{context}: origin timestamp");
    }
}

/// A server with its HTTP API on, a root client, and a reader of its `/metrics`.
pub async fn start_with_metrics() -> anyhow::Result<(TestServer, IggyClient, http::MetricsReader)> {
    let address = format!("127.0.0.1:{}", free_port());
    let server = TestServer::start_with_env(&[("IGGY_HTTP_ENABLED", "true"), ("IGGY_HTTP_ADDRESS", &address)])?;
    let client = connect_root(&server.tcp_address()).await?;
    let metrics = http::MetricsReader::new(&client, &address).await?;
    Ok((server, client, metrics))
}

/// The identifier of topic `name` in stream 0, whatever id the server gave it.
pub async fn topic_id(client: &IggyClient, name: &str) -> anyhow::Result<u32> {
    let topic = client.get_topic(&id(0), &Identifier::named(name)?).await?;
    Ok(topic.with_context(|| format!("no topic {name}"))?.id)
}

/// Polls one partition from offset 0 until the server returns nothing more, and checks
/// that every poll answers for the partition asked and continues where the last stopped.
pub async fn poll_all(
    client: &IggyClient,
    stream: &Identifier,
    topic: &Identifier,
    partition: u32,
) -> anyhow::Result<Vec<IggyMessage>> {
    let consumer = Consumer::new(id(900_001));
    let mut all: Vec<IggyMessage> = Vec::new();
    loop {
        let next = all.last().map_or(0, |m| m.header.offset + 1);
        let polled = client
            .poll_messages(stream, topic, Some(partition), &consumer, &PollingStrategy::offset(next), 1000, false)
            .await?;
        if polled.messages.is_empty() {
            return Ok(all);
        }
        if polled.partition_id != partition {
            bail!("poll of partition {partition} answered for {}", polled.partition_id);
        }
        if polled.messages[0].header.offset < next {
            bail!("poll from {next} returned offset {}", polled.messages[0].header.offset);
        }
        all.extend(polled.messages);
    }
}

/// The offsets of `messages`, in order.
pub fn offsets(messages: &[IggyMessage]) -> Vec<u64> {
    messages.iter().map(|m| m.header.offset).collect()
}

// ---------------------------------------------------------------------------------
// Helpers for the user, token, permission and consumer-group suites
// ---------------------------------------------------------------------------------

/// An `IggyClient` built from `config`, connected over TCP but not logged in.
pub async fn connect_configured(config: TcpClientConfig) -> anyhow::Result<IggyClient> {
    connect_with(config).await
}

/// An `IggyClient` connected over TCP and logged in as `username`.
pub async fn connect_user(address: &str, username: &str, password: &str) -> anyhow::Result<IggyClient> {
    let client = connect_anonymous(address).await?;
    client.login_user(username, password).await.with_context(|| format!("log in as {username}"))?;
    Ok(client)
}

/// Re-checks `check` every 50 ms until it returns true; fails with `what` once `timeout`
/// has passed. For waiting on asynchronous server work, never for timing assertions.
pub async fn eventually<F, Fut>(timeout: Duration, what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if check().await? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("{what}: not reached within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every regular file under `dir`, recursively (an unreadable directory is skipped).
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&next) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => pending.push(path),
                Ok(kind) if kind.is_file() => files.push(path),
                _ => {}
            }
        }
    }
    files.sort();
    files
}

/// Whether `needle` occurs in `haystack` (an empty needle never does).
pub fn contains_bytes(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|window| window == needle)
}

/// The wire form of an identifier: `[kind u8][len u8][value]`, kind 1 numeric, 2 string.
pub fn identifier_bytes(identifier: &Identifier) -> Vec<u8> {
    let kind = match identifier.kind {
        IdKind::Numeric => 1,
        IdKind::String => 2,
    };
    let mut out = vec![kind, identifier.value.len() as u8];
    out.extend_from_slice(&identifier.value);
    out
}

/// SYNC_CONSUMER_GROUP (606) sent as-is: the caller's assigned partitions in the group,
/// sorted, or `None` when the server answers that the caller is not a member (empty body).
pub async fn sync_consumer_group(
    client: &IggyClient,
    stream: &Identifier,
    topic: &Identifier,
    group: &Identifier,
) -> Result<Option<Vec<u32>>, IggyError> {
    const SYNC_CONSUMER_GROUP_CODE: u32 = 606;
    let mut body = identifier_bytes(stream);
    body.extend(identifier_bytes(topic));
    body.extend(identifier_bytes(group));
    let reply = client.send_binary_request(SYNC_CONSUMER_GROUP_CODE, body.into()).await?;
    if reply.is_empty() {
        return Ok(None);
    }
    // [generation u64][n u32][partition_id u32 x n]
    if reply.len() < 12 {
        return Err(IggyError::InvalidFormat);
    }
    let count = u32::from_le_bytes(reply[8..12].try_into().expect("4 bytes")) as usize;
    if reply.len() != 12 + 4 * count {
        return Err(IggyError::InvalidFormat);
    }
    let mut partitions: Vec<u32> =
        reply[12..].chunks_exact(4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes"))).collect();
    partitions.sort_unstable();
    Ok(Some(partitions))
}
