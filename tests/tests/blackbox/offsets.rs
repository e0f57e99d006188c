//! Consumer offsets through the official 0.11.0 client: store, get, overwrite and delete, for numeric and string consumer ids and per partition.

use iggy::prelude::*;
use rill_tests::{TestServer, connect_root, create_stream_and_topic, error_code, id, named, sample_message};

const STREAM_ID_NOT_FOUND: u32 = 1009;
const TOPIC_ID_NOT_FOUND: u32 = 2010;
const PARTITION_NOT_FOUND: u32 = 3007;
const CONSUMER_OFFSET_NOT_FOUND: u32 = 3021;

/// A stream 0 / topic 0 with `partitions` partitions, each holding `per_partition`
/// messages.
async fn setup(client: &IggyClient, partitions: u32, per_partition: u64) -> anyhow::Result<()> {
    create_stream_and_topic(client, "s", "t", partitions).await?;
    for partition in 0..partitions {
        let mut messages: Vec<IggyMessage> = (0..per_partition).map(sample_message).collect();
        client.send_messages(&id(0), &id(0), &Partitioning::partition_id(partition), &mut messages).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_get_and_delete_with_a_numeric_consumer() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    setup(&client, 1, 20).await?;
    let consumer = Consumer::new(id(7));
    let (s, t) = (id(0), id(0));

    assert!(client.get_consumer_offset(&consumer, &s, &t, Some(0)).await?.is_none());

    client.store_consumer_offset(&consumer, &s, &t, Some(0), 5).await?;
    let info = client.get_consumer_offset(&consumer, &s, &t, Some(0)).await?.expect("stored");
    assert_eq!(info.partition_id, 0);
    assert_eq!(info.stored_offset, 5);
    assert_eq!(info.current_offset, 19);

    client.store_consumer_offset(&consumer, &s, &t, Some(0), 12).await?;
    let info = client.get_consumer_offset(&consumer, &s, &t, Some(0)).await?.expect("stored");
    assert_eq!(info.stored_offset, 12, "overwritten");

    client.delete_consumer_offset(&consumer, &s, &t, Some(0)).await?;
    assert!(client.get_consumer_offset(&consumer, &s, &t, Some(0)).await?.is_none());
    let again = client.delete_consumer_offset(&consumer, &s, &t, Some(0)).await;
    assert_eq!(error_code(again, "delete a deleted offset"), CONSUMER_OFFSET_NOT_FOUND);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn string_and_numeric_consumers_are_independent() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    setup(&client, 1, 50).await?;
    let (s, t) = (named("s"), named("t"));
    let by_name = Consumer::new(named("billing-reader"));
    let other_name = Consumer::new(named("audit-reader"));
    let by_number = Consumer::new(id(1));

    client.store_consumer_offset(&by_name, &s, &t, Some(0), 30).await?;
    client.store_consumer_offset(&by_number, &s, &t, Some(0), 4).await?;

    let name_info = client.get_consumer_offset(&by_name, &s, &t, Some(0)).await?.expect("name");
    assert_eq!(name_info.stored_offset, 30);
    let number_info = client.get_consumer_offset(&by_number, &s, &t, Some(0)).await?.expect("id");
    assert_eq!(number_info.stored_offset, 4);
    assert!(client.get_consumer_offset(&other_name, &s, &t, Some(0)).await?.is_none());

    client.delete_consumer_offset(&by_name, &s, &t, Some(0)).await?;
    assert!(client.get_consumer_offset(&by_name, &s, &t, Some(0)).await?.is_none());
    let number_info = client.get_consumer_offset(&by_number, &s, &t, Some(0)).await?.expect("id");
    assert_eq!(number_info.stored_offset, 4, "the numeric consumer is unaffected");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_are_kept_per_partition_and_no_partition_means_partition_zero() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    setup(&client, 3, 10).await?;
    let consumer = Consumer::new(id(3));
    let (s, t) = (id(0), id(0));

    client.store_consumer_offset(&consumer, &s, &t, Some(1), 6).await?;
    client.store_consumer_offset(&consumer, &s, &t, Some(2), 8).await?;
    assert!(client.get_consumer_offset(&consumer, &s, &t, Some(0)).await?.is_none());
    let p1 = client.get_consumer_offset(&consumer, &s, &t, Some(1)).await?.expect("p1");
    assert_eq!((p1.partition_id, p1.stored_offset), (1, 6));
    let p2 = client.get_consumer_offset(&consumer, &s, &t, Some(2)).await?.expect("p2");
    assert_eq!((p2.partition_id, p2.stored_offset), (2, 8));

    client.store_consumer_offset(&consumer, &s, &t, None, 2).await?;
    let p0 = client.get_consumer_offset(&consumer, &s, &t, Some(0)).await?.expect("p0");
    assert_eq!((p0.partition_id, p0.stored_offset), (0, 2));
    let implicit = client.get_consumer_offset(&consumer, &s, &t, None).await?.expect("implicit");
    assert_eq!(implicit.stored_offset, 2);

    client.delete_consumer_offset(&consumer, &s, &t, Some(1)).await?;
    assert!(client.get_consumer_offset(&consumer, &s, &t, Some(1)).await?.is_none());
    let p2 = client.get_consumer_offset(&consumer, &s, &t, Some(2)).await?.expect("p2 kept");
    assert_eq!(p2.stored_offset, 8);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_of_missing_resources_fail() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    setup(&client, 1, 5).await?;
    let consumer = Consumer::new(id(1));

    let store = client.store_consumer_offset(&consumer, &id(0), &id(0), Some(4), 1).await;
    assert_eq!(error_code(store, "store, missing partition"), PARTITION_NOT_FOUND);
    let get = client.get_consumer_offset(&consumer, &id(0), &id(0), Some(4)).await;
    if rill_tests::transport::is_binary() {
        assert_eq!(error_code(get, "get, missing partition"), PARTITION_NOT_FOUND);
    } else {
        // The HTTP client reads every 404 of this route as "no offset stored".
        assert!(matches!(get, Ok(None)), "get, missing partition over HTTP: {get:?}");
    }
    let store = client.store_consumer_offset(&consumer, &id(0), &id(9), Some(0), 1).await;
    assert_eq!(error_code(store, "store, missing topic"), TOPIC_ID_NOT_FOUND);
    let store = client.store_consumer_offset(&consumer, &id(9), &id(0), Some(0), 1).await;
    assert_eq!(error_code(store, "store, missing stream"), STREAM_ID_NOT_FOUND);
    let delete = client.delete_consumer_offset(&consumer, &id(0), &id(0), Some(0)).await;
    assert_eq!(error_code(delete, "delete, nothing stored"), CONSUMER_OFFSET_NOT_FOUND);
    Ok(())
}
