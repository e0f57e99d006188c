//! Sending and polling messages through the official 0.11.0 client: byte-exact round trips, every polling strategy, partitioning, auto-commit and message-path errors.

use iggy::prelude::*;
use rill_tests::{
    TestServer, assert_same_message, connect_root, create_stream_and_topic, error_code, id, message, named, offsets,
    poll_all, sample_message,
};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const STREAM_ID_NOT_FOUND: u32 = 1009;
const TOPIC_ID_NOT_FOUND: u32 = 2010;
const PARTITION_NOT_FOUND: u32 = 3007;

/// Sends `count` sample messages (seeds `first..first + count`) to one partition in
/// batches of `batch`; returns the messages as sent.
async fn send_samples(
    client: &IggyClient,
    stream: &Identifier,
    topic: &Identifier,
    partition: u32,
    seeds: std::ops::Range<u64>,
    batch: usize,
) -> anyhow::Result<Vec<IggyMessage>> {
    let mut sent = Vec::new();
    let seeds: Vec<u64> = seeds.collect();
    for chunk in seeds.chunks(batch) {
        let mut messages: Vec<IggyMessage> = chunk.iter().copied().map(sample_message).collect();
        client.send_messages(stream, topic, &Partitioning::partition_id(partition), &mut messages).await?;
        sent.extend(messages);
    }
    Ok(sent)
}

async fn poll(
    client: &IggyClient,
    partition: u32,
    consumer: &Consumer,
    strategy: PollingStrategy,
    count: u32,
    auto_commit: bool,
) -> Result<PolledMessages, IggyError> {
    client.poll_messages(&id(0), &id(0), Some(partition), consumer, &strategy, count, auto_commit).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_messages_round_trip_byte_exact() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    let (s, t) = create_stream_and_topic(&client, "bulk", "events", 1).await?;
    let (s, t) = (id(s), id(t));
    let sent = send_samples(&client, &s, &t, 0, 0..10_000, 400).await?;

    let polled = poll_all(&client, &s, &t, 0).await?;
    assert_eq!(polled.len(), 10_000, "message count");
    assert_eq!(offsets(&polled), (0..10_000).collect::<Vec<u64>>(), "contiguous offsets");
    for (index, (sent, got)) in sent.iter().zip(&polled).enumerate() {
        assert_same_message(sent, got, &format!("message {index}"));
        assert!(got.header.timestamp > 0, "message {index}: server timestamp");
        let headers = got.user_headers_map()?.expect("headers");
        assert_eq!(Some(headers), sent.user_headers_map()?, "message {index}: parsed headers");
    }

    let topic = client.get_topic(&s, &t).await?.expect("topic");
    assert_eq!(topic.messages_count, 10_000);
    assert_eq!(topic.partitions[0].messages_count, 10_000);
    assert_eq!(topic.partitions[0].current_offset, 9_999);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_reply_reports_partition_and_current_offset() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    create_stream_and_topic(&client, "s", "t", 2).await?;
    send_samples(&client, &id(0), &id(0), 1, 0..30, 10).await?;
    let consumer = Consumer::new(id(1));

    let polled = poll(&client, 1, &consumer, PollingStrategy::offset(5), 10, false).await?;
    assert_eq!(polled.partition_id, 1);
    assert_eq!(polled.current_offset, 29);
    assert_eq!(polled.count, 10);
    assert_eq!(offsets(&polled.messages), (5..15).collect::<Vec<u64>>());

    let empty = poll(&client, 0, &consumer, PollingStrategy::first(), 10, false).await?;
    assert_eq!(empty.partition_id, 0);
    assert!(empty.messages.is_empty(), "partition 0 has nothing");
    assert_eq!(empty.count, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_first_and_last_strategies() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    create_stream_and_topic(&client, "s", "t", 1).await?;
    let sent = send_samples(&client, &id(0), &id(0), 0, 0..100, 10).await?;
    let consumer = Consumer::new(id(1));

    let at = poll(&client, 0, &consumer, PollingStrategy::offset(37), 5, false).await?;
    assert_eq!(offsets(&at.messages), vec![37, 38, 39, 40, 41]);
    assert_same_message(&sent[37], &at.messages[0], "offset 37");

    let tail = poll(&client, 0, &consumer, PollingStrategy::offset(95), 50, false).await?;
    assert_eq!(offsets(&tail.messages), vec![95, 96, 97, 98, 99], "poll past the end");

    let beyond = poll(&client, 0, &consumer, PollingStrategy::offset(100), 10, false).await?;
    assert!(beyond.messages.is_empty(), "offset past the last message");

    let first = poll(&client, 0, &consumer, PollingStrategy::first(), 10, false).await?;
    assert_eq!(offsets(&first.messages), (0..10).collect::<Vec<u64>>());
    assert_same_message(&sent[0], &first.messages[0], "first");

    let last = poll(&client, 0, &consumer, PollingStrategy::last(), 10, false).await?;
    assert_eq!(offsets(&last.messages), (90..100).collect::<Vec<u64>>());
    assert_same_message(&sent[99], &last.messages[9], "last");

    let last_all = poll(&client, 0, &consumer, PollingStrategy::last(), 1000, false).await?;
    assert_eq!(last_all.messages.len(), 100, "last with a count above the size");
    assert_eq!(last_all.messages[0].header.offset, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timestamp_strategy_starts_at_messages_appended_after_the_timestamp() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    create_stream_and_topic(&client, "s", "t", 1).await?;
    let consumer = Consumer::new(id(1));
    let before_all = IggyTimestamp::now();
    send_samples(&client, &id(0), &id(0), 0, 0..50, 25).await?;

    // The first 50 are acknowledged before `split` is taken, the next 50 are sent
    // after it, so the server stamps them with later append times.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let split = IggyTimestamp::now();
    tokio::time::sleep(Duration::from_millis(20)).await;
    send_samples(&client, &id(0), &id(0), 0, 50..100, 25).await?;

    let later = poll(&client, 0, &consumer, PollingStrategy::timestamp(split), 100, false).await?;
    assert_eq!(offsets(&later.messages), (50..100).collect::<Vec<u64>>());
    for m in &later.messages {
        assert!(m.header.timestamp >= split.as_micros(), "append time after split");
    }

    let all = poll(&client, 0, &consumer, PollingStrategy::timestamp(before_all), 200, false).await?;
    assert_eq!(offsets(&all.messages), (0..100).collect::<Vec<u64>>());

    let future = IggyTimestamp::from(IggyTimestamp::now().as_micros() + 3_600_000_000);
    let none = poll(&client, 0, &consumer, PollingStrategy::timestamp(future), 10, false).await?;
    assert!(none.messages.is_empty(), "nothing is appended in the future");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_strategy_with_auto_commit_advances_the_stored_offset() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    create_stream_and_topic(&client, "s", "t", 1).await?;
    send_samples(&client, &id(0), &id(0), 0, 0..100, 20).await?;
    let reader = Consumer::new(named("reader"));

    // Without a stored offset `next` starts at 0, and without auto-commit it stays there.
    let peek = poll(&client, 0, &reader, PollingStrategy::next(), 10, false).await?;
    assert_eq!(offsets(&peek.messages), (0..10).collect::<Vec<u64>>());
    let peek = poll(&client, 0, &reader, PollingStrategy::next(), 10, false).await?;
    assert_eq!(offsets(&peek.messages), (0..10).collect::<Vec<u64>>());
    let stored = client.get_consumer_offset(&reader, &id(0), &id(0), Some(0)).await?;
    assert!(stored.is_none(), "no offset stored without auto-commit: {stored:?}");

    let first = poll(&client, 0, &reader, PollingStrategy::next(), 10, true).await?;
    assert_eq!(offsets(&first.messages), (0..10).collect::<Vec<u64>>());
    let stored = client.get_consumer_offset(&reader, &id(0), &id(0), Some(0)).await?;
    assert_eq!(stored.expect("stored after auto-commit").stored_offset, 9);

    let second = poll(&client, 0, &reader, PollingStrategy::next(), 15, true).await?;
    assert_eq!(offsets(&second.messages), (10..25).collect::<Vec<u64>>());
    let stored = client.get_consumer_offset(&reader, &id(0), &id(0), Some(0)).await?;
    assert_eq!(stored.expect("stored").stored_offset, 24);

    // An explicitly stored offset moves `next` as well.
    client.store_consumer_offset(&reader, &id(0), &id(0), Some(0), 59).await?;
    let third = poll(&client, 0, &reader, PollingStrategy::next(), 5, true).await?;
    assert_eq!(offsets(&third.messages), (60..65).collect::<Vec<u64>>());

    // Another consumer has its own position.
    let other = Consumer::new(id(77));
    let fresh = poll(&client, 0, &other, PollingStrategy::next(), 3, true).await?;
    assert_eq!(offsets(&fresh.messages), vec![0, 1, 2]);

    // Consuming to the end and beyond.
    let rest = poll(&client, 0, &reader, PollingStrategy::next(), 1000, true).await?;
    assert_eq!(offsets(&rest.messages), (65..100).collect::<Vec<u64>>());
    let done = poll(&client, 0, &reader, PollingStrategy::next(), 10, true).await?;
    assert!(done.messages.is_empty(), "everything consumed");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balanced_partitioning_spreads_batches_across_partitions() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    let (s, t) = create_stream_and_topic(&client, "s", "t", 3).await?;
    let (s, t) = (id(s), id(t));
    let mut sent_ids = BTreeSet::new();
    for batch in 0..30u64 {
        let mut messages = vec![sample_message(batch * 2), sample_message(batch * 2 + 1)];
        client.send_messages(&s, &t, &Partitioning::balanced(), &mut messages).await?;
        sent_ids.extend(messages.iter().map(|m| m.header.id));
    }

    let mut seen_ids = BTreeSet::new();
    for partition in 0..3 {
        let messages = poll_all(&client, &s, &t, partition).await?;
        // The 0.11.0 client round-robins whole batches over the partitions.
        assert_eq!(messages.len(), 20, "partition {partition} share");
        assert_eq!(offsets(&messages), (0..20).collect::<Vec<u64>>(), "partition {partition}");
        seen_ids.extend(messages.iter().map(|m| m.header.id));
    }
    assert_eq!(seen_ids, sent_ids, "every message landed exactly once");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_key_partitioning_keeps_a_key_on_one_partition() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    let (s, t) = create_stream_and_topic(&client, "s", "t", 4).await?;
    let (s, t) = (id(s), id(t));
    let keys = ["user-a", "user-b", "user-c", "user-d", "user-e", "user-f", "user-g"];
    for round in 0..6u32 {
        for (index, key) in keys.iter().enumerate() {
            let payload = format!("{key}|{round}").into_bytes();
            let message_id = u128::from(round) * 100 + index as u128 + 1;
            let mut messages = vec![message(message_id, payload, None)];
            client.send_messages(&s, &t, &Partitioning::messages_key_str(key)?, &mut messages).await?;
        }
    }

    let mut placement: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    let mut rounds: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for partition in 0..4 {
        for m in poll_all(&client, &s, &t, partition).await? {
            let text = String::from_utf8(m.payload.to_vec())?;
            let (key, round) = text.split_once('|').expect("key|round");
            placement.entry(key.to_owned()).or_default().insert(partition);
            rounds.entry(key.to_owned()).or_default().push(round.parse()?);
        }
    }
    assert_eq!(placement.len(), keys.len(), "every key arrived");
    for (key, partitions) in &placement {
        assert_eq!(partitions.len(), 1, "key {key} spread over {partitions:?}");
        assert_eq!(rounds[key], (0..6).collect::<Vec<u32>>(), "key {key} keeps its order");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_without_headers_and_with_large_payloads_round_trip() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    create_stream_and_topic(&client, "s", "t", 1).await?;
    let big: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let mut messages = vec![message(1, vec![0], None), message(2, big, None), message(3, b"tail".to_vec(), None)];
    client.send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut messages).await?;

    let polled = poll_all(&client, &id(0), &id(0), 0).await?;
    assert_eq!(polled.len(), 3);
    for (sent, got) in messages.iter().zip(&polled) {
        assert_same_message(sent, got, "headerless message");
        assert!(got.user_headers.is_none(), "no user headers");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_assigns_ids_and_flush_is_supported() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    create_stream_and_topic(&client, "s", "t", 1).await?;
    let mut messages: Vec<IggyMessage> = (0..10)
        .map(|i| IggyMessage::builder().payload(format!("no id {i}").into_bytes().into()).build())
        .collect::<Result<_, _>>()?;
    client.send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut messages).await?;
    client.flush_unsaved_buffer(&id(0), &id(0), 0, true).await?;
    client.flush_unsaved_buffer(&id(0), &id(0), 0, false).await?;

    let polled = poll_all(&client, &id(0), &id(0), 0).await?;
    let ids: BTreeSet<u128> = polled.iter().map(|m| m.header.id).collect();
    assert_eq!(ids.len(), 10, "ids are distinct");
    assert!(!ids.contains(&0), "no message keeps id 0");
    for (sent, got) in messages.iter().zip(&polled) {
        if rill_tests::transport::is_binary() {
            // The binary client writes the ids it generated back into the sent messages.
            assert_same_message(sent, got, "message sent without id");
        } else {
            // Over HTTP the server picks the ids; the sent messages keep 0.
            assert_eq!(got.payload, sent.payload, "message sent without id: payload");
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sending_and_polling_missing_resources_fails() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    create_stream_and_topic(&client, "s", "t", 2).await?;
    let consumer = Consumer::new(id(1));
    let first = PollingStrategy::first();

    let send = |stream: Identifier, topic: Identifier, partition: u32| {
        let client = &client;
        async move {
            let mut messages = vec![sample_message(0)];
            let partitioning = Partitioning::partition_id(partition);
            client.send_messages(&stream, &topic, &partitioning, &mut messages).await
        }
    };
    assert_eq!(error_code(send(id(5), id(0), 0).await, "send, stream"), STREAM_ID_NOT_FOUND);
    assert_eq!(error_code(send(id(0), id(5), 0).await, "send, topic"), TOPIC_ID_NOT_FOUND);
    assert_eq!(error_code(send(id(0), id(0), 2).await, "send, partition"), PARTITION_NOT_FOUND);

    let polled = client.poll_messages(&id(5), &id(0), Some(0), &consumer, &first, 10, false).await;
    assert_eq!(error_code(polled, "poll, stream"), STREAM_ID_NOT_FOUND);
    let polled = client.poll_messages(&id(0), &id(5), Some(0), &consumer, &first, 10, false).await;
    assert_eq!(error_code(polled, "poll, topic"), TOPIC_ID_NOT_FOUND);
    let polled = client.poll_messages(&id(0), &id(0), Some(2), &consumer, &first, 10, false).await;
    assert_eq!(error_code(polled, "poll, partition"), PARTITION_NOT_FOUND);

    // Nothing was appended by the failed sends.
    assert!(poll_all(&client, &id(0), &id(0), 0).await?.is_empty());
    assert!(poll_all(&client, &id(0), &id(0), 1).await?.is_empty());
    Ok(())
}
