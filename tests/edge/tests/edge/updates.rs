//! UPDATE_RESOURCE (16) from the 0.12 client: streams, topics and users patched, keys reset,
//! and the refusals the 0.12 catalog defines.

use iggy::prelude::*;
use rill_edge_tests::TestServer;
use rill_edge_tests::id;
use std::time::Duration;

/// A topic option's value as the server reports it, in microseconds or bytes.
fn option_u64(topic: &TopicDetails, key: &str) -> Option<u64> {
    topic.options.iter().find(|(k, _)| k.to_string_value() == key).and_then(|(_, v)| v.value.as_uint64().ok())
}

#[tokio::test]
async fn streams_topics_and_users_are_patched_and_reset() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = server.root_client().await?;
    client.create_stream("before", &StreamCreateOptions::default()).await?;
    let rename = StreamUpdateOptions { name: Some("after".into()), ..Default::default() };
    client.update_stream(&id("before"), &rename).await?;
    assert!(client.get_stream(&id("before")).await?.is_none());
    assert!(client.get_stream(&id("after")).await?.is_some());

    client.create_topic(&id("after"), "t", &TopicCreateOptions::default()).await?;
    let hour = IggyExpiry::ExpireDuration(Duration::from_secs(3600).into());
    let patch = TopicUpdateOptions { name: Some("u".into()), message_expiry: Some(hour), ..Default::default() };
    client.update_topic(&id("after"), &id("t"), &patch).await?;
    let topic = client.get_topic(&id("after"), &id("u")).await?.expect("renamed");
    assert_eq!(option_u64(&topic, "message_expiry"), Some(3_600_000_000));
    let reset = TopicUpdateOptions { reset: [OptionKey::MessageExpiry].into(), ..Default::default() };
    client.update_topic(&id("after"), &id("u"), &reset).await?;
    let topic = client.get_topic(&id("after"), &id("u")).await?.expect("the topic");
    assert_ne!(option_u64(&topic, "message_expiry"), Some(3_600_000_000), "back to the server's default");

    client.create_user("worker", "secret-1", UserStatus::Active, None, &UserCreateOptions::default()).await?;
    let patch = UserUpdateOptions {
        username: Some("worker-2".into()),
        status: Some(UserStatus::Inactive),
        ..Default::default()
    };
    client.update_user(&id("worker"), &patch).await?;
    let user = client.get_user(&id("worker-2")).await?.expect("renamed");
    assert_eq!(user.status, UserStatus::Inactive);
    Ok(())
}

#[tokio::test]
async fn refused_patches_change_nothing() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = server.root_client().await?;
    client.create_stream("s", &StreamCreateOptions::default()).await?;
    client.create_topic(&id("s"), "t", &TopicCreateOptions::default()).await?;
    let code = |result: Result<(), IggyError>| result.err().map(|error| error.as_code());

    let compression = TopicUpdateOptions {
        name: Some("renamed".into()),
        raw: [("compression_algorithm".to_owned(), "gzip".to_owned())].into(),
        ..Default::default()
    };
    assert_eq!(code(client.update_topic(&id("s"), &id("t"), &compression).await), Some(4103), "not updatable");
    assert!(client.get_topic(&id("s"), &id("t")).await?.is_some(), "the name stayed");
    let unknown = StreamUpdateOptions { raw: [("colour".to_owned(), "red".to_owned())].into(), ..Default::default() };
    assert_eq!(code(client.update_stream(&id("s"), &unknown).await), Some(4041), "unknown key");
    let root = UserUpdateOptions { status: Some(UserStatus::Inactive), ..Default::default() };
    assert_eq!(code(client.update_user(&Identifier::numeric(0)?, &root).await), Some(4108), "root stays");
    let missing = StreamUpdateOptions { name: Some("x".into()), ..Default::default() };
    assert!(client.update_stream(&id("nope"), &missing).await.is_err());
    Ok(())
}

#[tokio::test]
async fn a_replication_factor_above_the_node_count_is_refused() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = server.root_client().await?;
    client.create_stream("s", &StreamCreateOptions::default()).await?;
    let one = TopicCreateOptions { replication_factor: Some(1), ..Default::default() };
    client.create_topic(&id("s"), "single", &one).await?;
    let two = TopicCreateOptions { replication_factor: Some(2), ..Default::default() };
    let refused = client.create_topic(&id("s"), "double", &two).await;
    assert_eq!(refused.err().map(|e| e.as_code()), Some(2018), "one node holds one replica");
    let topics = client.get_topics(&id("s")).await?;
    assert_eq!(topics.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["single"]);
    Ok(())
}
