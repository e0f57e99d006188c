//! Which transport the official client uses in this test run: `RILL_TEST_TRANSPORT` =
//! `tcp` (default), `tcp-tls`, `quic`, `websocket` or `http`. The same test bodies then run over
//! each transport; the server always keeps plain TCP too, for raw-socket tests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use iggy::prelude::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestTransport {
    Tcp,
    TcpTls,
    Quic,
    WebSocket,
    Http,
}

/// The transport of this test process.
pub fn current() -> TestTransport {
    match std::env::var("RILL_TEST_TRANSPORT").as_deref() {
        Ok("tcp-tls") => TestTransport::TcpTls,
        Ok("quic") => TestTransport::Quic,
        Ok("websocket") => TestTransport::WebSocket,
        Ok("http") => TestTransport::Http,
        _ => TestTransport::Tcp,
    }
}

/// The other listeners of a server, keyed by its TCP address.
#[derive(Debug, Clone)]
struct Endpoints {
    quic: String,
    websocket: String,
    http: String,
    certificate: PathBuf,
}

static ENDPOINTS: Mutex<BTreeMap<String, Endpoints>> = Mutex::new(BTreeMap::new());

/// Environment for a server on `tcp_address`: the transport under test enabled on free
/// ports, the others off.
pub fn server_env(tcp_address: &str, data_dir: &Path, ports: ListenerPorts) -> Vec<(String, String)> {
    let ListenerPorts { quic: quic_port, websocket: websocket_port, http: http_port } = ports;
    let transport = current();
    let endpoints = Endpoints {
        quic: format!("127.0.0.1:{quic_port}"),
        websocket: format!("127.0.0.1:{websocket_port}"),
        http: format!("127.0.0.1:{http_port}"),
        certificate: data_dir.join("runtime/certs/self_signed_cert.pem"),
    };
    let mut env = vec![
        ("IGGY_HTTP_ENABLED".to_owned(), (transport == TestTransport::Http).to_string()),
        ("IGGY_HTTP_ADDRESS".to_owned(), endpoints.http.clone()),
        ("IGGY_QUIC_ENABLED".to_owned(), (transport == TestTransport::Quic).to_string()),
        ("IGGY_QUIC_ADDRESS".to_owned(), endpoints.quic.clone()),
        ("IGGY_WEBSOCKET_ENABLED".to_owned(), (transport == TestTransport::WebSocket).to_string()),
        ("IGGY_WEBSOCKET_ADDRESS".to_owned(), endpoints.websocket.clone()),
    ];
    if transport == TestTransport::TcpTls {
        env.push(("IGGY_TCP_TLS_ENABLED".to_owned(), "true".to_owned()));
    }
    ENDPOINTS.lock().unwrap_or_else(|p| p.into_inner()).insert(tcp_address.to_owned(), endpoints);
    env
}

/// Ports for the listeners besides TCP.
#[derive(Debug, Clone, Copy)]
pub struct ListenerPorts {
    pub quic: u16,
    pub websocket: u16,
    pub http: u16,
}

/// Whether this run's client speaks the binary protocol (everything but HTTP). Tests of
/// binary-only behaviour (raw frames, sessions bound to a connection) check it.
pub fn is_binary() -> bool {
    current() != TestTransport::Http
}

fn endpoints(tcp_address: &str) -> Option<Endpoints> {
    ENDPOINTS.lock().unwrap_or_else(|p| p.into_inner()).get(tcp_address).cloned()
}

/// The HTTP listener's address of the server on `tcp_address` (listening when the run's
/// transport is HTTP or the test enabled it).
pub fn http_address(tcp_address: &str) -> Option<String> {
    endpoints(tcp_address).map(|e| e.http)
}

/// Builds the client for this run's transport from a TCP client configuration, keeping its
/// address (mapped to the same server's other listener), heartbeat and reconnection.
pub fn client_for(config: TcpClientConfig) -> Result<ClientWrapper, IggyError> {
    let Some(endpoints) = endpoints(&config.server_address) else {
        return Ok(ClientWrapper::Tcp(TcpClient::create(Arc::new(config))?));
    };
    let reconnection = &config.reconnection;
    Ok(match current() {
        TestTransport::Tcp => ClientWrapper::Tcp(TcpClient::create(Arc::new(config))?),
        TestTransport::TcpTls => {
            let tls = TcpClientConfig {
                tls_enabled: true,
                tls_domain: "localhost".to_owned(),
                tls_ca_file: Some(endpoints.certificate.display().to_string()),
                tls_validate_certificate: true,
                ..config
            };
            ClientWrapper::Tcp(TcpClient::create(Arc::new(tls))?)
        }
        TestTransport::Quic => {
            let mut quic = QuicClientConfig {
                server_address: endpoints.quic,
                server_name: "localhost".to_owned(),
                validate_certificate: false,
                heartbeat_interval: config.heartbeat_interval,
                // The client's default 100 KB windows cap a 1 MB request at a few MB/s on
                // loopback; the server offers 64 MiB windows.
                send_window: 16 * 1024 * 1024,
                receive_window: 16 * 1024 * 1024,
                ..QuicClientConfig::default()
            };
            quic.reconnection.enabled = reconnection.enabled;
            quic.reconnection.max_retries = reconnection.max_retries;
            quic.reconnection.interval = reconnection.interval;
            ClientWrapper::Quic(QuicClient::create(Arc::new(quic))?)
        }
        TestTransport::WebSocket => {
            let mut ws = WebSocketClientConfig {
                server_address: endpoints.websocket,
                heartbeat_interval: config.heartbeat_interval,
                ..WebSocketClientConfig::default()
            };
            ws.reconnection.enabled = reconnection.enabled;
            ws.reconnection.max_retries = reconnection.max_retries;
            ws.reconnection.interval = reconnection.interval;
            ClientWrapper::WebSocket(WebSocketClient::create(Arc::new(ws))?)
        }
        TestTransport::Http => {
            let http = HttpClientConfig {
                api_url: format!("http://{}", endpoints.http),
                // A refused request is an answer to assert on, not something to retry.
                retries: 0,
                heartbeat_interval: config.heartbeat_interval,
                ..HttpClientConfig::default()
            };
            ClientWrapper::Http(HttpClient::create(Arc::new(http))?)
        }
    })
}

/// How get_me and get_clients name this run's transport.
pub fn client_transport_name() -> &'static str {
    match current() {
        TestTransport::Tcp | TestTransport::TcpTls => "TCP",
        TestTransport::Quic => "QUIC",
        TestTransport::WebSocket => "WebSocket",
        TestTransport::Http => "HTTP",
    }
}
