//! The stock 0.11 SDK against a three-node cluster: once cluster metadata names three nodes it
//! routes every auto-commit poll and offset store through GET_POLL_ROUTING /
//! GET_CONSUMER_OFFSET_ROUTING, a data connection of its own, ATTACH_CONSUMER_SESSION and
//! POLL_MESSAGES_ON_PRIMARY. A client that first dials a backup is led to the primary, and
//! group polls, offset stores and reads all work through those codes.

use std::collections::BTreeSet;
use std::time::Duration;

use iggy::prelude::*;
use rill_tests::{connect_root, message, named, topic_options};

use crate::cluster::{create_through_any, eventually, start_cluster_with};

const TIMEOUT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_routes_group_polls_and_offset_stores_in_a_cluster() -> anyhow::Result<()> {
    // Every node advertises every transport (the ports only have to be named here).
    let advertised = |base: u16| (0..3).map(|n| format!("127.0.0.1:{}", base + n)).collect::<Vec<_>>().join(",");
    let cluster = start_cluster_with(&|_| {
        vec![
            ("IGGY_CLUSTER_QUIC_ADDRESSES", advertised(18080)),
            ("IGGY_CLUSTER_HTTP_ADDRESSES", advertised(13000)),
            ("IGGY_CLUSTER_WEBSOCKET_ADDRESSES", advertised(18092)),
        ]
    })?;
    // Wait for the first primary to lead before a client asks who leads.
    eventually(TIMEOUT, "the cluster commits", || create_through_any(&cluster, &[0], "warm-up")).await?;
    // Dialing a backup: the SDK's leader check moves the client to the primary.
    let client = connect_root(&cluster.addresses[1]).await?;
    let metadata = client.get_cluster_metadata().await?;
    assert_eq!(metadata.nodes.len(), 3);
    for (index, node) in metadata.nodes.iter().enumerate() {
        let ports = &node.endpoints;
        let expected = (18080 + index as u16, 13000 + index as u16, 18092 + index as u16);
        assert_eq!((ports.quic, ports.http, ports.websocket), expected, "node {index} advertises every transport");
        assert_eq!(ports.tcp.to_string(), cluster.addresses[index].rsplit(':').next().unwrap_or_default());
    }
    let (s, t) = (named("routed"), named("events"));
    client.create_stream("routed").await?;
    client.create_topic(&s, "events", &topic_options(2)).await?;
    let mut sent = BTreeSet::new();
    for partition in 0..2u32 {
        let mut batch: Vec<IggyMessage> = (0..50u32)
            .map(|i| message(u128::from(partition * 100 + i + 1), format!("p{partition}-{i}").into_bytes(), None))
            .collect();
        sent.extend(batch.iter().map(|m| m.header.id));
        client.send_messages(&s, &t, &Partitioning::partition_id(partition), &mut batch).await?;
    }

    // A group member's auto-commit polls go through 103, 14 and 104 on a data connection.
    client.create_consumer_group(&s, &t, "workers").await?;
    client.join_consumer_group(&s, &t, &named("workers")).await?;
    let group = Consumer::group(named("workers"));
    let mut polled = BTreeSet::new();
    for _ in 0..40 {
        let batch = client.poll_messages(&s, &t, None, &group, &PollingStrategy::next(), 20, true).await?;
        for got in &batch.messages {
            assert!(polled.insert(got.header.id), "message {} polled twice", got.header.id);
        }
        if polled.len() == sent.len() {
            break;
        }
    }
    assert_eq!(polled, sent, "every message reached the group once");
    // Auto-commit stored the group's offsets on the primary.
    for partition in 0..2u32 {
        let offset = client.get_consumer_offset(&group, &s, &t, Some(partition)).await?.expect("a stored offset");
        assert_eq!(offset.stored_offset, 49, "partition {partition}");
    }

    // A single consumer's offset store and delete go through 123, 14 and 121/122.
    let reader = Consumer::new(Identifier::numeric(7)?);
    client.store_consumer_offset(&reader, &s, &t, Some(1), 17).await?;
    let stored = client.get_consumer_offset(&reader, &s, &t, Some(1)).await?.expect("stored");
    assert_eq!(stored.stored_offset, 17);
    client.delete_consumer_offset(&reader, &s, &t, Some(1)).await?;
    assert!(client.get_consumer_offset(&reader, &s, &t, Some(1)).await?.is_none(), "deleted");

    // The routing codes name a partition that exists: a missing one is refused as such.
    let missing = client.poll_messages(&s, &t, Some(9), &reader, &PollingStrategy::next(), 1, true).await;
    assert!(missing.is_err(), "a poll of partition 9 of 2 succeeded");
    Ok(())
}

/// The Python SDK wraps the Rust one: the same routing from Python (tests/python/), with the
/// partitions replicated and across kill -9 of partition group 1's primary (node 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_routes_group_polls_in_a_cluster() -> anyhow::Result<()> {
    let mut cluster = start_cluster_with(&|_| {
        vec![
            ("IGGY_CLUSTER_REPLICATE_PARTITIONS", "true".to_owned()),
            ("IGGY_SYSTEM_SHARDING_CPU_ALLOCATION", "2".to_owned()),
        ]
    })?;
    eventually(TIMEOUT, "the cluster commits", || create_through_any(&cluster, &[0], "warm-up")).await?;
    let stdout = run_python(&cluster.addresses[2], "before").await?;
    assert!(stdout.contains("before: 60 messages polled once each"), "{stdout}");
    cluster.nodes[1].kill9()?;
    let stdout = run_python(&cluster.addresses[2], "after").await?;
    assert!(stdout.contains("after: 60 messages polled once each"), "{stdout}");
    Ok(())
}

/// Runs tests/python/cluster_routing.py against `address` for `phase`; its stdout.
async fn run_python(address: &str, phase: &str) -> anyhow::Result<String> {
    let script = rill_tests::workspace_dir().join("tests/python/cluster_routing.py");
    let run = tokio::process::Command::new("python3").arg(&script).arg(address).arg(phase).output();
    let output = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .map_err(|_| anyhow::anyhow!("the Python SDK run ({phase}) did not end within 120 s"))?
        .map_err(|error| anyhow::anyhow!("python3 did not start ({error}); scripts/test.sh installs apache-iggy"))?;
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    anyhow::ensure!(
        output.status.success(),
        "the Python SDK failed in phase {phase} ({}):\n{stdout}\n{stderr}\n(apache-iggy 0.9.0 comes from `python3 -m pip install apache-iggy==0.9.0`)",
        output.status
    );
    Ok(stdout.into_owned())
}
