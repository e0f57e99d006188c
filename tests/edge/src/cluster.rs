//! Three `rill-server` processes forming one cluster for the 0.12 client: partitions
//! replicated through partition groups, two shards a node, so group 0 starts with its
//! primary on node 0 (which also leads the metadata, and which the client talks to) and
//! group 1 on node 1, whose sends node 0 forwards.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use anyhow::bail;
use iggy::prelude::*;

use crate::{TestServer, free_port};

/// The replica key every test cluster carries (a cluster without one does not start).
const CLUSTER_KEY: &str = "edge-cluster-key-0123456789abcdefghij";
/// How long the cluster has to commit its root account.
const FORM_TIMEOUT: Duration = Duration::from_secs(40);

/// `count` consecutive ports on 127.0.0.1 that were free a moment ago: a node's replica
/// port and its partition groups' above it.
fn free_ports(count: u16) -> u16 {
    loop {
        let base = free_port();
        let held: Vec<TcpListener> =
            (0..count).filter_map(|i| TcpListener::bind(("127.0.0.1", base.checked_add(i)?)).ok()).collect();
        if held.len() == usize::from(count) {
            return base;
        }
    }
}

pub struct EdgeCluster {
    pub nodes: Vec<TestServer>,
}

impl EdgeCluster {
    /// Three replicating nodes; returns once node 0 logs the root account in.
    pub async fn start() -> anyhow::Result<Self> {
        let tcp: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let planes: Vec<u16> = (0..3).map(|_| free_ports(3)).collect();
        let replicas = planes.iter().map(|p| format!("127.0.0.1:{p}")).collect::<Vec<_>>().join(",");
        let clients = tcp.iter().map(|p| format!("127.0.0.1:{p}")).collect::<Vec<_>>().join(",");
        let env = [
            ("IGGY_CLUSTER_ENABLED", "true"),
            ("IGGY_CLUSTER_REPLICAS", replicas.as_str()),
            ("IGGY_CLUSTER_CLIENT_ADDRESSES", clients.as_str()),
            ("IGGY_CLUSTER_AUTH_ENABLED", "true"),
            ("IGGY_CLUSTER_AUTH_SHARED_SECRET", CLUSTER_KEY),
            ("IGGY_CLUSTER_REPLICATE_PARTITIONS", "true"),
            ("IGGY_SYSTEM_SHARDING_CPU_ALLOCATION", "2"),
            ("IGGY_SYSTEM_SHARDING_PIN_THREADS", "false"),
        ];
        let mut nodes = Vec::new();
        for (replica, port) in tcp.iter().enumerate() {
            nodes.push(TestServer::start_node(*port, &env, &["--replica-id", &replica.to_string()])?);
        }
        let cluster = Self { nodes };
        let deadline = Instant::now() + FORM_TIMEOUT;
        loop {
            match cluster.nodes[0].root_client().await {
                Ok(_) => return Ok(cluster),
                Err(error) if Instant::now() > deadline => bail!("the cluster formed no root account: {error}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    /// A 0.12 client of node 0, logged in as root.
    pub async fn client(&self) -> anyhow::Result<IggyClient> {
        self.nodes[0].root_client().await
    }
}
