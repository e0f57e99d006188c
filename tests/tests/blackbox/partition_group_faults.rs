//! Replicated partitions across network faults: three nodes of two shards, each node's
//! replica planes (metadata and both partition groups) behind a fault-injecting proxy
//! (`rill_tests::proxy`). A node cut off from both peers while far more sends commit than
//! the group journals keep catches up by state transfer (the group's state, then the
//! batches fetched from a peer); a group primary cut off is replaced and sends go on; a
//! link cut one way and slow links leave the groups committing. Every acknowledged message
//! stays readable at one offset, and in the end every node's partition files are
//! byte-identical.

use std::collections::BTreeMap;
use std::time::Duration;

use iggy::prelude::*;
use rill_tests::proxy::{ReplicaProxy, Rule};
use rill_tests::{create_stream_and_topic, free_ports, id};

use crate::cluster::{Cluster, eventually, start_cluster_with};
use crate::partition_groups::{
    PARTITIONS, SHARDS, TIMEOUT, check_partitions, client_once_committing, every_node_serves, messages_on, send_round,
    stop_and_compare,
};

/// Three replicating nodes whose rosters name the proxies; each listens behind its own.
fn start() -> anyhow::Result<(Cluster, Vec<ReplicaProxy>)> {
    let planes = 1 + SHARDS;
    let listen: Vec<u16> = (0..3).map(|_| free_ports(planes)).collect();
    let proxies = (0..3u8)
        .map(|node| ReplicaProxy::start_planes(node, ([127, 0, 0, 1], listen[node as usize]).into(), planes))
        .collect::<std::io::Result<Vec<_>>>()?;
    let roster = proxies.iter().map(|p| p.address.to_string()).collect::<Vec<_>>().join(",");
    let cluster = start_cluster_with(&|node| {
        vec![
            ("IGGY_CLUSTER_REPLICATE_PARTITIONS", "true".to_owned()),
            ("IGGY_SYSTEM_SHARDING_CPU_ALLOCATION", SHARDS.to_string()),
            ("IGGY_CLUSTER_REPLICAS", roster.clone()),
            ("IGGY_CLUSTER_LISTEN_ADDRESS", format!("127.0.0.1:{}", listen[node])),
        ]
    })?;
    Ok((cluster, proxies))
}

/// Cuts `node` off from both peers, every plane, both directions.
fn isolate(proxies: &[ReplicaProxy], node: u8) {
    for other in (0..3u8).filter(|&other| other != node) {
        proxies[usize::from(node)].set(other, Rule::Drop, Rule::Drop);
        proxies[usize::from(other)].set(node, Rule::Drop, Rule::Drop);
    }
}

/// Cuts every partition group's plane between every pair of nodes; the metadata plane stays.
fn cut_groups(proxies: &[ReplicaProxy]) {
    for (node, proxy) in proxies.iter().enumerate() {
        for other in (0..3u8).filter(|&other| usize::from(other) != node) {
            for plane in 1..=SHARDS {
                proxy.set_plane(plane, other, Rule::Drop, Rule::Drop);
            }
        }
    }
}

fn heal(proxies: &[ReplicaProxy]) {
    for proxy in proxies {
        proxy.heal();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_catches_up_by_state_transfer_and_a_cut_off_primary_is_replaced() -> anyhow::Result<()> {
    let (mut cluster, proxies) = start()?;
    let client = client_once_committing(&cluster).await?;
    let topic = create_stream_and_topic(&client, "faults", "events", PARTITIONS).await?;
    let mut acknowledged: BTreeMap<u32, Vec<u128>> = BTreeMap::new();
    let mut next_id = 1u128;
    send_round(&client, topic, "the first round", &mut next_id, &mut acknowledged).await?;

    // Node 2 backs both groups; cut off, it misses far more commits than a journal keeps
    // (a checkpoint every eight), stored consumer offsets among them.
    isolate(&proxies, 2);
    for round in 0..20 {
        send_round(&client, topic, &format!("round {round} without node 2"), &mut next_id, &mut acknowledged).await?;
    }
    let reader = Consumer::new(id(5));
    for partition in 0..PARTITIONS {
        let offset = u64::from(3 + partition);
        client.store_consumer_offset(&reader, &id(topic.0), &id(topic.1), Some(partition), offset).await?;
    }
    let total: u64 = acknowledged.values().map(|ids| ids.len() as u64).sum();
    let alone = messages_on(&cluster.addresses[2], "faults")?;
    assert!(alone < total, "node 2 applied {alone} of {total} messages while cut off");
    heal(&proxies);
    every_node_serves(&cluster, topic, &acknowledged).await?;
    let logs = std::fs::read_to_string(cluster.nodes[2].data_dir().join("logs/rill.log")).unwrap_or_default();
    assert!(
        logs.contains("the partition caught up from its peers"),
        "node 2 caught up without fetching batches from a peer: was it ever behind the journals?"
    );

    // Group 1's primary (node 1) cut off: its group elects another and node 0 forwards there.
    isolate(&proxies, 1);
    for round in 0..3 {
        let what = format!("round {round} without node 1");
        send_round(&client, topic, &what, &mut next_id, &mut acknowledged).await?;
    }
    heal(&proxies);

    // One way only: nothing from node 0 reaches node 2; then slow links everywhere.
    proxies[2].set(0, Rule::Drop, Rule::Pass);
    proxies[0].set(2, Rule::Pass, Rule::Drop);
    send_round(&client, topic, "a round with a one-way cut", &mut next_id, &mut acknowledged).await?;
    heal(&proxies);
    for (to, proxy) in proxies.iter().enumerate() {
        for from in (0..3u8).filter(|from| usize::from(*from) != to) {
            proxy.set(from, Rule::Delay(Duration::from_millis(10)), Rule::Delay(Duration::from_millis(10)));
        }
    }
    send_round(&client, topic, "a round over slow links", &mut next_id, &mut acknowledged).await?;
    heal(&proxies);

    eventually(TIMEOUT, "node 0 serves every acknowledged message", || check_partitions(&client, topic, &acknowledged))
        .await?;
    for partition in 0..PARTITIONS {
        let stored = client.get_consumer_offset(&reader, &id(topic.0), &id(topic.1), Some(partition)).await?;
        assert_eq!(stored.map(|info| info.stored_offset), Some(u64::from(3 + partition)), "partition {partition}");
    }
    every_node_serves(&cluster, topic, &acknowledged).await?;
    drop(client);
    let files = stop_and_compare(&mut cluster)?;
    let offsets = files.keys().filter(|path| path.components().any(|c| c.as_os_str() == "consumers")).count();
    assert_eq!(offsets, PARTITIONS as usize, "an offset file per partition on every node: {:?}", files.keys());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_while_the_groups_cannot_commit_empties_every_partition_once_they_can() -> anyhow::Result<()> {
    let (mut cluster, proxies) = start()?;
    let client = client_once_committing(&cluster).await?;
    let topic = create_stream_and_topic(&client, "purged", "events", PARTITIONS).await?;
    let (mut next_id, mut before) = (1u128, BTreeMap::new());
    send_round(&client, topic, "a round before the purge", &mut next_id, &mut before).await?;

    // The groups cannot commit while the metadata can: the purge commits, and every node's
    // resets of the partitions time out together (the purge may be answered with that
    // error), none of them keeping the others from being submitted.
    cut_groups(&proxies);
    let _ = client.purge_topic(&id(topic.0), &id(topic.1)).await;
    heal(&proxies);
    // The resets commit from the primaries' pipelines, or the next send to a partition
    // submits its reset first: every partition starts again at offset 0.
    let mut after = BTreeMap::new();
    send_round(&client, topic, "a round after the purge", &mut next_id, &mut after).await?;
    eventually(TIMEOUT, "offsets from 0 after the purge", || check_partitions(&client, topic, &after)).await?;
    for (partition, sent) in &after {
        let held = rill_tests::poll_all(&client, &id(topic.0), &id(topic.1), *partition).await?;
        let ids: Vec<u128> = held.iter().map(|m| m.header.id).collect();
        assert_eq!(&ids, sent, "partition {partition} holds only what was sent after the purge");
    }
    every_node_serves(&cluster, topic, &after).await?;
    drop(client);
    stop_and_compare(&mut cluster)?;
    Ok(())
}
