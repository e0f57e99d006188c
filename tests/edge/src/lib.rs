//! Harness of the protocol 0.12 black-box tests: runs the real `rill-server` binary (the one
//! the main workspace built, `target/debug/rill-server`, or `RILL_SERVER_BIN`) on a
//! temporary data directory and free ports, and connects the official 0.12-line client
//! (`iggy` 0.11.1-edge.9) to it.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use iggy::prelude::*;
use tempfile::TempDir;

pub mod cluster;

pub const ROOT_USERNAME: &str = "iggy";
pub const ROOT_PASSWORD: &str = "iggy";

const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// What the server prints on standard output once every listener is up.
const LISTENING: &str = "rill-server listening on";

/// The repository root: this crate lives at `tests/edge`.
pub fn repository_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository exists")
}

/// `RILL_SERVER_BIN`, else the main workspace's debug build, which must exist: the test
/// command builds it first.
pub fn server_binary() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("RILL_SERVER_BIN") {
        return Ok(PathBuf::from(path));
    }
    let binary = repository_dir().join("target/debug/rill-server");
    if !binary.is_file() {
        bail!("{} is missing: build it with `cargo build -p rill-bootstrap` first", binary.display());
    }
    Ok(binary)
}

/// A port on 127.0.0.1 that was free a moment ago.
/// A stream's or topic's identifier by name.
pub fn id(name: &str) -> iggy::prelude::Identifier {
    iggy::prelude::Identifier::named(name).expect("a valid name")
}

pub fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0)).and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// One rill-server process with its own data directory; killed when dropped.
pub struct TestServer {
    root: TempDir,
    address: SocketAddr,
    env: Vec<(String, String)>,
    args: Vec<String>,
    child: Option<Child>,
    log: PathBuf,
}

impl TestServer {
    pub fn start() -> anyhow::Result<Self> {
        Self::start_with_env(&[])
    }

    /// A server with extra `IGGY_*` settings.
    pub fn start_with_env(env: &[(&str, &str)]) -> anyhow::Result<Self> {
        Self::start_node(free_port(), env, &[])
    }

    /// A server on TCP port `port` with extra settings and command-line arguments (a
    /// cluster's node: its replica id).
    pub fn start_node(port: u16, env: &[(&str, &str)], args: &[&str]) -> anyhow::Result<Self> {
        let root = tempfile::Builder::new().prefix("rill-edge-").tempdir()?;
        std::fs::create_dir_all(root.path().join("data"))?;
        let address = SocketAddr::from(([127, 0, 0, 1], port));
        let log = root.path().join("server.log");
        let env = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let args = args.iter().map(|arg| (*arg).to_owned()).collect();
        let mut server = Self { root, address, env, args, child: None, log };
        server.launch()?;
        Ok(server)
    }

    fn launch(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let mut command = Command::new(server_binary()?);
        command.arg("--with-default-root-credentials").args(&self.args).stdin(Stdio::null());
        command.stdout(log.try_clone()?).stderr(log);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("IGGY_") {
                command.env_remove(key);
            }
        }
        command.env("IGGY_SYSTEM_PATH", self.data_dir()).env("IGGY_TCP_ADDRESS", self.address.to_string());
        for transport in ["QUIC", "HTTP", "WEBSOCKET"] {
            command.env(format!("IGGY_{transport}_ENABLED"), "false");
        }
        command.envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        // A port that answers may still be the previous process's listener, which the kernel
        // tears down a moment after that process exits: this start is ready only once it
        // printed its own "listening" line too.
        let started_before = self.logs().matches(LISTENING).count();
        let mut child = command.spawn().context("spawn rill-server")?;
        let deadline = Instant::now() + READY_TIMEOUT;
        while TcpStream::connect_timeout(&self.address, Duration::from_millis(200)).is_err()
            || self.logs().matches(LISTENING).count() == started_before
        {
            if let Some(status) = child.try_wait()? {
                bail!("rill-server exited with {status}:\n{}", self.logs());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                bail!("rill-server did not listen within {READY_TIMEOUT:?}:\n{}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child = Some(child);
        Ok(())
    }

    /// Stops the server with SIGTERM (a graceful shutdown) and starts it again on the same
    /// data directory and port.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            Command::new("kill").args(["-TERM", &child.id().to_string()]).status()?;
            child.wait()?;
        }
        self.launch()
    }

    /// Kills the server with SIGKILL (nothing flushed, nothing said to its peers).
    pub fn kill9(&mut self) -> anyhow::Result<()> {
        let mut child = self.child.take().context("the server is not running")?;
        child.kill().context("SIGKILL the server")?;
        child.wait().context("reap the killed server")?;
        Ok(())
    }

    /// Starts a killed server again on its data directory and port.
    pub fn start_again(&mut self) -> anyhow::Result<()> {
        self.launch()
    }

    /// Stops the server and starts it again with `env` as its extra settings; an error (with
    /// what the server printed) when it does not start.
    pub fn restart_with_env(&mut self, env: &[(&str, &str)]) -> anyhow::Result<()> {
        self.env = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        self.restart()
    }

    pub fn tcp_address(&self) -> String {
        self.address.to_string()
    }

    pub fn data_dir(&self) -> PathBuf {
        self.root.path().join("data")
    }

    /// Everything the server printed so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A 0.12 client connected over TCP, not logged in.
    pub async fn client(&self) -> anyhow::Result<IggyClient> {
        let client = IggyClient::builder().with_tcp().with_server_address(self.tcp_address()).build()?;
        client.connect().await?;
        Ok(client)
    }

    /// A 0.12 client logged in as root.
    pub async fn root_client(&self) -> anyhow::Result<IggyClient> {
        let client = self.client().await?;
        client.login_user(ROOT_USERNAME, ROOT_PASSWORD).await?;
        Ok(client)
    }
}

/// A binary transport a 0.12 client reaches the server over, each with its own server
/// settings (see [`TestServer::start_over`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    Tcp,
    TcpTls,
    WebSocket,
    WebSocketTls,
}

impl TestServer {
    /// A server serving `over`: TCP with TLS on its self-signed certificate, or a WebSocket
    /// listener (plain or TLS) on a free port beside its TCP one.
    pub fn start_over(over: Over) -> anyhow::Result<Self> {
        let websocket = format!("127.0.0.1:{}", free_port());
        let env: Vec<(&str, &str)> = match over {
            Over::Tcp => vec![],
            Over::TcpTls => vec![("IGGY_TCP_TLS_ENABLED", "true")],
            Over::WebSocket => vec![("IGGY_WEBSOCKET_ENABLED", "true"), ("IGGY_WEBSOCKET_ADDRESS", &websocket)],
            Over::WebSocketTls => vec![
                ("IGGY_WEBSOCKET_ENABLED", "true"),
                ("IGGY_WEBSOCKET_ADDRESS", &websocket),
                ("IGGY_WEBSOCKET_TLS_ENABLED", "true"),
            ],
        };
        let server = Self::start_with_env(&env)?;
        if matches!(over, Over::WebSocket | Over::WebSocketTls) {
            let address: SocketAddr = websocket.parse()?;
            let deadline = Instant::now() + READY_TIMEOUT;
            while TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_err() {
                if Instant::now() > deadline {
                    bail!("no websocket listener on {address}:\n{}", server.logs());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(server)
    }

    /// A 0.12 client logged in as root over `over`, which the server was started for.
    pub async fn root_client_over(&self, over: Over) -> anyhow::Result<IggyClient> {
        let certificate = self.data_dir().join("runtime/certs/self_signed_cert.pem").display().to_string();
        let websocket = || self.env.iter().find(|(key, _)| key == "IGGY_WEBSOCKET_ADDRESS").map(|(_, v)| v.clone());
        let client = match over {
            Over::Tcp => return self.root_client().await,
            Over::TcpTls => IggyClient::builder()
                .with_tcp()
                .with_server_address(self.tcp_address())
                .with_tls_enabled(true)
                .with_tls_domain("localhost".to_owned())
                .with_tls_ca_file(certificate)
                .with_tls_validate_certificate(true)
                .build()?,
            Over::WebSocket => IggyClient::builder()
                .with_websocket()
                .with_server_address(websocket().context("a websocket listener")?)
                .build()?,
            Over::WebSocketTls => IggyClient::builder()
                .with_websocket()
                .with_server_address(websocket().context("a websocket listener")?)
                .with_tls_enabled(true)
                .with_tls_domain("localhost".to_owned())
                .with_tls_ca_file(certificate)
                .with_tls_validate_certificate(true)
                .build()?,
        };
        client.connect().await?;
        client.login_user(ROOT_USERNAME, ROOT_PASSWORD).await?;
        Ok(client)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- rill-server log ---\n{}", self.logs());
        }
    }
}
