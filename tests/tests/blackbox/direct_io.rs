//! Direct I/O for the logs of persisted topics (`[system.partition] direct_io`): their bytes
//! bypass the page cache (read off with util-linux `fincore`, where the data directory is
//! not a tmpfs, whose pages are all cache), sealed segments and a gracefully stopped
//! server's logs end exactly at their last batch, every acknowledged message survives a
//! kill -9 byte-exact with later sends landing after it, and "off" writes through the page
//! cache again. Spare logs, which a partition writes over, are `deletion.rs`'s.

use std::path::{Path, PathBuf};

use iggy::prelude::*;
use rill_tests::{TestServer, connect_root, id, poll_all};

/// The smallest segments a topic may have (1 MiB): a few hundred sends roll several.
const SEGMENT_BYTES: u64 = 1 << 20;

/// A payload whose length (13 to 8,012 bytes) rarely leaves a batch on a block boundary.
fn payload(topic: u32, n: u64) -> Vec<u8> {
    let len = 13 + (n * 7919 % 8000) as usize;
    (0..len).map(|i| (n as usize * 31 + i * 7 + topic as usize) as u8).collect()
}

async fn create_topic(client: &IggyClient, name: &str, durability: Durability) -> anyhow::Result<()> {
    let options = TopicCreateOptions {
        partitions_count: Some(1),
        segment_size: Some(IggyByteSize::from(SEGMENT_BYTES)),
        durability,
        ..TopicCreateOptions::default()
    };
    client.create_topic(&id(0), name, &options).await?;
    Ok(())
}

/// Sends `sends` batches of 1 to 5 messages to topic `topic` from message number `first`;
/// returns the next message number.
async fn send(client: &IggyClient, topic: u32, first: u64, sends: u64) -> anyhow::Result<u64> {
    let mut n = first;
    for send in 0..sends {
        let count = 1 + send % 5;
        let mut batch: Vec<IggyMessage> = (n..n + count)
            .map(|m| IggyMessage::builder().id(u128::from(m) + 1).payload(payload(topic, m).into()).build())
            .collect::<Result<_, _>>()?;
        client.send_messages(&id(0), &id(topic), &Partitioning::partition_id(0), &mut batch).await?;
        n += count;
    }
    Ok(n)
}

/// Every message of topic `topic` is there once, in order, byte-exact, `count` of them.
async fn assert_stored(client: &IggyClient, topic: u32, count: u64) -> anyhow::Result<()> {
    let stored = poll_all(client, &id(0), &id(topic), 0).await?;
    assert_eq!(stored.len() as u64, count, "topic {topic}: every acknowledged message, once");
    for (n, message) in stored.iter().enumerate() {
        assert_eq!(message.header.offset, n as u64, "topic {topic}: offsets without gaps");
        assert_eq!(message.header.id, n as u128 + 1, "topic {topic}: message {n}");
        assert_eq!(message.payload.as_ref(), payload(topic, n as u64).as_slice(), "topic {topic}: message {n}");
    }
    Ok(())
}

fn logs_of(data: &Path, topic: u32) -> Vec<PathBuf> {
    let dir = data.join(format!("streams/0/topics/{topic}/partitions/0"));
    let mut logs: Vec<PathBuf> =
        rill_tests::files_under(&dir).into_iter().filter(|p| p.extension().is_some_and(|e| e == "log")).collect();
    logs.sort();
    logs
}

/// Bytes of the file held in the page cache.
fn cached_bytes(path: &Path) -> u64 {
    let out = std::process::Command::new("fincore")
        .args(["--bytes", "--noheadings", "--output", "RES"])
        .arg(path)
        .output()
        .expect("util-linux fincore runs");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or_else(|_| panic!("fincore said {out:?}"))
}

fn on_tmpfs(path: &Path) -> bool {
    nix::sys::statfs::statfs(path).is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
}

/// Where each batch ends, read from the segment's index: the log must be exactly that long.
fn indexed_end(log: &Path) -> u64 {
    let index = std::fs::read(log.with_extension("index")).expect("index file");
    index
        .chunks_exact(24)
        .map(|e| {
            u32::from_le_bytes(e[4..8].try_into().unwrap()) as u64
                + u32::from_le_bytes(e[20..24].try_into().unwrap()) as u64
        })
        .max()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persisted_logs_bypass_the_page_cache_and_end_at_their_last_batch() -> anyhow::Result<()> {
    // The scrubber would read sealed segments (through the cache) in the background.
    let mut server = TestServer::start_with_env(&[
        ("IGGY_SYSTEM_PARTITION_DIRECT_IO", "persisted"),
        ("IGGY_DATA_MAINTENANCE_SCRUBBER_ENABLED", "false"),
    ])?;
    let client = connect_root(&server.tcp_address()).await?;
    client.create_stream("s").await?;
    create_topic(&client, "persisted", Durability::Persisted).await?;
    create_topic(&client, "buffered", Durability::Replicated).await?;
    let persisted = send(&client, 0, 0, 300).await?;
    let buffered = send(&client, 1, 0, 300).await?;
    client.flush_unsaved_buffer(&id(0), &id(1), 0, true).await?;

    let data = server.data_dir();
    let (direct_logs, buffered_logs) = (logs_of(&data, 0), logs_of(&data, 1));
    assert!(direct_logs.len() >= 3, "segments rolled: {direct_logs:?}");
    for sealed in &direct_logs[..direct_logs.len() - 1] {
        let len = std::fs::metadata(sealed)?.len();
        assert_eq!(len, indexed_end(sealed), "{}: a sealed log ends at its last batch", sealed.display());
    }
    if on_tmpfs(&data) {
        eprintln!("the data directory is a tmpfs, where every page is cache: residency not checked");
    } else {
        // Nothing was polled yet. A sealed direct log may hold the one block its seal's
        // truncation touched; a buffered one sits in the cache whole.
        for log in &direct_logs {
            assert!(cached_bytes(log) <= 4096, "{}: {} bytes cached", log.display(), cached_bytes(log));
        }
        let (cached, total): (u64, u64) = buffered_logs
            .iter()
            .map(|l| (cached_bytes(l), std::fs::metadata(l).unwrap().len()))
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        assert!(cached * 10 >= total * 9, "the buffered topic's logs are cached ({cached} of {total} bytes)");
    }
    assert_stored(&client, 0, persisted).await?;
    assert_stored(&client, 1, buffered).await?;
    drop(client);

    // A graceful stop cuts the active log's padding: nothing to repair at the next start.
    server.stop_graceful()?;
    for log in logs_of(&data, 0) {
        assert_eq!(std::fs::metadata(&log)?.len(), indexed_end(&log), "{}", log.display());
    }
    server.restart()?;
    assert!(!server.logs_of_last_launch().contains("segment repaired"), "{}", server.logs_of_last_launch());
    let client = connect_root(&server.tcp_address()).await?;
    assert_stored(&client, 0, persisted).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill9_keeps_every_acknowledged_direct_write_and_later_sends_follow_it() -> anyhow::Result<()> {
    let mut server = TestServer::start_with_env(&[("IGGY_SYSTEM_PARTITION_DIRECT_IO", "all")])?;
    let client = connect_root(&server.tcp_address()).await?;
    client.create_stream("s").await?;
    create_topic(&client, "persisted", Durability::Persisted).await?;
    let sent = send(&client, 0, 0, 150).await?;
    drop(client);
    server.kill9()?;
    // The active log may run on with up to a block of zeros: recovery cuts it.
    server.restart()?;
    let client = connect_root(&server.tcp_address()).await?;
    assert_stored(&client, 0, sent).await?;
    let more = send(&client, 0, sent, 150).await?;
    assert_stored(&client, 0, more).await?;
    drop(client);
    server.kill9()?;
    server.restart()?;
    let client = connect_root(&server.tcp_address()).await?;
    assert_stored(&client, 0, more).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_io_off_writes_persisted_topics_through_the_page_cache() -> anyhow::Result<()> {
    let server = TestServer::start_with_env(&[
        ("IGGY_SYSTEM_PARTITION_DIRECT_IO", "off"),
        ("IGGY_DATA_MAINTENANCE_SCRUBBER_ENABLED", "false"),
    ])?;
    let client = connect_root(&server.tcp_address()).await?;
    client.create_stream("s").await?;
    create_topic(&client, "persisted", Durability::Persisted).await?;
    let sent = send(&client, 0, 0, 100).await?;
    let data = server.data_dir();
    if !on_tmpfs(&data) {
        let log = &logs_of(&data, 0)[0];
        let len = std::fs::metadata(log)?.len();
        assert!(cached_bytes(log) * 10 >= len * 9, "{} of {len} bytes cached", cached_bytes(log));
    }
    assert_stored(&client, 0, sent).await?;
    Ok(())
}
