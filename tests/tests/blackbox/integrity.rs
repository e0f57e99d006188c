//! Integrity of stored data through the official client: bytes flipped in a stopped
//! server's segments are never served (each damaged batch answers an error, every intact
//! batch is served, the server stays up), the scrubber finds a flipped byte with no poll at
//! all, and missing, truncated or garbage index files are rebuilt so polls by offset and by
//! timestamp answer as before.

use std::path::{Path, PathBuf};
use std::time::Duration;

use iggy::prelude::*;
use rill_tests::{TestServer, connect_root, error_code, eventually, free_port, id, poll_all};

/// InvalidMessageChecksum: what a poll starting at a damaged batch answers.
const DAMAGED_BATCH: u32 = 4027;
const MESSAGES_PER_SEND: u64 = 100;
const PARTITION_DIR: &str = "streams/0/topics/0/partitions/0";

fn payload(offset: u64) -> Vec<u8> {
    let mut bytes = format!("message {offset} ").into_bytes();
    bytes.resize(1000, b'a' + (offset % 26) as u8);
    bytes
}

/// A persisted topic with 1 MiB segments holding `sends` batches of 100 messages (ids are
/// offsets plus one), and the server's data directory.
async fn filled(server: &TestServer, sends: u64) -> anyhow::Result<IggyClient> {
    let client = connect_root(&server.tcp_address()).await?;
    client.create_stream("s").await?;
    let options = TopicCreateOptions {
        partitions_count: Some(1),
        segment_size: Some(IggyByteSize::from(1u64 << 20)),
        durability: Durability::Persisted,
        ..TopicCreateOptions::default()
    };
    client.create_topic(&id(0), "t", &options).await?;
    for send in 0..sends {
        let first = send * MESSAGES_PER_SEND;
        let mut batch: Vec<IggyMessage> = (first..first + MESSAGES_PER_SEND)
            .map(|o| IggyMessage::builder().id(u128::from(o + 1)).payload(payload(o).into()).build().expect("message"))
            .collect();
        client.send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut batch).await?;
    }
    Ok(client)
}

/// One batch as the `.index` file names it: its segment file, byte range and first offset.
#[derive(Debug, Clone)]
struct StoredBatch {
    log: PathBuf,
    position: u64,
    length: u64,
    first_offset: u64,
}

/// Every batch of the partition, read from its index files (24 bytes each: relative offset
/// u32, position u32, timestamp u64, count u32, length u32).
fn stored_batches(data: &Path) -> Vec<StoredBatch> {
    let dir = data.join(PARTITION_DIR);
    let mut indexes: Vec<PathBuf> =
        rill_tests::files_under(&dir).into_iter().filter(|p| p.extension().is_some_and(|e| e == "index")).collect();
    indexes.sort();
    let mut batches = Vec::new();
    for index in indexes {
        let start: u64 = index.file_stem().and_then(|s| s.to_str()).and_then(|s| s.parse().ok()).expect("start");
        let bytes = std::fs::read(&index).expect("index");
        for entry in bytes.chunks_exact(24) {
            let u32_at = |at: usize| u32::from_le_bytes(entry[at..at + 4].try_into().unwrap()) as u64;
            batches.push(StoredBatch {
                log: index.with_extension("log"),
                position: u32_at(4),
                length: u32_at(20),
                first_offset: start + u32_at(0),
            });
        }
    }
    batches
}

/// splitmix64, so a failing seed replays.
fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Flips one byte at each of `flips` seeded positions across the partition's logs; returns
/// the first offsets of the batches hit.
fn flip_bytes(batches: &[StoredBatch], seed: u64, flips: usize) -> Vec<u64> {
    let total: u64 = batches.iter().map(|b| b.length).sum();
    let mut state = seed;
    let mut hit = Vec::new();
    for _ in 0..flips {
        let mut at = next_random(&mut state) % total;
        let mut batches_left = batches.iter();
        let batch = loop {
            let batch = batches_left.next().expect("the position lies in some batch");
            if at < batch.length {
                break batch;
            }
            at -= batch.length;
        };
        let mut bytes = std::fs::read(&batch.log).expect("log");
        bytes[(batch.position + at) as usize] ^= 1 << (next_random(&mut state) % 8);
        std::fs::write(&batch.log, bytes).expect("write log");
        hit.push(batch.first_offset);
    }
    hit.sort_unstable();
    hit.dedup();
    hit
}

fn log_lines(server: &TestServer, needle: &str) -> usize {
    let log = std::fs::read_to_string(server.data_dir().join("logs/rill.log")).unwrap_or_default();
    log.lines().filter(|line| line.contains(needle)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipped_bytes_are_never_served_and_every_intact_batch_is() -> anyhow::Result<()> {
    for seed in [0x5eed_0001u64, 0x5eed_0002] {
        let mut server = TestServer::start_with_env(&[("IGGY_DATA_MAINTENANCE_SCRUBBER_ENABLED", "false")])?;
        let sends = 40;
        drop(filled(&server, sends).await?);
        server.stop_graceful()?;
        let batches = stored_batches(&server.data_dir());
        assert_eq!(batches.len() as u64, sends, "one batch per send");
        assert!(batches.iter().map(|b| &b.log).collect::<std::collections::BTreeSet<_>>().len() >= 4);
        let damaged = flip_bytes(&batches, seed, 6);
        server.restart()?;
        let client = connect_root(&server.tcp_address()).await?;
        let consumer = Consumer::new(id(1));
        for round in 0..2 {
            for batch in &batches {
                let first = batch.first_offset;
                let strategy = PollingStrategy::offset(first);
                let polled = client
                    .poll_messages(&id(0), &id(0), Some(0), &consumer, &strategy, MESSAGES_PER_SEND as u32, false)
                    .await;
                if damaged.contains(&first) {
                    assert_eq!(error_code(polled, "a damaged batch"), DAMAGED_BATCH, "seed {seed:#x}, offset {first}");
                    continue;
                }
                let messages = polled?.messages;
                assert_eq!(messages.len() as u64, MESSAGES_PER_SEND, "seed {seed:#x} round {round}: batch at {first}");
                for (offset, message) in (first..).zip(&messages) {
                    assert_eq!(message.header.offset, offset);
                    assert_eq!(message.header.id, u128::from(offset + 1));
                    assert_eq!(message.payload.as_ref(), payload(offset).as_slice(), "seed {seed:#x}: offset {offset}");
                }
            }
        }
        // A poll across damage stops before it: what comes back is intact.
        let across =
            client.poll_messages(&id(0), &id(0), Some(0), &consumer, &PollingStrategy::offset(0), 100_000, false).await;
        match damaged.first() {
            Some(0) => assert_eq!(error_code(across, "damage at 0"), DAMAGED_BATCH),
            Some(&first_damaged) => assert_eq!(across?.messages.len() as u64, first_damaged, "seed {seed:#x}"),
            None => unreachable!("six flips hit at least one batch"),
        }
        assert_eq!(
            log_lines(&server, "stored batch fails its checksum"),
            damaged.len(),
            "seed {seed:#x}: each damaged batch logged once"
        );
        client.ping().await?;
        let mut more = vec![IggyMessage::builder().id(99_999).payload(b"after".to_vec().into()).build()?];
        client.send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut more).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scrubber_finds_a_flipped_byte_without_any_poll() -> anyhow::Result<()> {
    let http = format!("127.0.0.1:{}", free_port());
    let env = [
        ("IGGY_HTTP_ENABLED", "true"),
        ("IGGY_HTTP_ADDRESS", http.as_str()),
        ("IGGY_DATA_MAINTENANCE_SCRUBBER_RATE", "64 MiB"),
    ];
    let mut server = TestServer::start_with_env(&env)?;
    drop(filled(&server, 30).await?);
    server.stop_graceful()?;
    let batches = stored_batches(&server.data_dir());
    let sealed = batches.iter().find(|b| b.first_offset == 500).expect("a batch of the first segment");
    let mut bytes = std::fs::read(&sealed.log)?;
    bytes[(sealed.position + sealed.length / 2) as usize] ^= 0x10;
    std::fs::write(&sealed.log, bytes)?;
    server.restart()?;
    let client = connect_root(&server.tcp_address()).await?;
    let token = client.create_personal_access_token("scrub", IggyExpiry::NeverExpire).await?.token;
    let metrics = || rill_tests::http::get(&http, "/metrics", Some(&token)).map(|(_, text)| text);
    eventually(Duration::from_secs(20), "the scrubber reports the damaged batch", || async {
        let text = metrics()?;
        Ok(rill_tests::http::metric(&text, "rill_damaged_batches_total") == Some(1))
    })
    .await?;
    let text = metrics()?;
    assert!(rill_tests::http::metric(&text, "rill_scrub_bytes_total").unwrap_or(0) > 0);
    assert_eq!(rill_tests::http::metric(&text, "rill_damaged_reads_total"), Some(0), "found with no poll");
    // The counter goes up just before the line is written.
    eventually(Duration::from_secs(5), "the scrubber's report is logged", || async {
        Ok(log_lines(&server, "found_by=\"scrubber\"") > 0)
    })
    .await?;
    assert_eq!(log_lines(&server, "found_by=\"scrubber\""), 1, "logged once, naming who found it");
    Ok(())
}

/// The offset a poll by timestamp starts at.
async fn by_time(client: &IggyClient, timestamp: u64) -> anyhow::Result<Option<u64>> {
    let strategy = PollingStrategy::timestamp(IggyTimestamp::from(timestamp));
    let polled = client.poll_messages(&id(0), &id(0), Some(0), &Consumer::new(id(1)), &strategy, 1, false).await?;
    Ok(polled.messages.first().map(|m| m.header.offset))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_truncated_and_garbage_indexes_are_rebuilt() -> anyhow::Result<()> {
    let mut server = TestServer::start()?;
    let client = filled(&server, 30).await?;
    let everything = poll_all(&client, &id(0), &id(0), 0).await?;
    assert_eq!(everything.len(), 3000);
    let stamps: Vec<u64> = (0..30).map(|b| everything[b * 100].header.timestamp).collect();
    let mut before = Vec::new();
    for stamp in &stamps {
        before.push((by_time(&client, *stamp).await?, by_time(&client, *stamp + 1).await?));
    }
    drop(client);
    server.stop_graceful()?;
    let dir = server.data_dir().join(PARTITION_DIR);
    let mut indexes: Vec<PathBuf> =
        rill_tests::files_under(&dir).into_iter().filter(|p| p.extension().is_some_and(|e| e == "index")).collect();
    indexes.sort();
    assert!(indexes.len() >= 3, "three segments or more: {indexes:?}");
    let lengths: Vec<u64> = indexes.iter().map(|p| std::fs::metadata(p).map_or(0, |m| m.len())).collect();
    std::fs::remove_file(&indexes[0])?;
    std::fs::OpenOptions::new().write(true).open(&indexes[1])?.set_len(24 * 2 + 5)?;
    let garbage: Vec<u8> = (0..lengths[2]).map(|i| (i * 131 % 251) as u8).collect();
    std::fs::write(&indexes[2], garbage)?;
    server.restart()?;
    let client = connect_root(&server.tcp_address()).await?;
    let again = poll_all(&client, &id(0), &id(0), 0).await?;
    assert_eq!(again.len(), 3000);
    for (offset, message) in (0u64..).zip(&again) {
        assert_eq!((message.header.offset, message.header.id), (offset, u128::from(offset + 1)));
        assert_eq!(message.payload.as_ref(), payload(offset).as_slice());
        assert_eq!(message.header.timestamp, everything[offset as usize].header.timestamp);
    }
    for (stamp, expected) in stamps.iter().zip(&before) {
        let after = (by_time(&client, *stamp).await?, by_time(&client, *stamp + 1).await?);
        assert_eq!(after, *expected, "by timestamp {stamp}");
    }
    for (b, stamp) in stamps.iter().enumerate() {
        assert_eq!(by_time(&client, *stamp).await?, Some(b as u64 * 100), "the batch stamped {stamp}");
    }
    let rebuilt: Vec<u64> = indexes.iter().map(|p| std::fs::metadata(p).map_or(0, |m| m.len())).collect();
    assert_eq!(rebuilt, lengths, "every index is whole again");
    Ok(())
}
