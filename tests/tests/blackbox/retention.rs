//! Retention through the official client: a topic's message expiry and size cap delete its
//! oldest sealed segments (never the active one), polls and stored offsets below the new
//! first offset start at the first message still present, a kill -9 in the middle of
//! cleaning leaves a partition that starts and serves, and both limits keep working across
//! restarts, after `update_topic`, and as server-wide defaults.

use std::time::Duration;

use iggy::prelude::*;
use rill_tests::{TestServer, connect_root, eventually, id, poll_all};

/// Segments of the smallest size a topic may have, so a few sends fill several.
const SEGMENT_BYTES: u64 = 1 << 20;
/// Each send: 250 messages of 1 KiB, about a quarter of a segment.
const MESSAGES_PER_SEND: u64 = 250;

/// A server whose cleaner runs every 200 ms.
fn server(extra: &[(&str, &str)]) -> anyhow::Result<TestServer> {
    let mut env = vec![("IGGY_DATA_MAINTENANCE_MESSAGES_INTERVAL", "200 ms")];
    env.extend_from_slice(extra);
    TestServer::start_with_env(&env)
}

/// Persisted topics: what was acknowledged survives the kills these tests make.
fn options(partitions: u32, expiry: IggyExpiry, max_size: MaxTopicSize) -> TopicCreateOptions {
    TopicCreateOptions {
        partitions_count: Some(partitions),
        message_expiry: Some(expiry),
        max_topic_size: Some(max_size),
        segment_size: Some(IggyByteSize::from(SEGMENT_BYTES)),
        durability: Durability::Persisted,
        ..TopicCreateOptions::default()
    }
}

/// Sends `sends` batches to `partition` of topic 0; on a partition that started empty,
/// offsets count from `first_id` (and ids are offsets plus one). Returns the next offset.
async fn fill(client: &IggyClient, partition: u32, sends: u64, first_id: u64) -> anyhow::Result<u64> {
    fill_topic(client, &id(0), partition, sends, first_id).await
}

async fn fill_topic(
    client: &IggyClient,
    topic: &Identifier,
    partition: u32,
    sends: u64,
    first_id: u64,
) -> anyhow::Result<u64> {
    let mut next = first_id;
    for _ in 0..sends {
        let mut batch: Vec<IggyMessage> = (0..MESSAGES_PER_SEND)
            .map(|i| {
                let payload = format!("{:0>1024}", next + i).into_bytes();
                // Id 0 would be replaced by a random one: ids are offsets plus one.
                IggyMessage::builder().id(u128::from(next + i + 1)).payload(payload.into()).build().expect("message")
            })
            .collect();
        client.send_messages(&id(0), topic, &Partitioning::partition_id(partition), &mut batch).await?;
        next += MESSAGES_PER_SEND;
    }
    Ok(next)
}

/// (segments, first offset polled from 0, messages stored) of a partition.
async fn shape(client: &IggyClient, partition: u32) -> anyhow::Result<(u32, u64, u64)> {
    let topic = client.get_topic(&id(0), &id(0)).await?.expect("topic");
    let details = &topic.partitions[partition as usize];
    let polled = client
        .poll_messages(&id(0), &id(0), Some(partition), &Consumer::new(id(1)), &PollingStrategy::offset(0), 1, false)
        .await?;
    let first = polled.messages.first().map_or(u64::MAX, |m| m.header.offset);
    Ok((details.segments_count, first, details.messages_count))
}

/// Every message from offset 0 on is the run `first..end` of what was sent, in order.
async fn assert_contiguous_tail(client: &IggyClient, partition: u32, end: u64) -> anyhow::Result<u64> {
    let messages = poll_all(client, &id(0), &id(0), partition).await?;
    let first = messages.first().expect("the active segment is never deleted").header.offset;
    for (i, message) in messages.iter().enumerate() {
        assert_eq!(message.header.offset, first + i as u64, "offsets run on from the first present");
        assert_eq!(
            message.header.id,
            u128::from(message.header.offset + 1),
            "each message is the one sent at its offset"
        );
    }
    assert_eq!(messages.last().map(|m| m.header.offset + 1), Some(end), "nothing after the last sent");
    Ok(first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_sealed_segments_go_and_the_active_one_stays() -> anyhow::Result<()> {
    let mut server = server(&[])?;
    let client = connect_root(&server.tcp_address()).await?;
    client.create_stream("s").await?;
    let expiry = IggyExpiry::ExpireDuration(IggyDuration::from(2_000_000u64));
    client.create_topic(&id(0), "t", &options(1, expiry, MaxTopicSize::Unlimited)).await?;
    let consumer = Consumer::new(id(7));
    client.store_consumer_offset(&consumer, &id(0), &id(0), Some(0), 10).await?;
    let end = fill(&client, 0, 16, 0).await?;
    let (segments, first, _) = shape(&client, 0).await?;
    assert!(segments >= 4 && first == 0, "several segments before anything expires: {segments}");
    eventually(Duration::from_secs(20), "expired segments deleted", || async { Ok(shape(&client, 0).await?.0 == 1) })
        .await?;
    let first = assert_contiguous_tail(&client, 0, end).await?;
    assert!(first > 0, "the first offset moved past the deleted segments");
    let (_, polled_first, stored) = shape(&client, 0).await?;
    assert_eq!((polled_first, stored), (first, end - first), "offset 0 starts at the first message present");
    let next = client.poll_messages(&id(0), &id(0), Some(0), &consumer, &PollingStrategy::next(), 5, false).await?;
    assert_eq!(next.messages[0].header.offset, first, "a stored offset below the first starts there");
    // Expiry keeps working across a graceful restart and a kill -9.
    server.restart()?;
    let client = connect_root(&server.tcp_address()).await?;
    let end = fill(&client, 0, 8, end).await?;
    eventually(Duration::from_secs(20), "expiry after a restart", || async { Ok(shape(&client, 0).await?.0 == 1) })
        .await?;
    server.kill9()?;
    server.restart()?;
    let client = connect_root(&server.tcp_address()).await?;
    assert_contiguous_tail(&client, 0, end).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_size_cap_deletes_the_oldest_sealed_segments() -> anyhow::Result<()> {
    let mut server = server(&[])?;
    let client = connect_root(&server.tcp_address()).await?;
    client.create_stream("s").await?;
    // Two partitions share 5 MiB: 2.5 MiB each.
    let cap = MaxTopicSize::Custom(IggyByteSize::from(5 * SEGMENT_BYTES));
    client.create_topic(&id(0), "t", &options(2, IggyExpiry::NeverExpire, cap)).await?;
    let ends = [fill(&client, 0, 24, 0).await?, fill(&client, 1, 4, 0).await?];
    let within = |size: u64| size <= 5 * SEGMENT_BYTES / 2;
    eventually(Duration::from_secs(20), "partition 0 trimmed to its share", || async {
        let topic = client.get_topic(&id(0), &id(0)).await?.expect("topic");
        Ok(within(topic.partitions[0].size.as_bytes_u64()))
    })
    .await?;
    assert!(assert_contiguous_tail(&client, 0, ends[0]).await? > 0);
    assert_eq!(assert_contiguous_tail(&client, 1, ends[1]).await?, 0, "partition 1 fits its share: untouched");
    server.restart()?;
    let client = connect_root(&server.tcp_address()).await?;
    fill(&client, 1, 16, ends[1]).await?;
    eventually(Duration::from_secs(20), "the cap applies after a restart", || async {
        let topic = client.get_topic(&id(0), &id(0)).await?.expect("topic");
        Ok(within(topic.partitions[1].size.as_bytes_u64()))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_updated_expiry_and_the_server_default_apply_on_the_next_pass() -> anyhow::Result<()> {
    let server = server(&[("IGGY_SYSTEM_TOPIC_MESSAGE_EXPIRY", "1 s")])?;
    let client = connect_root(&server.tcp_address()).await?;
    client.create_stream("s").await?;
    client.create_topic(&id(0), "t", &options(1, IggyExpiry::NeverExpire, MaxTopicSize::Unlimited)).await?;
    let defaulted =
        TopicCreateOptions { message_expiry: None, ..options(1, IggyExpiry::NeverExpire, MaxTopicSize::Unlimited) };
    client.create_topic(&id(0), "follows-the-server", &defaulted).await?;
    fill(&client, 0, 8, 0).await?;
    fill_topic(&client, &named_topic(), 0, 8, 0).await?;
    eventually(Duration::from_secs(20), "the server-wide default expires the defaulted topic", || async {
        let topic = client.get_topic(&id(0), &named_topic()).await?.expect("topic");
        Ok(topic.partitions[0].segments_count == 1)
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(shape(&client, 0).await?.0 > 1, "never-expire kept everything");
    let update = TopicUpdateOptions {
        message_expiry: Some(IggyExpiry::ExpireDuration(IggyDuration::from(500_000u64))),
        ..TopicUpdateOptions::default()
    };
    client.update_topic(&id(0), &id(0), "t", &update).await?;
    eventually(Duration::from_secs(20), "the updated expiry applies", || async { Ok(shape(&client, 0).await?.0 == 1) })
        .await
}

fn named_topic() -> Identifier {
    Identifier::named("follows-the-server").expect("name")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_during_cleaning_leaves_partitions_that_start_and_serve() -> anyhow::Result<()> {
    let mut server = server(&[])?;
    let client = connect_root(&server.tcp_address()).await?;
    client.create_stream("s").await?;
    let expiry = IggyExpiry::ExpireDuration(IggyDuration::from(1_000_000u64));
    client.create_topic(&id(0), "t", &options(4, expiry, MaxTopicSize::Unlimited)).await?;
    let mut ends = Vec::new();
    for partition in 0..4 {
        ends.push(fill(&client, partition, 12, 0).await?);
    }
    let data = server.data_dir().join("streams/0/topics/0/partitions");
    let logs = |partition: u32| {
        std::fs::read_dir(data.join(partition.to_string())).map_or(0, |entries| {
            entries.flatten().filter(|e| e.file_name().to_string_lossy().ends_with(".log")).count()
        })
    };
    let before: usize = (0..4).map(logs).sum();
    // Kill as soon as the first pass has begun: some segments gone, likely not all.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while (0..4).map(logs).sum::<usize>() == before && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    server.kill9()?;
    assert!((0..4).map(logs).sum::<usize>() < before, "the cleaner started before the kill");
    server.restart()?;
    let client = connect_root(&server.tcp_address()).await?;
    for (partition, end) in ends.iter().enumerate() {
        assert_contiguous_tail(&client, partition as u32, *end).await?;
    }
    eventually(Duration::from_secs(20), "cleaning finishes after the restart", || async {
        let topic = client.get_topic(&id(0), &id(0)).await?.expect("topic");
        Ok(topic.partitions.iter().all(|p| p.segments_count == 1))
    })
    .await?;
    // A pass renames a segment's files under the partition's lock and removes them just
    // after it, so a `.deleted` file may be seen for a moment; none may stay.
    let leftovers =
        || rill_tests::files_under(&data).into_iter().filter(|p| p.to_string_lossy().ends_with(".deleted")).count();
    eventually(Duration::from_secs(5), "no half-deleted files stay behind", || async { Ok(leftovers() == 0) }).await
}
