//! A deleted buffered topic's log is kept as a spare, and the next new topic's first log is
//! that very file written over, its pages still cached. After a kill -9 the file still holds
//! the old topic's batches past the new ones, the same lengths at the same places with the
//! very offsets that come next: none of them is served (the log's floor file tells them
//! apart), and a graceful stop cuts them off.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use iggy::prelude::*;
use rill_tests::{connect_root, id, poll_all, topic_id};

/// A payload 13 to 8,012 bytes long; `salt` tells topics apart without changing lengths.
fn payload(salt: u8, n: u64) -> Vec<u8> {
    let len = 13 + (n * 7919 % 8000) as usize;
    (0..len).map(|i| (n as usize * 31 + i * 7) as u8 ^ salt).collect()
}

/// Sends `sends` batches of 1 to 5 messages from message 0: the same batch lengths and
/// offsets for every topic.
async fn send(client: &IggyClient, topic: u32, salt: u8, sends: u64) -> anyhow::Result<u64> {
    let mut n = 0;
    for send in 0..sends {
        let count = 1 + send % 5;
        let mut batch: Vec<IggyMessage> = (n..n + count)
            .map(|m| IggyMessage::builder().id(u128::from(m) + 1).payload(payload(salt, m).into()).build())
            .collect::<Result<_, _>>()?;
        client.send_messages(&id(0), &id(topic), &Partitioning::partition_id(0), &mut batch).await?;
        n += count;
    }
    // Into the page cache, where a kill -9 leaves it.
    client.flush_unsaved_buffer(&id(0), &id(topic), 0, false).await?;
    Ok(n)
}

/// Topic `topic` holds exactly `count` messages, all of them the `salt` topic's.
async fn assert_stored(client: &IggyClient, topic: u32, salt: u8, count: u64) -> anyhow::Result<()> {
    let stored = poll_all(client, &id(0), &id(topic), 0).await?;
    assert_eq!(stored.len() as u64, count, "every message of topic {topic}, and no other");
    for (n, message) in stored.iter().enumerate() {
        assert_eq!(message.header.offset, n as u64);
        assert_eq!(message.payload.as_ref(), payload(salt, n as u64).as_slice(), "message {n} is this topic's");
    }
    Ok(())
}

fn partition_files(data: &Path, topic: u32, extension: &str) -> Vec<PathBuf> {
    let dir = data.join(format!("streams/0/topics/{topic}/partitions/0"));
    let mut files: Vec<PathBuf> =
        rill_tests::files_under(&dir).into_iter().filter(|p| p.extension().is_some_and(|e| e == extension)).collect();
    files.sort();
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_buffered_topic_writes_over_a_deleted_ones_log_and_a_kill9_serves_none_of_its_batches()
-> anyhow::Result<()> {
    let (mut server, client, metrics) = rill_tests::start_with_metrics().await?;
    let metric = |name: &str| metrics.get(name);
    client.create_stream("s").await?;
    let buffered =
        TopicCreateOptions { partitions_count: Some(1), durability: Durability::Replicated, ..Default::default() };
    client.create_topic(&id(0), "old", &buffered).await?;
    let old = topic_id(&client, "old").await?;
    // About 2 MB: more than the 1 MiB a log needs to be kept.
    send(&client, old, 0x00, 170).await?;
    let data = server.data_dir();
    let old_log = partition_files(&data, old, "log").pop().expect("the old topic's log");
    let (old_inode, old_len) = (std::fs::metadata(&old_log)?.ino(), std::fs::metadata(&old_log)?.len());
    client.delete_topic(&id(0), &id(old)).await?;
    assert_eq!(metric("rill_spare_logs")?, Some(1), "the deleted buffered log is kept");

    client.create_topic(&id(0), "new", &buffered).await?;
    let new = topic_id(&client, "new").await?;
    let sent = send(&client, new, 0x5a, 40).await?;
    let new_log = partition_files(&data, new, "log").pop().expect("the new topic's log");
    assert_eq!(std::fs::metadata(&new_log)?.ino(), old_inode, "the new log is the old one's file");
    assert_eq!(std::fs::metadata(&new_log)?.len(), old_len, "written over, not cut");
    assert_eq!(partition_files(&data, new, "floor").len(), 1, "its floor recorded beside it");
    assert_eq!(metric("rill_spare_logs_taken_total")?, Some(1));
    assert_stored(&client, new, 0x5a, sent).await?;
    drop(client);

    server.kill9()?;
    server.restart()?;
    let client = connect_root(&server.tcp_address()).await?;
    assert_stored(&client, new, 0x5a, sent).await?;
    drop(client);
    server.stop_graceful()?;
    assert!(std::fs::metadata(&new_log)?.len() < old_len, "a graceful stop cut the old bytes");
    server.restart()?;
    let client = connect_root(&server.tcp_address()).await?;
    assert_stored(&client, new, 0x5a, sent).await?;
    Ok(())
}
