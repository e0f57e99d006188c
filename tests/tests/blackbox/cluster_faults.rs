//! Three metadata replicas behind fault-injecting proxies (`rill_tests::proxy`, one in front
//! of each node's replica listener): a primary cut off from both peers is replaced and
//! commits nothing alone; after healing it catches up; a link cut in one direction only, and
//! delays on every link, leave a cluster that commits and converges.

use std::time::Duration;

use rill_tests::free_port;
use rill_tests::proxy::{ReplicaProxy, Rule};

use crate::cluster::{Cluster, create_through_any, eventually, names, start_cluster_with, streams_on};

const TIMEOUT: Duration = Duration::from_secs(40);

/// Three nodes whose roster names the proxies; each node listens behind its own.
fn start() -> anyhow::Result<(Cluster, Vec<ReplicaProxy>)> {
    let listen: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let proxies = (0..3u8)
        .map(|node| ReplicaProxy::start(node, ([127, 0, 0, 1], listen[node as usize]).into()))
        .collect::<std::io::Result<Vec<_>>>()?;
    let roster = proxies.iter().map(|p| p.address.to_string()).collect::<Vec<_>>().join(",");
    let cluster = start_cluster_with(&|node| {
        vec![
            ("IGGY_CLUSTER_REPLICAS", roster.clone()),
            ("IGGY_CLUSTER_LISTEN_ADDRESS", format!("127.0.0.1:{}", listen[node])),
            // The proxies stand before the metadata plane only (partition_group_faults.rs
            // puts them before the groups').
            ("IGGY_CLUSTER_REPLICATE_PARTITIONS", "false".to_owned()),
        ]
    })?;
    Ok((cluster, proxies))
}

/// Cuts every byte between `a` and `b`, on connections either of them dialed.
fn cut(proxies: &[ReplicaProxy], a: u8, b: u8) {
    proxies[usize::from(b)].set(a, Rule::Drop, Rule::Drop);
    proxies[usize::from(a)].set(b, Rule::Drop, Rule::Drop);
}

async fn everyone_has(cluster: &Cluster, wanted: &[&str]) -> anyhow::Result<()> {
    let mut wanted: Vec<String> = wanted.iter().map(|s| (*s).to_owned()).collect();
    wanted.sort();
    eventually(TIMEOUT, &format!("every node lists {wanted:?}"), || async {
        let bodies: Vec<Vec<u8>> = cluster.addresses.iter().map(|a| streams_on(a)).collect::<anyhow::Result<_>>()?;
        let mut first = names(&bodies[0]);
        first.sort();
        anyhow::ensure!(first == wanted, "node 0 lists {first:?}");
        anyhow::ensure!(bodies.iter().all(|b| b == &bodies[0]), "nodes differ");
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_primary_is_replaced_and_catches_up_and_one_way_cuts_heal() -> anyhow::Result<()> {
    let (cluster, proxies) = start()?;
    eventually(TIMEOUT, "create through the first primary", || create_through_any(&cluster, &[0], "before")).await?;
    everyone_has(&cluster, &["before"]).await?;

    // The primary loses both peers: they elect one of themselves and go on without it.
    cut(&proxies, 0, 1);
    cut(&proxies, 0, 2);
    eventually(TIMEOUT, "create without node 0", || create_through_any(&cluster, &[1, 2], "during")).await?;
    let alone = names(&streams_on(&cluster.addresses[0])?);
    assert!(!alone.contains(&"during".to_owned()), "the cut-off node applied what it could not have had");
    for proxy in &proxies {
        proxy.heal();
    }
    everyone_has(&cluster, &["before", "during"]).await?;

    // One direction only: nothing from 1 reaches 2, everything from 2 reaches 1.
    proxies[2].set(1, Rule::Drop, Rule::Pass);
    proxies[1].set(2, Rule::Pass, Rule::Drop);
    eventually(TIMEOUT, "create with a one-way cut", || create_through_any(&cluster, &[0, 1, 2], "one-way")).await?;
    for proxy in &proxies {
        proxy.heal();
    }
    everyone_has(&cluster, &["before", "during", "one-way"]).await?;

    // Slow links everywhere: still one history.
    for (to, proxy) in proxies.iter().enumerate() {
        for from in (0..3u8).filter(|from| usize::from(*from) != to) {
            proxy.set(from, Rule::Delay(Duration::from_millis(15)), Rule::Delay(Duration::from_millis(15)));
        }
    }
    eventually(TIMEOUT, "create over slow links", || create_through_any(&cluster, &[0, 1, 2], "slow")).await?;
    everyone_has(&cluster, &["before", "during", "one-way", "slow"]).await
}

/// Starts node 0 of a three-node roster on three shards a few times, with the port
/// `offset` above its replica port held by the test: each start must fail on that port,
/// exit with 1, and leave no shard panicking on its way out.
fn start_refused_with_port_taken(offset: u16, replicate_partitions: &str, naming: &str) -> anyhow::Result<()> {
    let plane = rill_tests::free_ports(4);
    let _taken = std::net::TcpListener::bind(("127.0.0.1", plane + offset))?;
    let tcp = free_port();
    let tcp_address = format!("127.0.0.1:{tcp}");
    let replicas = format!("127.0.0.1:{plane},127.0.0.1:{},127.0.0.1:{}", free_port(), free_port());
    let clients = format!("{tcp_address},127.0.0.1:{},127.0.0.1:{}", free_port(), free_port());
    let env = [
        ("IGGY_TCP_ADDRESS", tcp_address.as_str()),
        ("IGGY_CLUSTER_ENABLED", "true"),
        ("IGGY_CLUSTER_REPLICAS", replicas.as_str()),
        ("IGGY_CLUSTER_CLIENT_ADDRESSES", clients.as_str()),
        ("IGGY_CLUSTER_AUTH_ENABLED", "true"),
        ("IGGY_CLUSTER_AUTH_SHARED_SECRET", crate::cluster::CLUSTER_KEY),
        ("IGGY_CLUSTER_REPLICATE_PARTITIONS", replicate_partitions),
        ("IGGY_SYSTEM_SHARDING_CPU_ALLOCATION", "3"),
        ("IGGY_SYSTEM_SHARDING_PIN_THREADS", "false"),
    ];
    for attempt in 0..5 {
        let (code, stderr) = rill_tests::run_until_exit(tempfile::tempdir()?.path(), &env)?;
        assert_eq!(code, Some(1), "attempt {attempt}: {stderr}");
        assert!(stderr.contains(naming) && stderr.contains("Address already in use"), "attempt {attempt}: {stderr}");
        assert!(!stderr.contains("panicked"), "attempt {attempt}: a shard panicked: {stderr}");
    }
    Ok(())
}

#[test]
fn a_taken_replica_port_fails_the_start_without_a_panic() -> anyhow::Result<()> {
    start_refused_with_port_taken(0, "false", "starting the replica plane")
}

#[test]
fn a_taken_partition_group_port_fails_the_start_after_the_peer_shards_stopped() -> anyhow::Result<()> {
    // Shard 0's group port: its start fails after the peer shards started theirs, so they
    // must be stopped before shard 0 lets go of the metadata they read.
    start_refused_with_port_taken(1, "true", "starting partition group 0's replica plane")
}
