//! Long polling (POLL_MESSAGES_DEFERRED and CANCEL_DEFERRED_REQUEST) through the 0.12
//! client's `poll_messages` with a wait: woken by the send that brings the messages, empty
//! when the wait runs out, ended by a cancel, and never in the way of the requests after it.

use std::str::FromStr;
use std::time::Duration;

use iggy::prelude::*;
use rill_edge_tests::id;
use rill_edge_tests::{Over, TestServer};

fn payloads(polled: &PolledMessages) -> Vec<String> {
    polled.messages.iter().map(|m| String::from_utf8_lossy(&m.payload).into_owned()).collect()
}

async fn send(client: &IggyClient, texts: &[&str]) -> anyhow::Result<()> {
    let mut batch: Vec<IggyMessage> = texts.iter().map(|t| IggyMessage::from_str(t).expect("a message")).collect();
    client.send_messages(&id("s"), &id("t"), &Partitioning::partition_id(0), &mut batch).await?;
    Ok(())
}

async fn empty_topic(client: &IggyClient) -> anyhow::Result<()> {
    client.create_stream("s", &StreamCreateOptions::default()).await?;
    let options = TopicCreateOptions { partitions_count: Some(1), ..Default::default() };
    client.create_topic(&id("s"), "t", &options).await?;
    Ok(())
}

/// A poll that waits up to `wait` for `min_count` messages.
fn waiting(wait: Duration, min_count: u32, commit: CommitPolicy) -> PollOptions {
    PollOptions { count: 10, max_wait: wait.into(), min_count, commit, ..Default::default() }
}

/// A poll waiting for three messages on `over`, while the same client's next requests are
/// answered and another client's sends wake it.
async fn woken_by_sends_over(over: Over) -> anyhow::Result<()> {
    let server = TestServer::start_over(over)?;
    let reader = server.root_client_over(over).await?;
    let writer = server.root_client_over(over).await?;
    empty_topic(&reader).await?;
    let consumer = Consumer::new(Identifier::numeric(1)?);
    // Thirty seconds is far past the test's own pace: a poll that answers sooner was woken.
    let options = waiting(Duration::from_secs(30), 3, CommitPolicy::Manual);
    let (stream, topic, start) = (id("s"), id("t"), PollingStrategy::offset(0));
    // A first poll that does not wait leaves the client knowing the partition's route, so
    // the waiting poll's frame leaves at once, ahead of the requests below.
    let warm = PollOptions { count: 1, ..Default::default() };
    assert!(reader.poll_messages(&stream, &topic, 0, &consumer, &start, warm).await?.messages.is_empty());
    let poll = reader.poll_messages(&stream, &topic, 0, &consumer, &start, options);
    let traffic = async {
        // The reader's own requests are answered while its poll waits.
        let streams = tokio::time::timeout(Duration::from_secs(10), reader.get_streams()).await;
        assert!(streams.is_ok(), "{over:?}: a request behind the waiting poll was held up by it");
        assert_eq!(streams??.len(), 1);
        reader.ping().await?;
        send(&writer, &["a"]).await?;
        tokio::time::sleep(Duration::from_millis(200)).await;
        send(&writer, &["b", "c"]).await?;
        anyhow::Ok(())
    };
    let (polled, sent) = tokio::join!(poll, traffic);
    sent?;
    let polled = polled?;
    assert_eq!(payloads(&polled), ["a", "b", "c"], "{over:?}: the poll waited for its third message");
    Ok(())
}

#[tokio::test]
async fn a_deferred_poll_is_woken_by_the_sends_that_bring_its_messages() -> anyhow::Result<()> {
    woken_by_sends_over(Over::Tcp).await
}

#[tokio::test]
async fn a_deferred_poll_over_tls_holds_up_no_request_and_is_woken() -> anyhow::Result<()> {
    woken_by_sends_over(Over::TcpTls).await
}

#[tokio::test]
async fn a_deferred_poll_over_websocket_holds_up_no_request_and_is_woken() -> anyhow::Result<()> {
    woken_by_sends_over(Over::WebSocket).await
}

#[tokio::test]
async fn a_deferred_poll_over_secure_websocket_holds_up_no_request_and_is_woken() -> anyhow::Result<()> {
    woken_by_sends_over(Over::WebSocketTls).await
}

#[tokio::test]
async fn a_deferred_poll_whose_wait_runs_out_answers_empty() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = server.root_client().await?;
    empty_topic(&client).await?;
    send(&client, &["only"]).await?;
    let consumer = Consumer::new(Identifier::numeric(1)?);
    let options = waiting(Duration::from_millis(300), 1, CommitPolicy::Manual);
    let polled = client.poll_messages(&id("s"), &id("t"), 0, &consumer, &PollingStrategy::offset(1), options).await?;
    assert!(polled.messages.is_empty(), "nothing arrived past offset 0");
    let options = waiting(Duration::from_millis(300), 2, CommitPolicy::Manual);
    let polled = client.poll_messages(&id("s"), &id("t"), 0, &consumer, &PollingStrategy::offset(0), options).await?;
    assert_eq!(payloads(&polled), ["only"], "a wait that runs out answers with what there is");
    Ok(())
}

#[tokio::test]
async fn a_cancelled_deferred_poll_stops_waiting_and_commits_nothing() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = server.root_client().await?;
    empty_topic(&client).await?;
    let consumer = Consumer::new(Identifier::numeric(7)?);
    let options = waiting(Duration::from_secs(60), 1, CommitPolicy::OnRead);
    let (stream, topic, next) = (id("s"), id("t"), PollingStrategy::next());
    {
        let poll = client.poll_messages(&stream, &topic, 0, &consumer, &next, options);
        // Dropping the call after its request left sends CANCEL_DEFERRED_REQUEST.
        assert!(tokio::time::timeout(Duration::from_millis(300), poll).await.is_err(), "the poll waits");
    }
    // Had the poll gone on waiting, this send would wake it and its commit would move the
    // consumer past the message.
    send(&client, &["kept"]).await?;
    let options = waiting(Duration::from_secs(5), 1, CommitPolicy::OnRead);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let polled = loop {
        // The client refuses a committing poll until the cancelled one's reply arrives.
        match client.poll_messages(&id("s"), &id("t"), 0, &consumer, &PollingStrategy::next(), options).await {
            Err(error) if error.as_code() == IggyError::PartitionLaneBlocked(0, 0).as_code() => {
                assert!(std::time::Instant::now() < deadline, "the cancelled poll never answered");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => break other?,
        }
    };
    assert_eq!(payloads(&polled), ["kept"], "the cancelled poll committed nothing");
    let offset = client.get_consumer_offset(&consumer, &id("s"), &id("t"), Some(0)).await?;
    assert_eq!(offset.map(|o| o.stored_offset), Some(0));
    Ok(())
}
