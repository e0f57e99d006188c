//! A clustered node restarted without partition groups: its metadata recovery commits
//! again the ops since its last metadata checkpoint, and their storage effects (a purge, a
//! topic deleted and created again) must not undo what the node stored after them. (Not
//! named `cluster_restart`: scripts/test.sh's transport passes select `restart::`.)

use iggy::prelude::*;
use rill_tests::{connect_root, create_stream_and_topic, id, message};

use crate::cluster::{create_through_any, eventually, start_cluster_with};
use crate::partition_groups::{Held, TIMEOUT, client_once_committing, poll_on};

/// Sends `ids` to partition 0 in one batch.
async fn send_ids(client: &IggyClient, topic: (u32, u32), ids: std::ops::RangeInclusive<u128>) -> anyhow::Result<()> {
    let mut batch: Vec<IggyMessage> = ids.map(|i| message(i, format!("m{i}").into_bytes(), None)).collect();
    client.send_messages(&id(topic.0), &id(topic.1), &Partitioning::partition_id(0), &mut batch).await?;
    Ok(())
}

/// Each node's own copy of partition 0 of each topic.
fn copies(addresses: &[String], topics: &[(u32, u32)]) -> anyhow::Result<Vec<Vec<Vec<Held>>>> {
    addresses.iter().map(|a| topics.iter().map(|&t| poll_on(a, t, 0)).collect()).collect()
}

/// `copies`, once every node knows every topic (a node just restarted, or a topic just
/// created, answers "not found" for a moment).
async fn copies_once_served(addresses: &[String], topics: &[(u32, u32)]) -> anyhow::Result<Vec<Vec<Vec<Held>>>> {
    let mut served = Vec::new();
    eventually(TIMEOUT, "every node serves every topic", || {
        let got = copies(addresses, topics);
        let ok = got.is_ok();
        if let Ok(got) = got {
            served = got;
        }
        async move {
            anyhow::ensure!(ok, "not yet");
            Ok(())
        }
    })
    .await?;
    Ok(served)
}

/// Without partition groups a partition's messages are on one node only. After each node's
/// restart, every node still holds what it held: the messages stored after a purge, after
/// a topic was deleted and created again, and after both (its metadata recovery commits
/// those ops again; before the fix the restarted node emptied or removed those partitions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_keeps_what_it_stored_after_a_purge_and_a_recreation() -> anyhow::Result<()> {
    let mut cluster = start_cluster_with(&|_| Vec::new())?;
    drop(client_once_committing(&cluster).await?);
    let mut topics = Vec::new();
    for (node, address) in cluster.addresses.iter().enumerate() {
        let client = connect_root(address).await?;
        let base = 100 * node as u128;
        let purged = create_stream_and_topic(&client, &format!("purged-{node}"), "t", 1).await?;
        send_ids(&client, purged, base + 1..=base + 3).await?;
        client.purge_topic(&id(purged.0), &id(purged.1)).await?;
        send_ids(&client, purged, base + 4..=base + 5).await?;
        let recreated = create_stream_and_topic(&client, &format!("recreated-{node}"), "t", 1).await?;
        send_ids(&client, recreated, base + 11..=base + 13).await?;
        client.delete_topic(&id(recreated.0), &id(recreated.1)).await?;
        let created = client.create_topic(&id(recreated.0), "t", &rill_tests::topic_options(1)).await?;
        anyhow::ensure!(created.id == recreated.1, "the recreated topic reuses the id");
        send_ids(&client, recreated, base + 14..=base + 15).await?;
        let both = create_stream_and_topic(&client, &format!("purged-then-recreated-{node}"), "t", 1).await?;
        send_ids(&client, both, base + 21..=base + 22).await?;
        client.purge_topic(&id(both.0), &id(both.1)).await?;
        client.delete_topic(&id(both.0), &id(both.1)).await?;
        client.create_topic(&id(both.0), "t", &rill_tests::topic_options(1)).await?;
        send_ids(&client, both, base + 23..=base + 24).await?;
        topics.extend([purged, recreated, both]);
    }
    let before = copies_once_served(&cluster.addresses, &topics).await?;
    for node in 0..cluster.nodes.len() {
        cluster.nodes[node].restart()?;
        // Committing through the restarted node means its recovery is over.
        let (name, through) = (format!("after-restart-{node}"), [node]);
        eventually(TIMEOUT, "a create through the restarted node", || create_through_any(&cluster, &through, &name))
            .await?;
        let after = copies_once_served(&cluster.addresses, &topics).await?;
        for (index, topic) in topics.iter().enumerate() {
            let ids = |copy: &[Held]| copy.iter().map(|(offset, id, _)| (*offset, *id)).collect::<Vec<_>>();
            anyhow::ensure!(
                after[node][index] == before[node][index],
                "node {node} after its restart, topic {topic:?}: {:?}, before: {:?}",
                ids(&after[node][index]),
                ids(&before[node][index])
            );
        }
    }
    Ok(())
}
