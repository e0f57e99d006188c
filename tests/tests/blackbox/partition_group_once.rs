//! Sends stored once on replicated partitions: with message-id deduplication on, every batch
//! sent again (after its acknowledgement, and again after kill -9 of a group's primary, as a
//! producer retries after a timeout or a failover) is dropped on every replica, so each
//! partition on every node holds each id exactly once, at offsets that run from 0 without a
//! gap.

use std::collections::BTreeMap;

use rill_tests::{create_stream_and_topic, id, poll_all};

use crate::cluster::eventually;
use crate::partition_groups::{
    PARTITIONS, TIMEOUT, client_once_committing, every_node_agrees, send, send_round, start_with,
};

/// Sends every acknowledged batch again (10 ids each, as `send_round` sent them), each
/// retried until acknowledged.
async fn send_again(
    client: &iggy::prelude::IggyClient,
    topic: (u32, u32),
    acknowledged: &BTreeMap<u32, Vec<u128>>,
    what: &str,
) -> anyhow::Result<()> {
    for (partition, ids) in acknowledged {
        for first in ids.chunks(10).map(|chunk| chunk[0]) {
            eventually(TIMEOUT, &format!("{what}: partition {partition}, ids from {first}"), || async {
                anyhow::ensure!(send(client, topic, *partition, first, 10).await, "refused");
                Ok(())
            })
            .await?;
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deduplicating_replicated_topic_stores_each_retried_id_once_across_a_primary_kill() -> anyhow::Result<()> {
    let mut cluster = start_with(&[("IGGY_SYSTEM_MESSAGE_DEDUPLICATION_ENABLED", "true")])?;
    let client = client_once_committing(&cluster).await?;
    let topic = create_stream_and_topic(&client, "once", "events", PARTITIONS).await?;
    let mut acknowledged: BTreeMap<u32, Vec<u128>> = BTreeMap::new();
    let mut next_id = 1u128;
    for round in 0..3 {
        send_round(&client, topic, &format!("round {round}"), &mut next_id, &mut acknowledged).await?;
    }
    send_again(&client, topic, &acknowledged, "a retry").await?;
    // Group 1's primary goes: its successor knows every id the group committed.
    cluster.nodes[1].kill9()?;
    send_again(&client, topic, &acknowledged, "a retry after the failover").await?;
    send_round(&client, topic, "a round after the failover", &mut next_id, &mut acknowledged).await?;
    cluster.nodes[1].restart()?;
    send_again(&client, topic, &acknowledged, "a retry with the node back").await?;
    for (partition, ids) in &acknowledged {
        let polled = poll_all(&client, &id(topic.0), &id(topic.1), *partition).await?;
        let held: Vec<u128> = polled.iter().map(|message| message.header.id).collect();
        assert_eq!(&held, ids, "partition {partition} holds each id once, in the order first sent");
    }
    let partitions: Vec<u32> = acknowledged.keys().copied().collect();
    every_node_agrees(&cluster, topic, &partitions, |partition, held| {
        let ids: Vec<u128> = held.iter().map(|(_, id, _)| *id).collect();
        anyhow::ensure!(ids == acknowledged[&partition], "partition {partition}: {} messages", ids.len());
        let offsets = held.iter().enumerate().all(|(index, (offset, _, _))| *offset == index as u64);
        anyhow::ensure!(offsets, "partition {partition}: offsets with a gap");
        Ok(())
    })
    .await
}
