//! Message-id deduplication through the official client: with it on, a message whose id
//! the partition stored within the window is dropped and the send still succeeds, whether
//! the repeat is in the same batch, a later batch, or after a restart; id 0 (no id) is
//! always stored; a topic may turn it off, and a server without it stores every copy.

use bytes::BytesMut;
use iggy::prelude::*;
use iggy_binary_protocol::requests::messages::send_messages::{RawMessage, SendMessagesEncoder};
use iggy_binary_protocol::{WireIdentifier, WirePartitioning};
use rill_tests::{TestServer, connect_root, id, poll_all};

const SEND_MESSAGES_CODE: u32 = 101;

fn message(id: u128, payload: &str) -> IggyMessage {
    IggyMessage::builder().id(id).payload(payload.as_bytes().to_vec().into()).build().expect("message")
}

async fn send(client: &IggyClient, topic: u32, messages: &[(u128, &str)]) -> anyhow::Result<()> {
    let mut batch: Vec<IggyMessage> = messages.iter().map(|(id, payload)| message(*id, payload)).collect();
    client.send_messages(&id(0), &id(topic), &Partitioning::partition_id(0), &mut batch).await?;
    Ok(())
}

/// SEND_MESSAGES with ids as given, 0 included (the SDK's `send_messages` replaces a 0 with
/// a random id before encoding), through the SDK's own encoder.
async fn send_raw(client: &IggyClient, topic: u32, messages: &[(u128, &str)]) -> anyhow::Result<()> {
    let raw: Vec<RawMessage<'_>> = messages
        .iter()
        .map(|(id, payload)| RawMessage { id: *id, origin_timestamp: 1, headers: None, payload: payload.as_bytes() })
        .collect();
    let mut body = BytesMut::new();
    let (stream, topic) = (WireIdentifier::numeric(0), WireIdentifier::numeric(topic));
    SendMessagesEncoder::encode(&mut body, &stream, &topic, &WirePartitioning::PartitionId(0), &raw)?;
    client.send_binary_request(SEND_MESSAGES_CODE, body.freeze()).await?;
    Ok(())
}

/// (id, payload) of everything stored in partition 0 of `topic`.
async fn stored(client: &IggyClient, topic: u32) -> anyhow::Result<Vec<(u128, String)>> {
    let messages = poll_all(client, &id(0), &id(topic), 0).await?;
    Ok(messages.iter().map(|m| (m.header.id, String::from_utf8_lossy(&m.payload).into_owned())).collect())
}

fn pairs(expected: &[(u128, &str)]) -> Vec<(u128, String)> {
    expected.iter().map(|(id, payload)| (*id, (*payload).to_owned())).collect()
}

async fn topics(client: &IggyClient) -> anyhow::Result<()> {
    client.create_stream("s").await?;
    let durable = TopicCreateOptions { durability: Durability::Persisted, ..rill_tests::topic_options(1) };
    client.create_topic(&id(0), "dedup", &durable).await?;
    let mut off = durable.clone();
    off.raw.insert("message_deduplication".into(), "false".into());
    client.create_topic(&id(0), "keeps-copies", &off).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_ids_are_stored_once_even_across_a_restart() -> anyhow::Result<()> {
    let mut server = TestServer::start_with_env(&[("IGGY_SYSTEM_MESSAGE_DEDUPLICATION_ENABLED", "true")])?;
    let client = connect_root(&server.tcp_address()).await?;
    topics(&client).await?;
    send(&client, 0, &[(1, "a"), (2, "b"), (2, "b again"), (3, "c")]).await?;
    send(&client, 0, &[(3, "c retried"), (4, "d"), (1, "a retried")]).await?;
    send(&client, 0, &[(2, "b retried")]).await?;
    send_raw(&client, 0, &[(0, "no id"), (0, "no id either"), (5, "e")]).await?;
    let expected = [(1, "a"), (2, "b"), (3, "c"), (4, "d"), (0, "no id"), (0, "no id either"), (5, "e")];
    assert_eq!(stored(&client, 0).await?, pairs(&expected));
    send(&client, 1, &[(1, "a"), (1, "a")]).await?;
    assert_eq!(stored(&client, 1).await?.len(), 2, "a topic that turns it off keeps every copy");
    let topic = client.get_topic(&id(0), &id(0)).await?.expect("topic");
    assert_eq!(topic.partitions[0].current_offset, 6, "dropped messages take no offset");

    server.restart()?;
    let client = connect_root(&server.tcp_address()).await?;
    send(&client, 0, &[(4, "d after restart"), (6, "f")]).await?;
    send_raw(&client, 0, &[(0, "no id after restart")]).await?;
    server.kill9()?;
    server.restart()?;
    let client = connect_root(&server.tcp_address()).await?;
    send(&client, 0, &[(6, "f after a kill"), (5, "e after a kill"), (7, "g")]).await?;
    let mut expected = expected.to_vec();
    expected.extend([(6, "f"), (0, "no id after restart"), (7, "g")]);
    assert_eq!(stored(&client, 0).await?, pairs(&expected), "the window is rebuilt from the log");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_deduplication_every_copy_is_stored() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    topics(&client).await?;
    send(&client, 0, &[(1, "a"), (1, "a")]).await?;
    send(&client, 0, &[(1, "a")]).await?;
    assert_eq!(stored(&client, 0).await?.len(), 3, "off by default, as in Iggy");
    Ok(())
}
