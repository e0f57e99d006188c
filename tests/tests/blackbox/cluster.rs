//! Three rill-server processes on loopback as one metadata cluster: streams created through
//! the primary reach every node; after kill -9 of the primary the others elect a new one
//! and creates continue; the killed node restarts, rejoins and catches up, and all three
//! end with the same metadata; then the whole cluster restarts at once and loses nothing. Each node is read directly with raw frames, so no client
//! redirection hides which node answered.

use std::time::Duration;

use iggy::prelude::ClusterClient;
use rill_tests::raw::{self, Request};
use rill_tests::{TestServer, connect_root_no_reconnect, free_port, free_ports};

const NODES: usize = 3;

pub(crate) struct Cluster {
    pub nodes: Vec<TestServer>,
    pub addresses: Vec<String>,
    /// Each node's replica-plane address.
    pub planes: Vec<String>,
}

fn start_cluster() -> anyhow::Result<Cluster> {
    start_cluster_with(&|_| Vec::new())
}

/// Three nodes, each with the extra environment `extra(replica id)` gives it.
pub(crate) fn start_cluster_with(extra: &dyn Fn(usize) -> Vec<(&'static str, String)>) -> anyhow::Result<Cluster> {
    start_cluster_of(NODES, extra)
}

/// The replica key every test cluster starts with (a cluster without one does not start);
/// `extra` may set another.
pub(crate) const CLUSTER_KEY: &str = "test-cluster-key-0123456789abcdefghij";

/// `nodes` nodes, each with the extra environment `extra(replica id)` gives it.
pub(crate) fn start_cluster_of(
    nodes: usize,
    extra: &dyn Fn(usize) -> Vec<(&'static str, String)>,
) -> anyhow::Result<Cluster> {
    start_cluster_routed(nodes, extra, &|_, _| {})
}

/// Like `start_cluster_of`, but `route(replica id, roster)` may change where that node dials
/// its peers (its own entry is where it listens).
pub(crate) fn start_cluster_routed(
    nodes: usize,
    extra: &dyn Fn(usize) -> Vec<(&'static str, String)>,
    route: &dyn Fn(usize, &mut Vec<String>),
) -> anyhow::Result<Cluster> {
    let tcp: Vec<u16> = (0..nodes).map(|_| free_port()).collect();
    // Room above each replica port for two shards' partition groups.
    let plane: Vec<u16> = (0..nodes).map(|_| free_ports(3)).collect();
    let roster: Vec<String> = plane.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let replicas = roster.join(",");
    let clients = tcp.iter().map(|p| format!("127.0.0.1:{p}")).collect::<Vec<_>>().join(",");
    let env = [
        ("IGGY_CLUSTER_ENABLED", "true"),
        ("IGGY_CLUSTER_REPLICAS", replicas.as_str()),
        ("IGGY_CLUSTER_CLIENT_ADDRESSES", clients.as_str()),
        ("IGGY_CLUSTER_AUTH_ENABLED", "true"),
        ("IGGY_CLUSTER_AUTH_SHARED_SECRET", CLUSTER_KEY),
        ("IGGY_SYSTEM_SHARDING_CPU_ALLOCATION", "1"),
        ("IGGY_SYSTEM_SHARDING_PIN_THREADS", "false"),
    ];
    let mut nodes = Vec::new();
    for (replica, port) in tcp.iter().enumerate() {
        let id = replica.to_string();
        let mut own = extra(replica);
        let mut routed = roster.clone();
        route(replica, &mut routed);
        if routed != roster {
            own.push(("IGGY_CLUSTER_REPLICAS", routed.join(",")));
        }
        let mut node_env = env.to_vec();
        node_env.extend(own.iter().map(|(key, value)| (*key, value.as_str())));
        nodes.push(TestServer::start_node(*port, &node_env, &["--replica-id", &id])?);
    }
    let addresses = tcp.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let planes = plane.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    Ok(Cluster { nodes, addresses, planes })
}

/// Runs `attempt` until it succeeds; an error means "not yet" until `timeout` has passed.
pub(crate) async fn eventually<F, Fut>(timeout: Duration, what: &str, mut attempt: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match attempt().await {
            Ok(()) => return Ok(()),
            Err(error) if std::time::Instant::now() >= deadline => {
                anyhow::bail!("{what}: not reached within {timeout:?}: {error:#}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// GET_STREAMS on one node, read from that node's own view.
pub(crate) fn streams_on(address: &str) -> anyhow::Result<Vec<u8>> {
    let mut stream = raw::connect(address)?;
    let client = 0xc1u128 << 120 | free_port() as u128;
    let session = raw::try_login(&mut stream, client).map_err(anyhow::Error::msg)?;
    raw::send(&mut stream, &Request::non_replicated(client, 1, session, raw::CODE_GET_STREAMS).frame(&[]));
    let reply = raw::read_frame(&mut stream).expect_frame("streams reply");
    anyhow::ensure!(reply.status() == 0, "status {}", reply.status());
    Ok(reply.body().to_vec())
}

/// Stream names in a GET_STREAMS body (records of 33 fixed bytes, the name, options).
pub(crate) fn names(body: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    let mut at = 0;
    while at + 33 <= body.len() {
        let len = body[at + 32] as usize;
        names.push(String::from_utf8_lossy(&body[at + 33..at + 33 + len]).into_owned());
        let options = raw::u32_at(body, at + 33 + len) as usize;
        at += 33 + len + 4 + options;
    }
    names
}

/// Creates `name` through whichever of `candidates` accepts it (the primary).
pub(crate) async fn create_through_any(cluster: &Cluster, candidates: &[usize], name: &str) -> anyhow::Result<()> {
    let mut last = None;
    for &node in candidates {
        match connect_root_no_reconnect(&cluster.addresses[node]).await {
            Ok(client) => match iggy::prelude::StreamClient::create_stream(&client, name).await {
                Ok(_) => return Ok(()),
                Err(error) => last = Some(anyhow::anyhow!("node {node}: {error}")),
            },
            Err(error) => last = Some(error),
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("no candidate")))
}

/// The status of every node in the cluster metadata node `asked` gives (through the
/// official client, which may move to the primary: any survivor's view will do).
async fn statuses_are(cluster: &Cluster, asked: usize, expected: [u8; NODES]) -> anyhow::Result<()> {
    let client = connect_root_no_reconnect(&cluster.addresses[asked]).await?;
    let metadata = client.get_cluster_metadata().await?;
    let statuses: Vec<u8> = metadata.nodes.iter().map(|node| node.status as u8).collect();
    anyhow::ensure!(statuses == expected, "statuses {statuses:?}, expected {expected:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_fail_over_and_the_killed_primary_catches_up() -> anyhow::Result<()> {
    let mut cluster = start_cluster()?;
    let timeout = Duration::from_secs(30);
    for index in 0..3 {
        let name = format!("before-{index}");
        eventually(timeout, "create through the first primary", || create_through_any(&cluster, &[0], &name)).await?;
    }
    for address in &cluster.addresses {
        let address = address.clone();
        eventually(timeout, "every node has the first streams", || {
            let address = address.clone();
            async move {
                let names = names(&streams_on(&address)?);
                anyhow::ensure!(names.len() == 3, "{address}: {names:?}");
                Ok(())
            }
        })
        .await?;
    }

    eventually(timeout, "cluster metadata names every node healthy", || statuses_are(&cluster, 0, [0, 0, 0])).await?;
    cluster.nodes[0].kill9()?;
    for index in 0..2 {
        let name = format!("after-{index}");
        eventually(timeout, "create through the new primary", || create_through_any(&cluster, &[1, 2], &name)).await?;
    }
    // Unreachable (3): the killed node holds no connection to the survivors any more.
    eventually(timeout, "the killed node is unreachable", || statuses_are(&cluster, 1, [3, 0, 0])).await?;

    cluster.nodes[0].restart()?;
    eventually(timeout, "create once the old primary is back", || create_through_any(&cluster, &[1, 2], "rejoined"))
        .await?;
    eventually(timeout, "the restarted node is healthy again", || statuses_are(&cluster, 2, [0, 0, 0])).await?;
    let expected = ["after-0", "after-1", "before-0", "before-1", "before-2", "rejoined"];
    eventually(timeout, "all three nodes hold the same metadata", || async {
        let bodies: Vec<Vec<u8>> =
            cluster.addresses.iter().map(|address| streams_on(address)).collect::<anyhow::Result<_>>()?;
        let mut sorted = names(&bodies[0]);
        sorted.sort();
        anyhow::ensure!(sorted == expected, "node 0 has {sorted:?}");
        anyhow::ensure!(
            bodies.iter().all(|body| body == &bodies[0]),
            "nodes differ: {:?}",
            bodies.iter().map(|b| names(b)).collect::<Vec<_>>()
        );
        Ok(())
    })
    .await?;

    // The whole cluster goes down at once (one node hard), then comes back: the replicas
    // rebuild their logs from their journals, elect a primary, and lose nothing.
    cluster.nodes[1].kill9()?;
    for node in [0, 2] {
        cluster.nodes[node].stop_graceful()?;
    }
    for node in 0..NODES {
        cluster.nodes[node].restart()?;
    }
    eventually(timeout, "create after a whole-cluster restart", || create_through_any(&cluster, &[0, 1, 2], "reborn"))
        .await?;
    let mut wanted: Vec<&str> = expected.to_vec();
    wanted.push("reborn");
    wanted.sort();
    eventually(timeout, "all three nodes agree after the restart", || async {
        let bodies: Vec<Vec<u8>> =
            cluster.addresses.iter().map(|address| streams_on(address)).collect::<anyhow::Result<_>>()?;
        let mut sorted = names(&bodies[0]);
        sorted.sort();
        anyhow::ensure!(sorted == wanted, "node 0 has {sorted:?}");
        anyhow::ensure!(bodies.iter().all(|body| body == &bodies[0]), "nodes differ");
        Ok(())
    })
    .await?;
    Ok(())
}
