//! Wiring a clustered node: the replica plane's listener and connections, the replica's
//! tick, and the root account, which the primary of a new cluster commits once it runs.

use std::rc::Rc;
use std::time::Duration;

use anyhow::Context;
use compio::net::TcpListener;
use rill_application::ports::ReplicaNetwork;
use rill_application::replication::TICK_MS;

use crate::config::ClusterConfig;
use crate::server::ProductionShard;

/// Binds this node's replica-plane address and dials its peers (nothing on one node).
pub async fn bind(cluster: &ClusterConfig) -> anyhow::Result<(Option<TcpListener>, Option<Box<dyn ReplicaNetwork>>)> {
    if !cluster.enabled {
        return Ok((None, None));
    }
    let address = &cluster.replicas[cluster.replica_id as usize];
    let listener = rill_adapter_replica_tcp::bind(address).await.context("starting the replica plane")?;
    tracing::info!(replica = cluster.replica_id, %address, replicas = cluster.replicas.len(), "replica plane listening");
    let network = rill_adapter_replica_tcp::connect(cluster.replicas.clone(), cluster.replica_id);
    Ok((Some(listener), Some(Box::new(network))))
}

/// Serves peers' messages, ticks the replica every `TICK_MS`, and makes sure the root
/// account exists once this node leads.
pub fn serve(system: &Rc<ProductionShard>, listener: Option<TcpListener>) {
    let Some(listener) = listener else { return };
    let receiver = system.clone();
    let handler: rill_adapter_replica_tcp::Handler = Rc::new(move |message| {
        let system = receiver.clone();
        Box::pin(async move { system.on_replica_message(message).await })
    });
    compio::runtime::spawn(rill_adapter_replica_tcp::serve(listener, handler)).detach();
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
