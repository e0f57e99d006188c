//! Binding the client transports on shard 0 (TCP, WebSocket, QUIC, each optionally over
//! TLS) and starting their accept loops. A port that is taken fails the start with a
//! message naming the transport and the address.

use std::path::Path;
use std::rc::Rc;

use anyhow::Context;
use compio::net::TcpListener;
use compio::tls::TlsAcceptor;
use rill_adapter_bus_crossfire::CrossfireBus;
use rill_adapter_tls::Identity;
use rill_adapter_tls::{TlsReader, TlsWriter};
use rill_adapter_transport_tcp::TlsSplit;
use rill_domain::answer::NodePorts;

use crate::config::{Config, Tls};
use crate::env::ProductionShard;

/// Bound listeners, before serving.
pub struct Listeners {
    tcp: Option<(TcpListener, Option<TlsAcceptor>)>,
    websocket: Option<(TcpListener, Option<TlsAcceptor>)>,
    quic: Option<rill_adapter_transport_quic::QuicListener>,
    /// Bound now, served on its own thread once the shards' shared state exists.
    pub http: Option<(std::net::TcpListener, Option<rill_adapter_transport_http::TlsConfig>)>,
    pub ports: NodePorts,
    pub ip: String,
    /// `transport address` pairs, for the start-up line.
    pub summary: Vec<String>,
}

/// The certificate a transport uses: its files, or the shared self-signed one.
struct Certificates<'a> {
    data_path: &'a Path,
    names: Vec<String>,
    self_signed: Option<Identity>,
}

impl Certificates<'_> {
    fn identity(&mut self, tls: &Tls) -> anyhow::Result<Identity> {
        if let Some((cert, key)) = tls.files() {
            return rill_adapter_tls::load(Path::new(cert), Path::new(key)).map_err(anyhow::Error::msg);
        }
        if self.self_signed.is_none() {
            let (identity, path) =
                rill_adapter_tls::self_signed(&self.names, self.data_path).map_err(anyhow::Error::msg)?;
            tracing::info!(certificate = %path.display(), "generated a self-signed certificate");
            self.self_signed = Some(identity);
        }
        Ok(self.self_signed.clone().expect("generated above"))
    }

    fn acceptor(&mut self, tls: &Tls) -> anyhow::Result<Option<TlsAcceptor>> {
        if !tls.enabled {
            return Ok(None);
        }
        let config = rill_adapter_tls::server_config(&self.identity(tls)?, &[]).map_err(anyhow::Error::msg)?;
        Ok(Some(TlsAcceptor::from(config)))
    }
}

fn ip_of(address: &str) -> String {
    address.rsplit_once(':').map_or(address, |(ip, _)| ip).trim_matches(['[', ']']).to_owned()
}

/// Binds every enabled transport.
pub async fn bind_all(config: &Config) -> anyhow::Result<Listeners> {
    let mut names = vec!["localhost".to_owned()];
    for listener in [&config.tcp, &config.quic, &config.websocket, &config.http] {
        let ip = ip_of(&listener.address);
        if !names.contains(&ip) {
            names.push(ip);
        }
    }
    let mut certificates = Certificates { data_path: Path::new(&config.system_path), names, self_signed: None };
    let mut listeners = Listeners {
        tcp: None,
        websocket: None,
        quic: None,
        http: None,
        ports: NodePorts::default(),
        ip: ip_of(&config.tcp.address),
        summary: Vec::new(),
    };
    // Each TLS certificate exists before its listener does: a client that connects the
    // moment the port answers may read the self-signed one.
    if config.tcp.enabled {
        let acceptor = certificates.acceptor(&config.tcp.tls)?;
        let listener = rill_adapter_transport_tcp::bind(&config.tcp.address, "tcp").await?;
        let local = listener.local_addr()?;
        listeners.ports.tcp = local.port();
        listeners.ip = local.ip().to_string();
        listeners.summary.push(format!("tcp{} {local}", if config.tcp.tls.enabled { "+tls" } else { "" }));
        listeners.tcp = Some((listener, acceptor));
    }
    if config.websocket.enabled {
        let acceptor = certificates.acceptor(&config.websocket.tls)?;
        let listener = rill_adapter_transport_tcp::bind(&config.websocket.address, "websocket").await?;
        let local = listener.local_addr()?;
        listeners.ports.websocket = local.port();
        listeners.summary.push(format!("websocket{} {local}", if config.websocket.tls.enabled { "+tls" } else { "" }));
        listeners.websocket = Some((listener, acceptor));
    }
    if config.quic.enabled {
        let identity = certificates.identity(&config.quic.tls)?;
        let tls = rill_adapter_tls::server_config(&identity, &[]).map_err(anyhow::Error::msg)?;
        let listener = rill_adapter_transport_quic::bind(&config.quic.address, (*tls).clone()).await?;
        let local = listener.local_addr().context("reading the quic address")?;
        listeners.ports.quic = local.port();
        listeners.summary.push(format!("quic {local}"));
        listeners.quic = Some(listener);
    }
    if config.http.enabled {
        let tls = match config.http.tls.enabled {
            true => Some(
                rill_adapter_tls::server_config(&certificates.identity(&config.http.tls)?, &[b"http/1.1"])
                    .map_err(anyhow::Error::msg)?,
            ),
            false => None,
        };
        let listener = rill_adapter_transport_http::bind(&config.http.address)?;
        let local = listener.local_addr()?;
        listeners.ports.http = local.port();
        listeners.summary.push(format!("http{} {local}", if config.http.tls.enabled { "+tls" } else { "" }));
        listeners.http = Some((listener, tls));
    }
    Ok(listeners)
}

/// A TLS listener's acceptor with how its accepted streams split into a reader and a writer
/// that work at once (the transports take the split from here: adapters name no other
/// adapter).
fn with_split(acceptor: TlsAcceptor) -> (TlsAcceptor, TlsSplit<TlsReader, TlsWriter>) {
    (acceptor, rill_adapter_tls::split)
}

/// Starts every accept loop; they run until the process ends.
pub fn serve_all(system: &Rc<ProductionShard>, listeners: Listeners, bus: &CrossfireBus) {
    if let Some((listener, tls)) = listeners.tcp {
        compio::runtime::spawn(rill_adapter_transport_tcp::serve(
            system.clone(),
            listener,
            bus.clone(),
            tls.map(with_split),
        ))
        .detach();
    }
    if let Some((listener, tls)) = listeners.websocket {
        compio::runtime::spawn(rill_adapter_transport_ws::serve(
            system.clone(),
            listener,
            bus.clone(),
            tls.map(with_split),
        ))
        .detach();
    }
    if let Some(listener) = listeners.quic {
        compio::runtime::spawn(rill_adapter_transport_quic::serve(system.clone(), listener)).detach();
    }
}
