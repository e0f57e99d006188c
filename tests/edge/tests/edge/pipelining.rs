//! A 0.12 client keeps up to 256 requests in flight on one connection and matches replies
//! by request number: every one of them is answered, in any mix of sends, reads and pings,
//! and the sends are all stored.

use std::str::FromStr;

use futures_util::future::join_all;
use iggy::prelude::*;
use rill_edge_tests::TestServer;
use rill_edge_tests::id;

#[tokio::test]
async fn two_hundred_fifty_six_requests_in_flight_on_one_connection_are_all_answered() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = server.root_client().await?;
    client.create_stream("s", &StreamCreateOptions::default()).await?;
    let options = TopicCreateOptions { partitions_count: Some(1), ..Default::default() };
    client.create_topic(&id("s"), "t", &options).await?;

    let sends = (0..128).map(|i| {
        let client = &client;
        async move {
            let mut messages = vec![IggyMessage::from_str(&format!("m{i}")).expect("a message")];
            client.send_messages(&id("s"), &id("t"), &Partitioning::partition_id(0), &mut messages).await
        }
    });
    let reads = (0..64).map(|_| async { client.get_streams().await.map(|streams| streams.len()) });
    let pings = (0..64).map(|_| client.ping());
    let (sent, read, pinged) = tokio::join!(join_all(sends), join_all(reads), join_all(pings));
    assert!(sent.iter().all(Result::is_ok), "every send answered: {:?}", sent.iter().find(|r| r.is_err()));
    assert!(read.iter().all(|r| matches!(r, Ok(1))), "every read answered");
    assert!(pinged.iter().all(Result::is_ok), "every ping answered");

    let polled = client
        .poll_messages(
            &id("s"),
            &id("t"),
            0,
            &Consumer::new(Identifier::numeric(1)?),
            &PollingStrategy::offset(0),
            PollOptions { count: 1000, ..Default::default() },
        )
        .await?;
    let mut payloads: Vec<String> =
        polled.messages.iter().map(|m| String::from_utf8_lossy(&m.payload).into_owned()).collect();
    payloads.sort();
    let mut expected: Vec<String> = (0..128).map(|i| format!("m{i}")).collect();
    expected.sort();
    assert_eq!(payloads, expected, "each send stored once");
    Ok(())
}
