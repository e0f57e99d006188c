//! Durability across restarts: a graceful stop keeps all state, and a kill -9 keeps every acknowledged message of a persisted topic without ever reusing an offset.

use iggy::prelude::*;
use rill_tests::{
    TestServer, assert_same_message, connect_root, connect_root_no_reconnect, error_code, id, named, offsets, poll_all,
    sample_headers, sample_message, sample_payload, topic_options,
};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A partition, as (stream id, topic id, partition id).
type Location = (u32, u32, u32);
/// Every message of every partition, in location order.
type Contents = Vec<(Location, Vec<IggyMessage>)>;

/// Streams and topics as one comparable listing.
async fn describe_metadata(client: &IggyClient) -> anyhow::Result<Vec<String>> {
    let mut lines = Vec::new();
    let mut streams = client.get_streams().await?;
    streams.sort_by_key(|s| s.id);
    for stream in streams {
        lines.push(format!("stream {} {:?} topics={}", stream.id, stream.name, stream.topics_count));
        let mut topics = client.get_topics(&id(stream.id)).await?;
        topics.sort_by_key(|t| t.id);
        for topic in topics {
            lines.push(format!(
                "  topic {} {:?} partitions={} compression={} expiry={} max_size={} messages={}",
                topic.id,
                topic.name,
                topic.partitions_count,
                topic.compression_algorithm,
                u64::from(topic.message_expiry),
                u64::from(topic.max_topic_size),
                topic.messages_count,
            ));
        }
    }
    Ok(lines)
}

/// Every message of every partition of every topic, keyed by location.
async fn read_everything(client: &IggyClient) -> anyhow::Result<Contents> {
    let mut everything = Vec::new();
    for stream in client.get_streams().await? {
        for topic in client.get_topics(&id(stream.id)).await? {
            for partition in 0..topic.partitions_count {
                let messages = poll_all(client, &id(stream.id), &id(topic.id), partition).await?;
                everything.push(((stream.id, topic.id, partition), messages));
            }
        }
    }
    everything.sort_by_key(|(location, _)| *location);
    Ok(everything)
}

async fn send_batches(
    client: &IggyClient,
    stream: &Identifier,
    topic: &Identifier,
    partition: u32,
    seeds: std::ops::Range<u64>,
) -> anyhow::Result<()> {
    let seeds: Vec<u64> = seeds.collect();
    for chunk in seeds.chunks(100) {
        let mut messages: Vec<IggyMessage> = chunk.iter().copied().map(sample_message).collect();
        let partitioning = Partitioning::partition_id(partition);
        client.send_messages(stream, topic, &partitioning, &mut messages).await?;
    }
    Ok(())
}

/// Builds a server state with gaps in the stream ids, several topics, messages and
/// consumer offsets of both id kinds.
async fn populate(client: &IggyClient) -> anyhow::Result<()> {
    client.create_stream("keep-a").await?;
    client.create_stream("drop-me").await?;
    client.create_stream("keep-b").await?;
    client.delete_stream(&named("drop-me")).await?;
    client.update_stream(&named("keep-b"), "kept-b", &StreamUpdateOptions::default()).await?;
    client.create_topic(&id(0), "events", &topic_options(3)).await?;
    client.create_topic(&id(0), "logs", &topic_options(1)).await?;
    client.create_topic(&id(2), "x", &topic_options(2)).await?;

    for partition in 0..3 {
        let first = u64::from(partition) * 1000;
        send_batches(client, &id(0), &id(0), partition, first..first + 700).await?;
    }
    send_batches(client, &id(0), &id(1), 0, 5000..5050).await?;
    send_batches(client, &id(2), &id(0), 1, 6000..6010).await?;

    let numeric = Consumer::new(id(5));
    let by_name = Consumer::new(named("svc"));
    client.store_consumer_offset(&numeric, &id(0), &id(0), Some(1), 300).await?;
    client.store_consumer_offset(&by_name, &id(0), &id(1), Some(0), 49).await?;
    Ok(())
}

async fn stored_offsets(client: &IggyClient) -> anyhow::Result<(u64, u64)> {
    let numeric = Consumer::new(id(5));
    let by_name = Consumer::new(named("svc"));
    let a = client.get_consumer_offset(&numeric, &id(0), &id(0), Some(1)).await?;
    let b = client.get_consumer_offset(&by_name, &id(0), &id(1), Some(0)).await?;
    Ok((a.expect("numeric offset").stored_offset, b.expect("named offset").stored_offset))
}

fn assert_same_contents(before: &Contents, after: &Contents) {
    let locations = |all: &Contents| -> Vec<Location> { all.iter().map(|(location, _)| *location).collect() };
    assert_eq!(locations(after), locations(before), "partitions after restart");
    for ((location, old), (_, new)) in before.iter().zip(after) {
        assert_eq!(offsets(new), offsets(old), "offsets of {location:?}");
        for (old, new) in old.iter().zip(new) {
            let context = format!("{location:?} offset {}", old.header.offset);
            assert_same_message(old, new, &context);
            assert_eq!(new.header.timestamp, old.header.timestamp, "{context}: append time");
            assert_eq!(new.header.checksum, old.header.checksum, "{context}: checksum");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_restart_preserves_metadata_messages_and_offsets() -> anyhow::Result<()> {
    let mut server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    populate(&client).await?;
    let metadata = describe_metadata(&client).await?;
    let contents = read_everything(&client).await?;
    assert_eq!(contents.iter().map(|(_, m)| m.len()).sum::<usize>(), 2160, "messages written");
    drop(client);

    server.stop_graceful()?;
    server.restart()?;

    let client = connect_root(&server.tcp_address()).await?;
    assert_eq!(describe_metadata(&client).await?, metadata, "metadata after restart");
    assert_same_contents(&contents, &read_everything(&client).await?);
    assert_eq!(stored_offsets(&client).await?, (300, 49), "consumer offsets after restart");
    assert!(client.get_stream(&named("drop-me")).await?.is_none(), "deleted stays deleted");
    let duplicate = client.create_stream("kept-b").await;
    assert_eq!(error_code(duplicate, "recreate existing stream"), 1012);

    // Appends continue after the last offset, and a second restart keeps them too.
    send_batches(&client, &id(0), &id(0), 0, 9000..9005).await?;
    let partition0 = poll_all(&client, &id(0), &id(0), 0).await?;
    assert_eq!(offsets(&partition0), (0..705).collect::<Vec<u64>>());
    let contents = read_everything(&client).await?;
    drop(client);

    server.restart()?;
    let client = connect_root(&server.tcp_address()).await?;
    assert_same_contents(&contents, &read_everything(&client).await?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushed_messages_survive_kill9() -> anyhow::Result<()> {
    let mut server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    client.create_stream("s").await?;
    client.create_topic(&id(0), "t", &topic_options(2)).await?;
    send_batches(&client, &id(0), &id(0), 0, 0..500).await?;
    send_batches(&client, &id(0), &id(0), 1, 500..550).await?;
    client.flush_unsaved_buffer(&id(0), &id(0), 0, true).await?;
    client.flush_unsaved_buffer(&id(0), &id(0), 1, true).await?;
    let contents = read_everything(&client).await?;
    drop(client);

    server.kill9()?;
    server.restart()?;
    let client = connect_root(&server.tcp_address()).await?;
    assert_same_contents(&contents, &read_everything(&client).await?);
    Ok(())
}

/// What the producer knows about one acknowledged message.
#[derive(Debug, Clone)]
struct Acked {
    id: u128,
    payload: Vec<u8>,
    headers: Option<Vec<u8>>,
    origin_timestamp: u64,
}

/// Sends batches of ten until a send fails; records every acknowledged message and
/// returns the error that ended the loop.
async fn produce_until_failure(client: IggyClient, acked: Arc<Mutex<Vec<Acked>>>) -> IggyError {
    let mut seed = 0u64;
    loop {
        let mut batch: Vec<IggyMessage> = (seed..seed + 10)
            .map(|s| {
                let payload = sample_payload(s);
                rill_tests::message(u128::from(s) + 1, payload, Some(sample_headers(s)))
            })
            .collect();
        seed += 10;
        let partitioning = Partitioning::partition_id(0);
        if let Err(error) = client.send_messages(&id(0), &id(0), &partitioning, &mut batch).await {
            return error;
        }
        let mut guard = acked.lock().expect("acked list");
        guard.extend(batch.iter().map(|m| Acked {
            id: m.header.id,
            payload: m.payload.to_vec(),
            headers: m.user_headers.as_ref().map(|h| h.to_vec()),
            origin_timestamp: m.header.origin_timestamp,
        }));
    }
}

fn acked_count(acked: &Arc<Mutex<Vec<Acked>>>) -> usize {
    acked.lock().expect("acked list").len()
}

/// Runs a producer against a durability=persisted topic, kills the server with SIGKILL
/// mid-stream and returns every message the producer saw acknowledged.
async fn produce_then_kill9(server: &mut TestServer) -> anyhow::Result<Vec<Acked>> {
    let admin = connect_root(&server.tcp_address()).await?;
    admin.create_stream("durable").await?;
    let options = TopicCreateOptions { durability: Durability::Persisted, ..topic_options(1) };
    admin.create_topic(&id(0), "orders", &options).await?;
    drop(admin);

    let producer = connect_root_no_reconnect(&server.tcp_address()).await?;
    let acked = Arc::new(Mutex::new(Vec::new()));
    let task = tokio::spawn(produce_until_failure(producer, acked.clone()));
    while acked_count(&acked) < 3000 {
        if task.is_finished() {
            let error = task.await?;
            panic!("the producer failed while the server was up: {error}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.kill9()?;
    // The producer ends with the first send that fails once the server is gone.
    let _last_error = tokio::time::timeout(Duration::from_secs(60), task).await??;
    let acked = acked.lock().expect("acked list").clone();
    Ok(acked)
}

/// The stored log is gap-free and starts with every acknowledged message, in order.
fn assert_acknowledged_prefix(acked: &[Acked], stored: &[IggyMessage]) {
    let (stored_count, acked_count) = (stored.len(), acked.len());
    assert!(stored_count >= acked_count, "{stored_count} stored < {acked_count} acknowledged");
    let expected: Vec<u64> = (0..stored_count as u64).collect();
    assert_eq!(offsets(stored), expected, "offsets without holes");
    for (index, (sent, got)) in acked.iter().zip(stored).enumerate() {
        assert_eq!(got.header.id, sent.id, "acknowledged message {index}: id");
        assert_eq!(got.payload.as_ref(), sent.payload.as_slice(), "{index}: payload");
        assert_eq!(got.user_headers.as_deref(), sent.headers.as_deref(), "{index}: headers");
        if rill_tests::transport::is_binary() {
            // HTTP carries no origin timestamp; the server stamps its own.
            assert_eq!(got.header.origin_timestamp, sent.origin_timestamp, "{index}: origin");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_keeps_every_acknowledged_message_of_a_persisted_topic() -> anyhow::Result<()> {
    let mut server = TestServer::start()?;
    let acked = produce_then_kill9(&mut server).await?;

    server.restart()?;
    let client = connect_root(&server.tcp_address()).await?;
    let stored = poll_all(&client, &id(0), &id(0), 0).await?;
    assert_acknowledged_prefix(&acked, &stored);

    // New messages get offsets after every surviving one; none is reused.
    let last_old = stored.last().expect("messages survived").header.offset;
    let mut fresh: Vec<IggyMessage> = (0..5).map(|s| sample_message(1_000_000 + s)).collect();
    client.send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut fresh).await?;
    let after = poll_all(&client, &id(0), &id(0), 0).await?;
    assert_eq!(offsets(&after), (0..=last_old + 5).collect::<Vec<u64>>());
    for (old, now) in stored.iter().zip(&after) {
        let offset = old.header.offset;
        assert_eq!(now.header.id, old.header.id, "offset {offset} was rewritten");
    }
    for (sent, got) in fresh.iter().zip(&after[stored.len()..]) {
        assert!(got.header.offset > last_old, "new offset {}", got.header.offset);
        assert_same_message(sent, got, "message sent after the crash");
    }
    Ok(())
}
