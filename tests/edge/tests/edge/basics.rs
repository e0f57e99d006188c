//! Connecting, logging in, streams and topics, a send and a poll back with the 0.12 client.

use iggy::prelude::*;
use rill_edge_tests::TestServer;
use rill_edge_tests::id;
use std::str::FromStr;

#[tokio::test]
async fn a_0_12_client_logs_in_creates_sends_and_polls_back() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = server.root_client().await?;
    let metadata = client.get_cluster_metadata().await?;
    assert_eq!(metadata.nodes.len(), 1);

    let stream = client.create_stream("orders", &StreamCreateOptions::default()).await?;
    assert_eq!(stream.name, "orders");
    let options = TopicCreateOptions { partitions_count: Some(2), ..Default::default() };
    let topic = client.create_topic(&id("orders"), "created", &options).await?;
    assert_eq!((topic.name.as_str(), topic.partitions_count), ("created", 2));

    let mut messages: Vec<IggyMessage> =
        (0..10).map(|i| IggyMessage::from_str(&format!("order {i}")).expect("a message")).collect();
    client.send_messages(&id("orders"), &id("created"), &Partitioning::partition_id(1), &mut messages).await?;

    let consumer = Consumer::new(Identifier::numeric(7)?);
    let polled = client
        .poll_messages(
            &id("orders"),
            &id("created"),
            1,
            &consumer,
            &PollingStrategy::offset(0),
            PollOptions { count: 100, ..Default::default() },
        )
        .await?;
    let payloads: Vec<String> =
        polled.messages.iter().map(|m| String::from_utf8_lossy(&m.payload).into_owned()).collect();
    assert_eq!(payloads, (0..10).map(|i| format!("order {i}")).collect::<Vec<_>>());
    assert_eq!(polled.current_offset, 9);

    let streams = client.get_streams().await?;
    assert_eq!(streams.len(), 1);
    assert_eq!(streams[0].messages_count, 10);
    let topic = client.get_topic(&id("orders"), &id("created")).await?.expect("the topic");
    assert_eq!(topic.partitions.len(), 2);
    assert_eq!(topic.partitions[1].current_offset, 9);
    Ok(())
}
