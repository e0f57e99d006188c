//! Thread-per-core behaviour seen from outside: connections are spread over the shards (all
//! of them on a small machine, the peers of shard 0 on a larger one), and partitions owned by
//! every shard are served from any connection.

use iggy::prelude::*;
use rill_tests::{TestServer, connect_root, id, poll_all, sample_message, topic_options};

fn sharded(shards: u32) -> anyhow::Result<TestServer> {
    let count = shards.to_string();
    TestServer::start_with_env(&[
        ("IGGY_SYSTEM_SHARDING_CPU_ALLOCATION", count.as_str()),
        ("IGGY_SYSTEM_SHARDING_PIN_THREADS", "false"),
    ])
}

/// The shard each accepted connection was served by, from the server's log.
fn serving_shards(server: &TestServer) -> Vec<String> {
    server
        .logs()
        .lines()
        .filter(|line| line.contains("client connected"))
        .filter_map(|line| line.split_whitespace().find_map(|field| field.strip_prefix("shard=")).map(str::to_owned))
        .collect()
}

/// Opens `count` connections and returns the shard serving each, as logged.
async fn connect_many(server: &TestServer, count: usize) -> anyhow::Result<(Vec<IggyClient>, Vec<String>)> {
    let mut clients = Vec::new();
    for _ in 0..count {
        let client = connect_root(&server.tcp_address()).await?;
        client.get_me().await?;
        clients.push(client);
    }
    let shards = serving_shards(server);
    assert!(shards.len() >= count, "connections not logged: {shards:?}\n{}", server.logs());
    Ok((clients, shards))
}

#[tokio::test]
async fn a_small_machine_serves_connections_on_every_shard() -> anyhow::Result<()> {
    let server = sharded(3)?;
    let (_clients, shards) = connect_many(&server, 6).await?;
    for shard in ["0", "1", "2"] {
        assert!(shards.iter().any(|s| s == shard), "shard {shard} served none: {shards:?}");
    }
    Ok(())
}

#[tokio::test]
async fn a_larger_machine_keeps_shard_zero_for_listeners() -> anyhow::Result<()> {
    let server = sharded(5)?;
    let (_clients, shards) = connect_many(&server, 8).await?;
    assert!(shards.iter().all(|shard| shard != "0"), "shard 0 kept a plaintext connection: {shards:?}");
    for shard in ["1", "2", "3", "4"] {
        assert!(shards.iter().any(|s| s == shard), "not spread over peers: {shards:?}");
    }
    Ok(())
}

#[tokio::test]
async fn one_shard_serves_everything_itself() -> anyhow::Result<()> {
    let server = sharded(1)?;
    let client = connect_root(&server.tcp_address()).await?;
    client.get_me().await?;
    assert!(serving_shards(&server).iter().all(|shard| shard == "0"));
    Ok(())
}

#[tokio::test]
async fn partitions_of_every_shard_answer_any_connection() -> anyhow::Result<()> {
    let server = sharded(3)?;
    let writer = connect_root(&server.tcp_address()).await?;
    let reader = connect_root(&server.tcp_address()).await?;
    for stream in 0..3u32 {
        writer.create_stream(&format!("stream-{stream}")).await?;
        writer.create_topic(&id(stream), "events", &topic_options(4)).await?;
    }
    // 12 partitions spread over three shards; most of these requests travel the bus to
    // their owner and back.
    for stream in 0..3u32 {
        for partition in 0..4u32 {
            let seed = u64::from(stream * 100 + partition * 10);
            let mut batch: Vec<IggyMessage> = (seed..seed + 10).map(sample_message).collect();
            writer.send_messages(&id(stream), &id(0), &Partitioning::partition_id(partition), &mut batch).await?;
        }
    }
    for stream in 0..3u32 {
        for partition in 0..4u32 {
            let polled = poll_all(&reader, &id(stream), &id(0), partition).await?;
            let seed = u64::from(stream * 100 + partition * 10);
            let ids: Vec<u128> = polled.iter().map(|m| m.header.id).collect();
            assert_eq!(
                ids,
                (seed + 1..seed + 11).map(u128::from).collect::<Vec<_>>(),
                "stream {stream} partition {partition}"
            );
        }
    }
    let stats = reader.get_stats().await?;
    assert_eq!((stats.streams_count, stats.partitions_count, stats.messages_count), (3, 12, 120));
    Ok(())
}

/// Shards the server logged moving a connection to.
fn move_targets(server: &TestServer) -> Vec<String> {
    let logs = server.logs();
    let moved = logs.lines().filter(|line| line.contains("client moved"));
    moved
        .filter_map(|line| line.split_whitespace().find_map(|field| field.strip_prefix("shard=")).map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn a_connection_moves_to_the_shard_owning_its_partition_and_keeps_its_session() -> anyhow::Result<()> {
    let server = sharded(2)?;
    let admin = connect_root(&server.tcp_address()).await?;
    admin.create_stream("moving").await?;
    admin.create_topic(&id(0), "events", &topic_options(1)).await?;
    // Placement alternates over both shards, so one of these two is served away from the
    // partition's owner; its sends and polls cross the bus until it moves.
    let (clients, _) = connect_many(&server, 2).await?;
    for (index, client) in clients.iter().enumerate() {
        let me = client.get_me().await?;
        for round in 0..40u64 {
            let seed = (index as u64) * 1000 + round;
            let mut batch = vec![sample_message(seed)];
            client.send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut batch).await?;
        }
        let polled = poll_all(client, &id(0), &id(0), 0).await?;
        assert_eq!(polled.len(), 40 * (index + 1), "everything sent so far reads back");
        assert_eq!(client.get_me().await?.client_id, me.client_id, "the session went along");
    }
    let targets = move_targets(&server);
    assert_eq!(targets.len(), 1, "exactly the connection on the other shard moved:\n{}", server.logs());
    // Moved once, it stays: more traffic moves nothing.
    let mut batch: Vec<IggyMessage> = (0..5).map(sample_message).collect();
    for _ in 0..40 {
        clients[0].send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut batch).await?;
    }
    assert_eq!(move_targets(&server), targets);
    Ok(())
}
