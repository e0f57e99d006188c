//! Wiring a clustered node: the replica plane's listener and connections with their key
//! handshake and TLS, the replica's tick, and the root account, which the primary of a new
//! cluster commits once it runs; and (unless `replicate_partitions` is off) each shard's partition group
//! and its own plane, at the replica port + 1 + the shard's index.

use std::rc::Rc;
use std::time::Duration;

use anyhow::Context;
use compio::net::TcpListener;
use rill_adapter_replica_tcp::Security;
use rill_adapter_replica_tcp::handshake::Keys;
use rill_application::ports::ReplicaNetwork;
use rill_application::replication::TICK_MS;

use crate::config::ClusterConfig;
use crate::env::ProductionShard;

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
    Ok(Security { keys, tls: Some((server, client)) })
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
    if !cluster.replicate_partitions {
        tracing::warn!(
            "cluster.replicate_partitions = false: messages stay on the node that took them, and are lost \
             with it; only metadata is replicated"
        );
    }
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
        Rc::new(move |replica, up| watched.shared().replica.peer_connection(replica, up));
    let (me, replicas) = (cluster.replica_id, cluster.replicas.len() as u8);
    let plane = rill_adapter_replica_tcp::serve(listener, handler, presence, security, me, replicas);
    compio::runtime::spawn(plane).detach();
    spawn_ticker(system, |system| Box::pin(async move { system.replica_tick().await }));
    let root = system.clone();
    compio::runtime::spawn(async move {
        while !root.ensure_root_user().await {
            compio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .detach();
}

/// One tick of a replica the shard drives.
type Tick = fn(Rc<ProductionShard>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>;

/// Runs `tick` every `TICK_MS` for as long as the shard runs.
fn spawn_ticker(system: &Rc<ProductionShard>, tick: Tick) {
    let system = system.clone();
    compio::runtime::spawn(async move {
        loop {
            compio::time::sleep(Duration::from_millis(TICK_MS)).await;
            tick(system.clone()).await;
        }
    })
    .detach();
}

/// `address` with its port moved up by `1 + shard`: where group `shard`'s plane is.
fn group_address(address: &str, shard: u16) -> anyhow::Result<String> {
    let (host, port) = address.rsplit_once(':').with_context(|| format!("`{address}` has no port"))?;
    let port = port.parse::<u16>().ok().and_then(|p| p.checked_add(1 + shard));
    let port = port.with_context(|| format!("no port for partition group {shard} above `{address}`"))?;
    Ok(format!("{host}:{port}"))
}

/// Opens this shard's partition group and its plane (nothing unless the cluster replicates
/// partitions): its listener, its connections to the same group on every peer, its tick.
/// The shard's partitions must be open: a restarted replica replays into them.
pub async fn start_group(system: &Rc<ProductionShard>, cluster: &ClusterConfig) -> anyhow::Result<()> {
    if !(cluster.enabled && cluster.replicate_partitions) {
        return Ok(());
    }
    let shard = system.shard_id();
    let security = security(cluster)?;
    let own = match cluster.listen_address.as_str() {
        "" => &cluster.replicas[cluster.replica_id as usize],
        other => other,
    };
    let listen = group_address(own, shard)?;
    let roster = cluster.replicas.iter().map(|a| group_address(a, shard)).collect::<anyhow::Result<Vec<_>>>()?;
    let listener = rill_adapter_replica_tcp::bind(&listen)
        .await
        .with_context(|| format!("starting partition group {shard}'s replica plane"))?;
    let network = rill_adapter_replica_tcp::connect(roster, cluster.replica_id, security.clone());
    system
        .open_group(cluster.membership(), Box::new(network), rand::random())
        .await
        .with_context(|| format!("opening partition group {shard}"))?;
    tracing::info!(group = shard, address = %listen, "partition group replica plane listening");
    let receiver = system.clone();
    let handler: rill_adapter_replica_tcp::Handler = Rc::new(move |message| {
        let system = receiver.clone();
        Box::pin(async move { system.on_group_message(message).await })
    });
    let presence: rill_adapter_replica_tcp::Presence = Rc::new(|_, _| {});
    let (me, replicas) = (cluster.replica_id, cluster.replicas.len() as u8);
    compio::runtime::spawn(rill_adapter_replica_tcp::serve(listener, handler, presence, security, me, replicas))
        .detach();
    spawn_ticker(system, |system| Box::pin(async move { system.group_tick().await }));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::group_address;

    #[test]
    fn group_planes_sit_above_the_replica_port() {
        assert_eq!(group_address("127.0.0.1:8100", 0).unwrap(), "127.0.0.1:8101");
        assert_eq!(group_address("[::1]:8100", 3).unwrap(), "[::1]:8104");
        assert!(group_address("127.0.0.1:65535", 0).is_err());
        assert!(group_address("no-port", 0).is_err());
    }
}
