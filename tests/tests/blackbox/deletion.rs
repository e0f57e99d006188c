//! Deleted data stays deleted, read off the files themselves: after a topic is deleted no
//! file under the data directory holds any of its messages, and the topics created after
//! it hold none either, across a kill -9; segments retention removed are written over by
//! their own partition only, never by another partition or topic, and once a stop or a
//! recovery has cut the log written over them, no log or index holds their messages.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use iggy::prelude::*;
use rill_tests::{TestServer, connect_root, eventually, files_under, free_port, id, poll_all, topic_id};

/// Every message's payload names it, over and over: `<` tag partition `-` 8-digit number `>`.
fn payload(tag: u8, partition: u32, n: u64) -> Vec<u8> {
    let unit = format!("<{}{partition}-{n:08}>", tag as char).into_bytes();
    unit.iter().copied().cycle().take(unit.len() * 64).collect()
}

/// Messages by (tag, partition, number).
type Messages = BTreeSet<(u8, u32, u64)>;

/// The messages of which a file holds a whole `<...>` unit.
fn messages_in(path: &Path) -> Messages {
    let bytes = std::fs::read(path).unwrap_or_default();
    let mut found = BTreeSet::new();
    for unit in bytes.windows(13).filter(|unit| unit[0] == b'<' && unit[12] == b'>') {
        let number = std::str::from_utf8(&unit[4..12]).ok().and_then(|digits| digits.parse::<u64>().ok());
        if let (true, b'-', Some(number)) = (unit[2].is_ascii_digit(), unit[3], number) {
            found.insert((unit[1], u32::from(unit[2] - b'0'), number));
        }
    }
    found
}

/// Every file under `dir` holding a message tagged `tag`, with those messages.
fn holding(dir: &Path, tag: u8) -> Vec<(PathBuf, Messages)> {
    files_under(dir)
        .into_iter()
        .map(|path| {
            let found: Messages = messages_in(&path).into_iter().filter(|(t, _, _)| *t == tag).collect();
            (path, found)
        })
        .filter(|(_, found)| !found.is_empty())
        .collect()
}

/// Sends messages `first..first + count` tagged `tag` to `partition`, 50 to a batch.
async fn send(client: &IggyClient, topic: u32, partition: u32, tag: u8, first: u64, count: u64) -> anyhow::Result<()> {
    for start in (first..first + count).step_by(50) {
        let mut batch: Vec<IggyMessage> = (start..(start + 50).min(first + count))
            .map(|n| IggyMessage::builder().id(u128::from(n) + 1).payload(payload(tag, partition, n).into()).build())
            .collect::<Result<_, _>>()?;
        client.send_messages(&id(0), &id(topic), &Partitioning::partition_id(partition), &mut batch).await?;
    }
    client.flush_unsaved_buffer(&id(0), &id(topic), partition, false).await?;
    Ok(())
}

/// The partition serves exactly messages `from..to` tagged `tag`, each at its offset.
async fn assert_serves(
    client: &IggyClient,
    topic: u32,
    partition: u32,
    tag: u8,
    from: u64,
    to: u64,
) -> anyhow::Result<()> {
    let stored = poll_all(client, &id(0), &id(topic), partition).await?;
    let numbers: Vec<u64> = stored.iter().map(|m| m.header.offset).collect();
    assert_eq!(numbers, (from..to).collect::<Vec<_>>(), "topic {topic} partition {partition}: offsets");
    for message in &stored {
        let n = message.header.offset;
        assert_eq!(message.payload.as_ref(), payload(tag, partition, n).as_slice(), "message {n}");
    }
    Ok(())
}

/// A server with its HTTP API on (for `/metrics`), a root client and a metrics reader.
async fn start(extra: &[(&str, &str)]) -> anyhow::Result<(TestServer, IggyClient, rill_tests::http::MetricsReader)> {
    let address = format!("127.0.0.1:{}", free_port());
    let mut env = vec![("IGGY_HTTP_ENABLED", "true"), ("IGGY_HTTP_ADDRESS", address.as_str())];
    env.extend_from_slice(extra);
    let server = TestServer::start_with_env(&env)?;
    let client = connect_root(&server.tcp_address()).await?;
    let metrics = rill_tests::http::MetricsReader::new(&client, &address).await?;
    Ok((server, client, metrics))
}

fn topic_options(partitions: u32, durability: Durability) -> TopicCreateOptions {
    TopicCreateOptions {
        partitions_count: Some(partitions),
        segment_size: Some(IggyByteSize::from(1u64 << 20)),
        durability,
        ..TopicCreateOptions::default()
    }
}

#[test]
fn the_scan_finds_every_tagged_message() {
    let dir = std::env::temp_dir().join(format!("rill-deletion-scan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("f");
    let mut bytes = b"noise<".to_vec();
    bytes.extend(payload(b'A', 3, 42));
    bytes.extend(&payload(b'B', 0, 7)[..13]);
    std::fs::write(&file, bytes).unwrap();
    assert_eq!(messages_in(&file), BTreeSet::from([(b'A', 3, 42), (b'B', 0, 7)]));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_topics_messages_are_in_no_file_and_not_in_the_topics_created_after_it_across_a_kill9()
-> anyhow::Result<()> {
    let (mut server, client, metrics) = start(&[]).await?;
    let data = server.data_dir();
    client.create_stream("s").await?;
    // A persisted topic's logs are direct, a replicated one's buffered: both kinds.
    let kinds = [("persisted", Durability::Persisted), ("buffered", Durability::Replicated)];
    for (name, durability) in &kinds {
        client.create_topic(&id(0), &format!("old-{name}"), &topic_options(2, *durability)).await?;
        let topic = topic_id(&client, &format!("old-{name}")).await?;
        for partition in 0..2 {
            // About 2.5 MB each: more than a segment.
            send(&client, topic, partition, b'A', 0, 3_000).await?;
        }
    }
    assert!(holding(&data, b'A').len() >= 8, "the scan sees the old topics' logs");
    for (name, _) in &kinds {
        client.delete_topic(&id(0), &Identifier::named(&format!("old-{name}"))?).await?;
    }
    assert_eq!(holding(&data, b'A'), vec![], "a deleted topic's messages are in no file");

    for (name, durability) in &kinds {
        client.create_topic(&id(0), &format!("new-{name}"), &topic_options(2, *durability)).await?;
        let topic = topic_id(&client, &format!("new-{name}")).await?;
        for partition in 0..2 {
            send(&client, topic, partition, b'B', 0, 1_500).await?;
        }
    }
    assert_eq!(holding(&data, b'A'), vec![], "the new topics' files hold none of the old ones' bytes");
    assert_eq!(metrics.get("rill_spare_logs_taken_total")?, Some(0), "no new log went over a removed one");
    drop(client);

    server.kill9()?;
    assert_eq!(holding(&data, b'A'), vec![], "nor after a kill -9");
    server.restart()?;
    let client = connect_root(&server.tcp_address()).await?;
    assert_eq!(holding(&data, b'A'), vec![], "nor after recovery");
    for (name, _) in &kinds {
        let topic = topic_id(&client, &format!("new-{name}")).await?;
        for partition in 0..2 {
            assert_serves(&client, topic, partition, b'B', 0, 1_500).await?;
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_segments_are_written_over_by_their_own_partition_only() -> anyhow::Result<()> {
    let (mut server, client, metrics) = start(&[("IGGY_DATA_MAINTENANCE_MESSAGES_INTERVAL", "200 ms")]).await?;
    let data = server.data_dir();
    client.create_stream("s").await?;
    let expiring = TopicCreateOptions {
        message_expiry: Some(IggyExpiry::ExpireDuration(IggyDuration::from(3_000_000u64))),
        ..topic_options(2, Durability::Persisted)
    };
    client.create_topic(&id(0), "t", &expiring).await?;
    // Partition 0: three sealed segments and an active one; partition 1: its active one only.
    send(&client, 0, 0, b'A', 0, 4_500).await?;
    send(&client, 0, 1, b'A', 0, 300).await?;
    eventually(Duration::from_secs(20), "the expired segments go", || async {
        let topic = client.get_topic(&id(0), &id(0)).await?.expect("topic");
        Ok(topic.partitions[0].segments_count == 1)
    })
    .await?;
    let keep_all =
        TopicUpdateOptions { message_expiry: Some(IggyExpiry::NeverExpire), ..TopicUpdateOptions::default() };
    client.update_topic(&id(0), &id(0), "t", &keep_all).await?;
    let first = poll_all(&client, &id(0), &id(0), 0).await?.first().expect("the active segment").header.offset;
    let expired: Messages = (0..first).map(|n| (b'A', 0, n)).collect();
    assert_eq!(metrics.get("rill_spare_logs")?, Some(2), "partition 0 keeps two of its expired logs");

    // Partition 0 rolls over its spares; partition 1 and a new topic never touch them.
    send(&client, 0, 0, b'B', 4_500, 2_500).await?;
    send(&client, 0, 1, b'B', 300, 2_500).await?;
    client.create_topic(&id(0), "after", &topic_options(2, Durability::Persisted)).await?;
    let after = topic_id(&client, "after").await?;
    for partition in 0..2 {
        send(&client, after, partition, b'C', 0, 2_000).await?;
    }
    assert!(metrics.get("rill_spare_logs_taken_total")?.unwrap_or(0) >= 1, "a roll went over a spare");
    let own_dir = data.join("streams/0/topics/0/partitions/0");
    let assert_kept_home = |when: &str| {
        for (path, found) in holding(&data, b'A') {
            let deleted: Vec<_> = found.intersection(&expired).collect();
            if deleted.is_empty() {
                continue;
            }
            assert!(path.starts_with(&own_dir), "{when}: {} holds partition 0's deleted {deleted:?}", path.display());
        }
    };
    assert_kept_home("while running");
    assert_serves_from(&client, 0, first).await?;
    drop(client);

    server.kill9()?;
    assert_kept_home("after a kill -9");
    server.restart()?;
    let client = connect_root(&server.tcp_address()).await?;
    assert_kept_home("after recovery");
    // Recovery cut the log written over a spare at its last batch: what is left of the
    // deleted messages is only in the spares not taken yet.
    for (path, found) in holding(&data, b'A') {
        if found.intersection(&expired).next().is_some() {
            assert!(path.to_string_lossy().ends_with(".spare"), "{} holds deleted messages", path.display());
        }
    }
    assert_serves_from(&client, 0, first).await?;
    Ok(())
}

/// Partition 0 of topic 0 serves offsets `first..7000`: its kept `A` messages up to 4,500,
/// then the `B` ones, never a deleted one.
async fn assert_serves_from(client: &IggyClient, topic: u32, first: u64) -> anyhow::Result<()> {
    let stored = poll_all(client, &id(0), &id(topic), 0).await?;
    let offsets: Vec<u64> = stored.iter().map(|m| m.header.offset).collect();
    assert_eq!(offsets, (first..7_000).collect::<Vec<_>>());
    for message in &stored {
        let n = message.header.offset;
        let tag = if n < 4_500 { b'A' } else { b'B' };
        assert_eq!(message.payload.as_ref(), payload(tag, 0, n).as_slice(), "message {n}");
    }
    Ok(())
}
