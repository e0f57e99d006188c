//! Stream, topic, partition and segment management through the official 0.11.0 client: ids, names, listing, updates, deletes, purges and the errors for duplicates and missing ids.

use iggy::prelude::*;
use rill_tests::{
    TestServer, connect_root, create_stream_and_topic, error_code, id, named, poll_all, sample_message, topic_options,
};

const STREAM_ID_NOT_FOUND: u32 = 1009;
const STREAM_NAME_ALREADY_EXISTS: u32 = 1012;
const TOPIC_ID_NOT_FOUND: u32 = 2010;
const TOPIC_NAME_ALREADY_EXISTS: u32 = 2013;
const PARTITION_NOT_FOUND: u32 = 3007;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_get_zero_based_ids_and_are_found_by_id_or_name() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    assert!(client.get_streams().await?.is_empty(), "fresh server has no streams");

    let alpha = client.create_stream("alpha").await?;
    let beta = client.create_stream("beta").await?;
    assert_eq!((alpha.id, alpha.name.as_str()), (0, "alpha"));
    assert_eq!((beta.id, beta.name.as_str()), (1, "beta"));
    assert_eq!(alpha.topics_count, 0);
    assert!(alpha.topics.is_empty());

    let by_id = client.get_stream(&id(1)).await?.expect("stream 1 by id");
    assert_eq!(by_id.name, "beta");
    let by_name = client.get_stream(&named("alpha")).await?.expect("stream by name");
    assert_eq!(by_name.id, 0);

    let mut listed: Vec<(u32, String)> = client.get_streams().await?.into_iter().map(|s| (s.id, s.name)).collect();
    listed.sort();
    assert_eq!(listed, vec![(0, "alpha".to_owned()), (1, "beta".to_owned())]);

    assert!(client.get_stream(&id(42)).await?.is_none(), "missing numeric id");
    assert!(client.get_stream(&named("nope")).await?.is_none(), "missing name");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_names_are_unique_and_updates_and_deletes_apply() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    client.create_stream("orders").await?;
    client.create_stream("payments").await?;
    let duplicate = client.create_stream("orders").await;
    assert_eq!(error_code(duplicate, "duplicate stream"), STREAM_NAME_ALREADY_EXISTS);

    client.update_stream(&id(0), "orders-v2", &StreamUpdateOptions::default()).await?;
    assert!(client.get_stream(&named("orders")).await?.is_none(), "old name gone");
    let renamed = client.get_stream(&named("orders-v2")).await?.expect("renamed");
    assert_eq!(renamed.id, 0);
    let clash = client.update_stream(&id(0), "payments", &StreamUpdateOptions::default()).await;
    assert_eq!(error_code(clash, "rename onto existing"), STREAM_NAME_ALREADY_EXISTS);

    client.delete_stream(&named("payments")).await?;
    assert!(client.get_stream(&id(1)).await?.is_none(), "deleted stream");
    let again = client.delete_stream(&id(1)).await;
    assert_eq!(error_code(again, "delete deleted stream"), STREAM_ID_NOT_FOUND);
    let update_missing = client.update_stream(&id(77), "x", &StreamUpdateOptions::default()).await;
    assert_eq!(error_code(update_missing, "update missing stream"), STREAM_ID_NOT_FOUND);

    let streams = client.get_streams().await?;
    assert_eq!(streams.len(), 1);
    assert_eq!(streams[0].name, "orders-v2");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_are_created_with_partitions_and_found_by_id_or_name() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    let stream = client.create_stream("shop").await?;
    let created = client.create_topic(&id(stream.id), "orders", &topic_options(3)).await?;
    assert_eq!((created.id, created.name.as_str()), (0, "orders"));
    assert_eq!(created.partitions_count, 3);
    let partition_ids: Vec<u32> = created.partitions.iter().map(|p| p.id).collect();
    assert_eq!(partition_ids, vec![0, 1, 2]);
    assert_eq!(created.compression_algorithm, CompressionAlgorithm::None);
    assert_eq!(created.message_expiry, IggyExpiry::NeverExpire);
    assert_eq!(created.messages_count, 0);

    let second = client.create_topic(&named("shop"), "refunds", &topic_options(1)).await?;
    assert_eq!(second.id, 1);

    for (stream_id, topic_id) in [(id(0), id(0)), (named("shop"), named("orders"))] {
        let topic = client.get_topic(&stream_id, &topic_id).await?.expect("topic");
        assert_eq!(topic.id, 0);
        assert_eq!(topic.name, "orders");
        assert_eq!(topic.partitions_count, 3);
        assert_eq!(topic.partitions.len(), 3);
    }

    let mut topics: Vec<(u32, String, u32)> =
        client.get_topics(&id(0)).await?.into_iter().map(|t| (t.id, t.name, t.partitions_count)).collect();
    topics.sort();
    assert_eq!(topics, vec![(0, "orders".into(), 3), (1, "refunds".into(), 1)]);

    let details = client.get_stream(&id(0)).await?.expect("stream");
    assert_eq!(details.topics_count, 2);
    assert_eq!(details.topics.len(), 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_errors_and_missing_topics() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    create_stream_and_topic(&client, "s", "t", 1).await?;

    let duplicate = client.create_topic(&id(0), "t", &topic_options(2)).await;
    assert_eq!(error_code(duplicate, "duplicate topic"), TOPIC_NAME_ALREADY_EXISTS);
    let no_stream = client.create_topic(&id(9), "t", &topic_options(1)).await;
    assert_eq!(error_code(no_stream, "topic in missing stream"), STREAM_ID_NOT_FOUND);

    assert!(client.get_topic(&id(0), &id(5)).await?.is_none(), "missing topic id");
    assert!(client.get_topic(&id(0), &named("zzz")).await?.is_none(), "missing topic name");
    assert!(client.get_topic(&id(9), &id(0)).await?.is_none(), "topic of missing stream");

    let delete_missing = client.delete_topic(&id(0), &id(5)).await;
    assert_eq!(error_code(delete_missing, "delete missing topic"), TOPIC_ID_NOT_FOUND);
    let delete_in_missing_stream = client.delete_topic(&id(9), &id(0)).await;
    assert_eq!(error_code(delete_in_missing_stream, "delete in missing stream"), STREAM_ID_NOT_FOUND);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_can_be_updated_and_deleted() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    create_stream_and_topic(&client, "s", "first", 2).await?;
    client.create_topic(&id(0), "second", &topic_options(1)).await?;

    let one_hour_micros = 3_600_000_000u64;
    let update =
        TopicUpdateOptions { message_expiry: Some(IggyExpiry::from(one_hour_micros)), ..TopicUpdateOptions::default() };
    client.update_topic(&id(0), &id(0), "first-renamed", &update).await?;
    let topic = client.get_topic(&id(0), &named("first-renamed")).await?.expect("renamed");
    assert_eq!(topic.id, 0);
    assert_eq!(topic.partitions_count, 2, "update keeps partitions");
    assert_eq!(u64::from(topic.message_expiry), one_hour_micros, "updated expiry");
    assert!(client.get_topic(&id(0), &named("first")).await?.is_none());

    let clash = client.update_topic(&id(0), &id(0), "second", &TopicUpdateOptions::default()).await;
    assert_eq!(error_code(clash, "rename onto existing topic"), TOPIC_NAME_ALREADY_EXISTS);

    client.delete_topic(&id(0), &named("second")).await?;
    assert!(client.get_topic(&id(0), &id(1)).await?.is_none(), "deleted topic");
    let topics = client.get_topics(&id(0)).await?;
    assert_eq!(topics.len(), 1);
    assert_eq!(client.get_stream(&id(0)).await?.expect("stream").topics_count, 1);

    // Deleting a stream takes its topics with it.
    client.delete_stream(&id(0)).await?;
    assert!(client.get_topic(&id(0), &id(0)).await?.is_none());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_can_be_added_and_removed_from_the_end() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    let (s, t) = create_stream_and_topic(&client, "s", "t", 2).await?;
    let (s, t) = (id(s), id(t));

    client.create_partitions(&s, &t, 3).await?;
    let topic = client.get_topic(&s, &t).await?.expect("topic");
    assert_eq!(topic.partitions_count, 5);
    let ids: Vec<u32> = topic.partitions.iter().map(|p| p.id).collect();
    assert_eq!(ids, vec![0, 1, 2, 3, 4]);

    let mut messages = vec![sample_message(1)];
    client.send_messages(&s, &t, &Partitioning::partition_id(4), &mut messages).await?;

    client.delete_partitions(&s, &t, 2).await?;
    let topic = client.get_topic(&s, &t).await?.expect("topic");
    assert_eq!(topic.partitions_count, 3);
    let ids: Vec<u32> = topic.partitions.iter().map(|p| p.id).collect();
    assert_eq!(ids, vec![0, 1, 2]);

    let mut messages = vec![sample_message(2)];
    let to_deleted = client.send_messages(&s, &t, &Partitioning::partition_id(4), &mut messages).await;
    assert_eq!(error_code(to_deleted, "send to deleted partition"), PARTITION_NOT_FOUND);

    let missing_topic = client.create_partitions(&s, &id(8), 1).await;
    assert_eq!(error_code(missing_topic, "partitions of missing topic"), TOPIC_ID_NOT_FOUND);
    let missing_stream = client.delete_partitions(&id(8), &t, 1).await;
    assert_eq!(error_code(missing_stream, "partitions of missing stream"), STREAM_ID_NOT_FOUND);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_segments_succeeds_on_existing_partitions_only() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    let (s, t) = create_stream_and_topic(&client, "s", "t", 2).await?;
    let (s, t) = (id(s), id(t));
    let mut messages: Vec<IggyMessage> = (0..50).map(sample_message).collect();
    client.send_messages(&s, &t, &Partitioning::partition_id(0), &mut messages).await?;

    client.delete_segments(&s, &t, 0, 1).await?;
    client.delete_segments(&s, &t, 1, 1).await?;
    let missing = client.delete_segments(&s, &t, 7, 1).await;
    assert!(missing.is_err(), "delete segments of a missing partition: {missing:?}");
    let missing_topic = client.delete_segments(&s, &id(3), 0, 1).await;
    assert!(missing_topic.is_err(), "delete segments of a missing topic: {missing_topic:?}");

    // The partition keeps working after its segments were deleted.
    let mut more = vec![sample_message(100)];
    client.send_messages(&s, &t, &Partitioning::partition_id(0), &mut more).await?;
    let remaining = poll_all(&client, &s, &t, 0).await?;
    let last = remaining.last().expect("the new message is readable");
    assert_eq!(last.header.id, more[0].header.id);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purging_removes_messages_but_keeps_structure() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    let (s, t) = create_stream_and_topic(&client, "s", "a", 2).await?;
    client.create_topic(&id(s), "b", &topic_options(1)).await?;
    let (s, t) = (id(s), id(t));
    for (topic, partition) in [(t.clone(), 0), (t.clone(), 1), (id(1), 0)] {
        let mut messages: Vec<IggyMessage> = (0..20).map(sample_message).collect();
        client.send_messages(&s, &topic, &Partitioning::partition_id(partition), &mut messages).await?;
    }
    assert_eq!(client.get_topic(&s, &t).await?.expect("topic").messages_count, 40);

    client.purge_topic(&s, &t).await?;
    let topic = client.get_topic(&s, &t).await?.expect("purged topic still exists");
    assert_eq!(topic.partitions_count, 2);
    assert_eq!(topic.messages_count, 0);
    for partition in 0..2 {
        assert!(poll_all(&client, &s, &t, partition).await?.is_empty(), "purged partition");
    }
    assert_eq!(poll_all(&client, &s, &id(1), 0).await?.len(), 20, "other topic untouched");

    client.purge_stream(&s).await?;
    assert!(poll_all(&client, &s, &id(1), 0).await?.is_empty(), "purged stream");
    let stream = client.get_stream(&s).await?.expect("purged stream still exists");
    assert_eq!(stream.topics_count, 2);
    assert_eq!(stream.messages_count, 0);

    let missing = client.purge_stream(&id(5)).await;
    assert_eq!(error_code(missing, "purge missing stream"), STREAM_ID_NOT_FOUND);
    let missing = client.purge_topic(&s, &id(5)).await;
    assert_eq!(error_code(missing, "purge missing topic"), TOPIC_ID_NOT_FOUND);
    Ok(())
}
