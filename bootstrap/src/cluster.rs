//! Wiring a clustered node: the replica plane's listener and connections with their key
//! handshake and TLS, the replica's tick, and the root account, which the primary of a new
//! cluster commits once it runs.

use std::rc::Rc;
use std::time::Duration;

use anyhow::Context;
use compio::net::TcpListener;
use compio::tls::{TlsAcceptor, TlsConnector};
use rill_adapter_replica_tcp::Security;
use rill_adapter_replica_tcp::handshake::Keys;
use rill_application::ports::ReplicaNetwork;
use rill_application::replication::TICK_MS;

use crate::config::ClusterConfig;
use crate::server::ProductionShard;

/// The protocol name replica connections negotiate over TLS.
const REPLICA_ALPN: &[u8] = b"rill-replica";

/// The plane's keys and TLS from `[cluster.auth]` and `[cluster.tls]`.
fn security(cluster: &ClusterConfig) -> anyhow::Result<Security> {
    let settings = &cluster.security;
    let keys = match &settings.auth {
        Some((current, previous)) => Keys::new(current.as_bytes(), previous.as_deref().map(str::as_bytes)),
        None => Keys::none(),
    };
    let Some(tls) = &settings.tls else { return Ok(Security { keys, tls: None }) };
    let address = &cluster.replicas[cluster.replica_id as usize];
    let ip = address.rsplit_once(':').map_or(address.as_str(), |(ip, _)| ip).trim_matches(['[', ']']);
    let (identity, trust) = match tls.self_signed {
        true => (
            rill_adapter_tls::generate(&["localhost".to_owned(), ip.to_owned()]),
            rill_adapter_tls::Trust::AnyCertificate,
        ),
        false => (
            rill_adapter_tls::load(tls.cert_file.as_ref(), tls.key_file.as_ref()),
            rill_adapter_tls::Trust::CaFile(tls.ca_file.clone().into()),
        ),
    };
    let identity = identity.map_err(anyhow::Error::msg).context("cluster.tls")?;
    let server = rill_adapter_tls::server_config(&identity, &[REPLICA_ALPN]).map_err(anyhow::Error::msg)?;
    let client = rill_adapter_tls::client_config(&trust, &[REPLICA_ALPN]).map_err(anyhow::Error::msg)?;
    Ok(Security { keys, tls: Some((TlsAcceptor::from(server), TlsConnector::from(client))) })
}

/// Binds this node's replica-plane address and dials its peers (nothing on one node).
pub async fn bind(
    cluster: &ClusterConfig,
) -> anyhow::Result<(Option<(TcpListener, Security)>, Option<Box<dyn ReplicaNetwork>>)> {
    if !cluster.enabled {
        return Ok((None, None));
    }
    let security = security(cluster)?;
    let address = match cluster.listen_address.as_str() {
        "" => &cluster.replicas[cluster.replica_id as usize],
        other => other,
    };
    let listener = rill_adapter_replica_tcp::bind(address).await.context("starting the replica plane")?;
    let (auth, tls) = (security.keys.enabled(), security.tls.is_some());
    tracing::info!(replica = cluster.replica_id, %address, replicas = cluster.replicas.len(), auth, tls, "replica plane listening");
    if !auth {
        tracing::warn!(
            %address,
            "the replica plane is open: any process that reaches it can take part in the cluster; set [cluster.auth] \
             (and [cluster.tls]) unless the replica network is private"
        );
    }
    let network = rill_adapter_replica_tcp::connect(cluster.replicas.clone(), cluster.replica_id, security.clone());
    Ok((Some((listener, security)), Some(Box::new(network))))
}

/// Serves peers' messages, ticks the replica every `TICK_MS`, and makes sure the root
/// account exists once this node leads.
pub fn serve(system: &Rc<ProductionShard>, cluster: &ClusterConfig, listener: Option<(TcpListener, Security)>) {
    let Some((listener, security)) = listener else { return };
    let receiver = system.clone();
    let handler: rill_adapter_replica_tcp::Handler = Rc::new(move |message| {
        let system = receiver.clone();
        Box::pin(async move { system.on_replica_message(message).await })
    });
    let watched = system.clone();
    let presence: rill_adapter_replica_tcp::Presence =
        Rc::new(move |replica, up| watched.shared.replica.peer_connection(replica, up));
    let (me, replicas) = (cluster.replica_id, cluster.replicas.len() as u8);
    let plane = rill_adapter_replica_tcp::serve(listener, handler, presence, security, me, replicas);
    compio::runtime::spawn(plane).detach();
    let ticker = system.clone();
    compio::runtime::spawn(async move {
        loop {
            compio::time::sleep(Duration::from_millis(TICK_MS)).await;
            ticker.replica_tick().await;
        }
    })
    .detach();
    let root = system.clone();
    compio::runtime::spawn(async move {
        while !root.ensure_root_user().await {
            compio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .detach();
}
