//! The 0.12 client's everyday commands, each checked against what the server did: tokens,
//! users, offsets, every polling strategy, groups, partitions, deletions and queries.

use iggy::prelude::*;
use rill_edge_tests::TestServer;
use rill_edge_tests::id;
use std::str::FromStr;

fn messages(texts: impl IntoIterator<Item = String>) -> Vec<IggyMessage> {
    texts.into_iter().map(|text| IggyMessage::from_str(&text).expect("a message")).collect()
}

fn payloads(polled: &PolledMessages) -> Vec<String> {
    polled.messages.iter().map(|m| String::from_utf8_lossy(&m.payload).into_owned()).collect()
}

/// A stream `s` with topic `t` of `partitions` partitions and ten messages in partition 0,
/// sent one at a time so each has a timestamp of its own.
async fn seeded(client: &IggyClient, partitions: u32) -> anyhow::Result<()> {
    client.create_stream("s", &StreamCreateOptions::default()).await?;
    let options = TopicCreateOptions { partitions_count: Some(partitions), ..Default::default() };
    client.create_topic(&id("s"), "t", &options).await?;
    for i in 0..10 {
        let mut batch = messages([format!("m{i}")]);
        client.send_messages(&id("s"), &id("t"), &Partitioning::partition_id(0), &mut batch).await?;
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    Ok(())
}

#[tokio::test]
async fn a_token_logs_a_0_12_client_in() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let root = server.root_client().await?;
    let token = root.create_personal_access_token("edge", IggyExpiry::NeverExpire).await?;
    let tokens = root.get_personal_access_tokens().await?;
    assert_eq!(tokens.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["edge"]);

    let client = server.client().await?;
    let identity = client.login_with_personal_access_token(&token.token).await?;
    assert_eq!(identity.user_id, 0, "root's token logs root in");
    assert!(client.get_streams().await?.is_empty());
    let me = client.get_me().await?;
    assert_eq!(me.user_id, Some(0));
    root.delete_personal_access_token("edge").await?;
    let refused = server.client().await?.login_with_personal_access_token(&token.token).await;
    assert!(refused.is_err(), "a deleted token logs nobody in");
    Ok(())
}

#[tokio::test]
async fn users_are_created_read_changed_and_deleted() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let root = server.root_client().await?;
    let created =
        root.create_user("reader", "secret-1", UserStatus::Active, None, &UserCreateOptions::default()).await?;
    assert_eq!(created.username, "reader");
    let users = root.get_users().await?;
    assert_eq!(users.iter().map(|u| u.username.as_str()).collect::<Vec<_>>(), ["iggy", "reader"]);
    root.change_password(&id("reader"), "secret-1", "secret-2").await?;
    let reader = server.client().await?;
    reader.login_user("reader", "secret-2").await?;
    assert_eq!(
        reader.create_stream("nope", &StreamCreateOptions::default()).await.err().map(|e| e.as_code()),
        Some(IggyError::Unauthorized.as_code()),
        "a user without permissions creates nothing"
    );
    root.delete_user(&id("reader")).await?;
    assert!(root.get_user(&id("reader")).await?.is_none());
    Ok(())
}

#[tokio::test]
async fn every_polling_strategy_and_stored_offsets() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = server.root_client().await?;
    seeded(&client, 1).await?;
    let consumer = Consumer::new(Identifier::numeric(1)?);
    let poll = |strategy: PollingStrategy, count: u32| {
        let (client, consumer) = (&client, &consumer);
        async move {
            let options = PollOptions { count, ..Default::default() };
            client.poll_messages(&id("s"), &id("t"), 0, consumer, &strategy, options).await
        }
    };
    assert_eq!(payloads(&poll(PollingStrategy::first(), 3).await?), ["m0", "m1", "m2"]);
    assert_eq!(payloads(&poll(PollingStrategy::last(), 2).await?), ["m8", "m9"]);
    assert_eq!(payloads(&poll(PollingStrategy::offset(4), 2).await?), ["m4", "m5"]);
    let all = poll(PollingStrategy::first(), 10).await?;
    let fifth = IggyTimestamp::from(all.messages[5].header.timestamp);
    assert_eq!(payloads(&poll(PollingStrategy::timestamp(fifth), 1).await?)[0], "m5");

    assert!(client.get_consumer_offset(&consumer, &id("s"), &id("t"), Some(0)).await?.is_none());
    client.store_consumer_offset(&consumer, &id("s"), &id("t"), Some(0), 6).await?;
    let stored = client.get_consumer_offset(&consumer, &id("s"), &id("t"), Some(0)).await?.expect("stored");
    assert_eq!((stored.stored_offset, stored.current_offset), (6, 9));
    assert_eq!(payloads(&poll(PollingStrategy::next(), 2).await?), ["m7", "m8"]);
    client.delete_consumer_offset(&consumer, &id("s"), &id("t"), Some(0)).await?;
    assert!(client.get_consumer_offset(&consumer, &id("s"), &id("t"), Some(0)).await?.is_none());
    Ok(())
}

#[tokio::test]
async fn groups_partitions_segments_and_deletions() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = server.root_client().await?;
    seeded(&client, 2).await?;
    client.create_consumer_group(&id("s"), &id("t"), "workers").await?;
    client.join_consumer_group(&id("s"), &id("t"), &id("workers")).await?;
    let group = client.get_consumer_group(&id("s"), &id("t"), &id("workers")).await?.expect("the group");
    assert_eq!((group.members_count, group.partitions_count), (1, 2));
    client.leave_consumer_group(&id("s"), &id("t"), &id("workers")).await?;
    assert_eq!(client.get_consumer_groups(&id("s"), &id("t")).await?.len(), 1);
    client.delete_consumer_group(&id("s"), &id("t"), &id("workers")).await?;
    assert!(client.get_consumer_groups(&id("s"), &id("t")).await?.is_empty());

    client.create_partitions(&id("s"), &id("t"), 3).await?;
    assert_eq!(client.get_topic(&id("s"), &id("t")).await?.expect("the topic").partitions_count, 5);
    client.delete_partitions(&id("s"), &id("t"), 3).await?;
    assert_eq!(client.get_topics(&id("s")).await?[0].partitions_count, 2);

    let stats = client.get_stats().await?;
    assert_eq!((stats.streams_count, stats.topics_count, stats.messages_count), (1, 1, 10));
    assert!(!client.get_clients().await?.is_empty());
    let options = client.describe_options(OptionsScope::Topic).await?;
    assert!(options.iter().any(|spec| spec.key == "message_expiry"));

    client.delete_topic(&id("s"), &id("t")).await?;
    assert!(client.get_topic(&id("s"), &id("t")).await?.is_none());
    client.delete_stream(&id("s")).await?;
    assert!(client.get_stream(&id("s")).await?.is_none());
    Ok(())
}
