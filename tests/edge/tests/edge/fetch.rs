//! FETCH_MESSAGES (109) through the 0.12 client's high-level consumer, which reads every
//! partition it is given (or its group assigns it) in one fetch: all messages of every
//! partition delivered once, offsets committed on read, and a fetch that waits for sends.

use std::collections::BTreeSet;
use std::str::FromStr;
use std::time::Duration;

use futures_util::StreamExt;
use iggy::prelude::*;
use rill_edge_tests::TestServer;
use rill_edge_tests::id;

const PARTITIONS: u32 = 3;
const PER_PARTITION: u32 = 10;

async fn topic_of_three(client: &IggyClient) -> anyhow::Result<()> {
    client.create_stream("s", &StreamCreateOptions::default()).await?;
    let options = TopicCreateOptions { partitions_count: Some(PARTITIONS), ..Default::default() };
    client.create_topic(&id("s"), "t", &options).await?;
    Ok(())
}

/// Sends `p{partition}-{i}` for `range` to every partition, one batch per partition.
async fn send_each(client: &IggyClient, range: std::ops::Range<u32>) -> anyhow::Result<()> {
    for partition in 0..PARTITIONS {
        let mut batch: Vec<IggyMessage> =
            range.clone().map(|i| IggyMessage::from_str(&format!("p{partition}-{i}")).expect("a message")).collect();
        client.send_messages(&id("s"), &id("t"), &Partitioning::partition_id(partition), &mut batch).await?;
    }
    Ok(())
}

/// Takes `count` messages off the consumer; each payload with the partition it came from.
async fn take(consumer: &mut IggyConsumer, count: usize) -> anyhow::Result<Vec<(u32, String)>> {
    let mut taken = Vec::with_capacity(count);
    while taken.len() < count {
        let next = tokio::time::timeout(Duration::from_secs(20), consumer.next()).await;
        let Ok(Some(received)) = next else { anyhow::bail!("the consumer stopped after {} messages", taken.len()) };
        let received = received.map_err(|error| anyhow::anyhow!("{error:?}"))?;
        taken.push((received.partition_id, String::from_utf8_lossy(&received.message.payload).into_owned()));
    }
    Ok(taken)
}

fn expected(range: std::ops::Range<u32>) -> BTreeSet<(u32, String)> {
    (0..PARTITIONS).flat_map(|p| range.clone().map(move |i| (p, format!("p{p}-{i}")))).collect()
}

#[tokio::test]
async fn a_consumer_of_several_partitions_reads_each_once_and_commits_on_read() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = server.root_client().await?;
    topic_of_three(&client).await?;
    send_each(&client, 0..PER_PARTITION).await?;
    let options = PollOptions { commit: CommitPolicy::OnRead, count: 4, ..PollOptions::wait(IggyDuration::ONE_SECOND) };
    let mut consumer = client
        .consumer("reader", "s", "t")?
        .partitions(0..PARTITIONS)
        .polling_strategy(PollingStrategy::next())
        .poll_options(options)
        .build();
    consumer.init().await?;
    let first = take(&mut consumer, (PARTITIONS * PER_PARTITION) as usize).await?;
    let read: BTreeSet<_> = first.iter().cloned().collect();
    assert_eq!(read.len(), first.len(), "no message came twice");
    assert_eq!(read, expected(0..PER_PARTITION));
    // The consumer waits in a fetch now; these sends wake it.
    send_each(&client, PER_PARTITION..PER_PARTITION + 2).await?;
    let more: BTreeSet<_> = take(&mut consumer, (PARTITIONS * 2) as usize).await?.into_iter().collect();
    assert_eq!(more, expected(PER_PARTITION..PER_PARTITION + 2));
    consumer.shutdown().await?;
    let reader = Consumer::new(id("reader"));
    for partition in 0..PARTITIONS {
        let offset = client.get_consumer_offset(&reader, &id("s"), &id("t"), Some(partition)).await?;
        assert_eq!(offset.map(|o| o.stored_offset), Some(u64::from(PER_PARTITION + 1)), "partition {partition}");
    }
    Ok(())
}

#[tokio::test]
async fn a_consumer_group_member_reads_its_partitions_through_fetches() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = server.root_client().await?;
    topic_of_three(&client).await?;
    send_each(&client, 0..PER_PARTITION).await?;
    let member_client = server.root_client().await?;
    let options = PollOptions { commit: CommitPolicy::OnRead, ..PollOptions::wait(IggyDuration::ONE_SECOND) };
    let mut member = member_client
        .consumer_group("g", "s", "t")?
        .create_consumer_group_if_not_exists()
        .polling_strategy(PollingStrategy::next())
        .poll_options(options)
        .build();
    member.init().await?;
    let read: BTreeSet<_> = take(&mut member, (PARTITIONS * PER_PARTITION) as usize).await?.into_iter().collect();
    assert_eq!(read, expected(0..PER_PARTITION), "the only member is assigned every partition");
    member.shutdown().await?;
    let group = Consumer::group(id("g"));
    for partition in 0..PARTITIONS {
        let offset = client.get_consumer_offset(&group, &id("s"), &id("t"), Some(partition)).await?;
        assert_eq!(offset.map(|o| o.stored_offset), Some(u64::from(PER_PARTITION - 1)), "partition {partition}");
    }
    // The metadata change feed shows the member joining and every partition handed to it.
    let query = MetadataChangesQuery {
        groups: vec![MetadataChangeGroup::ConsumerGroupMembers],
        ..MetadataChangesQuery::default()
    };
    let changes = client.get_metadata_changes(&query).await?;
    let joined: Vec<_> = changes
        .records
        .iter()
        .filter_map(|r| match &r.change {
            MetadataChange::ConsumerGroupMemberJoined(joined) => Some(joined.partition_ids.len()),
            _ => None,
        })
        .collect();
    assert_eq!(joined, [PARTITIONS as usize], "one member joined, with every partition");
    let handed_to_it = changes.records.iter().filter(
        |r| matches!(&r.change, MetadataChange::ConsumerGroupPartitionHandedOver(handed) if handed.member_id.is_some()),
    );
    assert_eq!(handed_to_it.count(), PARTITIONS as usize);
    Ok(())
}
