//! Idempotent producers through the 0.12 client's `send_producer_messages`: a batch sent
//! again is stored once and answered with its first offset, across a server restart too;
//! gaps, fenced epochs and unknown producers are refused with their codes; a 0.11 client
//! still reads the batches; and on a three-node cluster retries are stored once across
//! kill -9 of a partition group's primary.

use std::str::FromStr;

use iggy::prelude::*;
use rill_edge_tests::id;
use rill_edge_tests::{TestServer, repository_dir};

fn batch(texts: &[&str]) -> Vec<IggyMessage> {
    texts.iter().map(|text| IggyMessage::from_str(text).expect("a message")).collect()
}

fn producer(id: u64, epoch: u16, base_sequence: u32) -> BatchProducer {
    BatchProducer::new(id, epoch, base_sequence).expect("fields within their maxima")
}

/// Sends `texts` as `producer`'s batch to partition 0; the offset it was stored at.
async fn send(client: &IggyClient, producer: BatchProducer, texts: &[&str]) -> Result<u64, IggyError> {
    let response = client.send_producer_messages(&id("s"), &id("t"), 0, producer, &mut batch(texts)).await?;
    Ok(response.confirmations.first().map(|confirmation| confirmation.base_offset).expect("a confirmation"))
}

async fn stored(client: &IggyClient) -> anyhow::Result<Vec<String>> {
    let consumer = Consumer::new(Identifier::numeric(1)?);
    let options = PollOptions { count: 100, ..Default::default() };
    let polled = client.poll_messages(&id("s"), &id("t"), 0, &consumer, &PollingStrategy::offset(0), options).await?;
    Ok(polled.messages.iter().map(|m| String::from_utf8_lossy(&m.payload).into_owned()).collect())
}

#[tokio::test]
async fn a_retried_batch_is_stored_once_across_a_restart() -> anyhow::Result<()> {
    let mut server = TestServer::start()?;
    let client = server.root_client().await?;
    client.create_stream("s", &StreamCreateOptions::default()).await?;
    let options = TopicCreateOptions { partitions_count: Some(1), ..Default::default() };
    client.create_topic(&id("s"), "t", &options).await?;
    let producer_id = client.next_producer_id().await?;
    let first = producer(producer_id, 0, 0);
    assert_eq!(send(&client, first, &["a", "b", "c"]).await?, 0);
    assert_eq!(send(&client, first, &["a", "b", "c"]).await?, 0, "the retry is answered with the first offset");
    let second = first.next(3);
    assert_eq!(send(&client, second, &["d", "e"]).await?, 3);
    assert_eq!(stored(&client).await?, ["a", "b", "c", "d", "e"]);

    server.restart()?;
    let client = server.root_client().await?;
    assert_eq!(send(&client, second, &["d", "e"]).await?, 3, "the partition remembers the producer after a restart");
    assert_eq!(send(&client, first, &["a", "b", "c"]).await?, 0);
    assert_eq!(send(&client, second.next(2), &["f"]).await?, 5);
    assert_eq!(stored(&client).await?, ["a", "b", "c", "d", "e", "f"]);
    Ok(())
}

#[tokio::test]
async fn out_of_order_fenced_and_unknown_producers_are_refused() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = server.root_client().await?;
    client.create_stream("s", &StreamCreateOptions::default()).await?;
    client.create_topic(&id("s"), "t", &TopicCreateOptions::default()).await?;
    let producer_id = client.next_producer_id().await?;
    let code = |result: Result<u64, IggyError>| result.err().map(|error| error.as_code());
    assert_eq!(code(send(&client, producer(producer_id, 0, 4), &["x"]).await), Some(94), "unknown, not at 0");
    send(&client, producer(producer_id, 1, 0), &["a"]).await?;
    assert_eq!(code(send(&client, producer(producer_id, 1, 5), &["x"]).await), Some(92), "a gap");
    assert_eq!(code(send(&client, producer(producer_id, 0, 1), &["x"]).await), Some(93), "an older epoch");
    send(&client, producer(producer_id, 1, 1), &["b"]).await?;
    assert_eq!(stored(&client).await?, ["a", "b"], "nothing refused was stored");
    Ok(())
}

#[tokio::test]
async fn a_0_11_client_reads_a_producers_batches() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = server.root_client().await?;
    client.create_stream("s", &StreamCreateOptions::default()).await?;
    client.create_topic(&id("s"), "t", &TopicCreateOptions::default()).await?;
    let producer_id = client.next_producer_id().await?;
    send(&client, producer(producer_id, 0, 0), &["from", "a producer"]).await?;
    let script = repository_dir().join("tests/edge/python/poll_0_11.py");
    let output = tokio::process::Command::new("python3")
        .arg(&script)
        .args([server.tcp_address().as_str(), "s", "t", "0"])
        .output()
        .await?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success(),
        "the 0.11 SDK failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(stdout.lines().collect::<Vec<_>>(), ["from", "a producer"]);
    Ok(())
}

/// Sends `texts` as `producer`'s batch to `partition` until it is acknowledged (a failover
/// under way refuses or times out a send): the offset it was stored at.
async fn send_until_acknowledged(
    client: &IggyClient,
    partition: u32,
    producer: BatchProducer,
    texts: &[&str],
) -> anyhow::Result<u64> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(40);
    loop {
        match client.send_producer_messages(&id("s"), &id("t"), partition, producer, &mut batch(texts)).await {
            Ok(response) => return Ok(response.confirmations.first().expect("a confirmation").base_offset),
            Err(error) if std::time::Instant::now() > deadline => anyhow::bail!("partition {partition}: {error}"),
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
        }
    }
}

/// On a replicated cluster the producer state is the partition groups': batches retried
/// before and after kill -9 of group 1's primary are stored once and answered with their
/// first offsets, on every partition, whichever group carries it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producers_retries_are_stored_once_across_kill_9_of_a_group_primary() -> anyhow::Result<()> {
    let mut cluster = rill_edge_tests::cluster::EdgeCluster::start().await?;
    let client = cluster.client().await?;
    client.create_stream("s", &StreamCreateOptions::default()).await?;
    let options = TopicCreateOptions { partitions_count: Some(4), ..Default::default() };
    client.create_topic(&id("s"), "t", &options).await?;
    let mut producers = Vec::new();
    for partition in 0..4 {
        let first = producer(client.next_producer_id().await?, 0, 0);
        assert_eq!(send_until_acknowledged(&client, partition, first, &["a", "b", "c"]).await?, 0);
        assert_eq!(send_until_acknowledged(&client, partition, first, &["a", "b", "c"]).await?, 0, "a retry");
        producers.push(first);
    }
    cluster.nodes[1].kill9()?;
    for (partition, first) in (0..4).zip(&producers) {
        let what = format!("partition {partition} after the kill");
        assert_eq!(send_until_acknowledged(&client, partition, *first, &["a", "b", "c"]).await?, 0, "{what}");
        let second = first.next(3);
        assert_eq!(send_until_acknowledged(&client, partition, second, &["d", "e"]).await?, 3, "{what}");
        assert_eq!(send_until_acknowledged(&client, partition, second, &["d", "e"]).await?, 3, "{what}: a retry");
    }
    cluster.nodes[1].start_again()?;
    for partition in 0..4 {
        let consumer = Consumer::new(Identifier::numeric(1)?);
        let options = PollOptions { count: 100, ..Default::default() };
        let strategy = PollingStrategy::offset(0);
        let polled = client.poll_messages(&id("s"), &id("t"), partition, &consumer, &strategy, options).await?;
        let texts: Vec<String> =
            polled.messages.iter().map(|m| String::from_utf8_lossy(&m.payload).into_owned()).collect();
        assert_eq!(texts, ["a", "b", "c", "d", "e"], "partition {partition} holds each batch once");
    }
    Ok(())
}
