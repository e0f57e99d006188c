//! Partitions replicated through partition groups (`[cluster] replicate_partitions`): three
//! nodes of two shards each, so group 0 starts with its primary on node 0 (which also leads
//! the metadata, so the stock client talks to it) and group 1 on node 1, whose sends node 0
//! forwards. Every acknowledged message is readable, at one offset, and after kill -9 of
//! group 1's primary the sends go on through the next primary without an offset assigned
//! twice, and stored consumer offsets survive it; the killed node restarts and catches up,
//! and in the end every node's partition files (segments, indexes, offsets) are
//! byte-identical.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use iggy::prelude::*;
use rill_tests::raw::{self, Request};
use rill_tests::{connect_root, create_stream_and_topic, id, message, poll_all};

use crate::cluster::{Cluster, create_through_any, eventually, start_cluster_with, streams_on};

pub(crate) const TIMEOUT: Duration = Duration::from_secs(40);
pub(crate) const PARTITIONS: u32 = 4;
pub(crate) const SHARDS: u16 = 2;

fn start() -> anyhow::Result<Cluster> {
    start_with(&[])
}

/// Three replicating nodes with `extra` in every node's environment.
pub(crate) fn start_with(extra: &[(&'static str, &str)]) -> anyhow::Result<Cluster> {
    start_cluster_with(&|_| {
        let mut env = vec![
            ("IGGY_CLUSTER_REPLICATE_PARTITIONS", "true".to_owned()),
            ("IGGY_SYSTEM_SHARDING_CPU_ALLOCATION", SHARDS.to_string()),
        ];
        env.extend(extra.iter().map(|(key, value)| (*key, value.to_string())));
        env
    })
}

/// Sends one batch of `count` messages to `partition`, ids `first..`; true when acknowledged.
pub(crate) async fn send(client: &IggyClient, topic: (u32, u32), partition: u32, first: u128, count: u32) -> bool {
    let mut batch: Vec<IggyMessage> = (0..u128::from(count))
        .map(|i| message(first + i, format!("p{partition}-m{}", first + i).into_bytes(), None))
        .collect();
    client.send_messages(&id(topic.0), &id(topic.1), &Partitioning::partition_id(partition), &mut batch).await.is_ok()
}

/// One send to every partition, each retried until acknowledged (a send that timed out may
/// still have committed: its ids may then show up twice); records the acknowledged ids.
pub(crate) async fn send_round(
    client: &IggyClient,
    topic: (u32, u32),
    what: &str,
    next_id: &mut u128,
    acknowledged: &mut BTreeMap<u32, Vec<u128>>,
) -> anyhow::Result<()> {
    for partition in 0..PARTITIONS {
        let first = *next_id;
        *next_id += 10;
        eventually(TIMEOUT, &format!("{what}, partition {partition}"), || async {
            anyhow::ensure!(send(client, topic, partition, first, 10).await, "refused");
            Ok(())
        })
        .await?;
        acknowledged.entry(partition).or_default().extend(first..first + 10);
    }
    Ok(())
}

/// Every partition holds each acknowledged id, offsets run 0.. without a gap, and every
/// payload is the one sent with its id.
pub(crate) async fn check_partitions(
    client: &IggyClient,
    topic: (u32, u32),
    acknowledged: &BTreeMap<u32, Vec<u128>>,
) -> anyhow::Result<()> {
    for (partition, ids) in acknowledged {
        let got = poll_all(client, &id(topic.0), &id(topic.1), *partition).await?;
        for (index, polled) in got.iter().enumerate() {
            anyhow::ensure!(
                polled.header.offset == index as u64,
                "partition {partition}: offset {} at {index}",
                polled.header.offset
            );
            let expected = format!("p{partition}-m{}", polled.header.id);
            anyhow::ensure!(
                polled.payload.as_ref() == expected.as_bytes(),
                "partition {partition}: payload of {}",
                polled.header.id
            );
        }
        let present: std::collections::BTreeSet<u128> = got.iter().map(|m| m.header.id).collect();
        let missing: Vec<&u128> = ids.iter().filter(|id| !present.contains(id)).collect();
        anyhow::ensure!(missing.is_empty(), "partition {partition} lacks acknowledged ids {missing:?}");
    }
    Ok(())
}

/// The messages a node's own view counts in the stream `name` (GET_STREAMS, raw frames).
pub(crate) fn messages_on(address: &str, name: &str) -> anyhow::Result<u64> {
    let body = streams_on(address)?;
    let mut at = 0;
    while at + 33 <= body.len() {
        let len = body[at + 32] as usize;
        if &body[at + 33..at + 33 + len] == name.as_bytes() {
            return Ok(rill_tests::raw::u64_at(&body, at + 24));
        }
        at += 33 + len + 4 + rill_tests::raw::u32_at(&body, at + 33 + len) as usize;
    }
    anyhow::bail!("{address} has no stream {name}")
}

/// One message as a node holds it: offset, id, payload.
pub(crate) type Held = (u64, u128, Vec<u8>);

/// Every message of one partition as the node at `address` holds it, read with raw
/// POLL_MESSAGES frames (a plain consumer, by offset, no auto-commit), so no client routing
/// hides which node's copy answered.
pub(crate) fn poll_on(address: &str, topic: (u32, u32), partition: u32) -> anyhow::Result<Vec<Held>> {
    let mut stream = raw::connect(address)?;
    let client = 0xc2u128 << 120 | rill_tests::free_port() as u128;
    let session = raw::try_login(&mut stream, client).map_err(anyhow::Error::msg)?;
    let (mut held, mut next, mut request) = (Vec::new(), 0u64, 1u64);
    loop {
        let body = raw::poll_body(topic.0, topic.1, partition, next, 1000);
        raw::send(
            &mut stream,
            &Request::non_replicated(client, request, session, raw::CODE_POLL_MESSAGES).frame(&body),
        );
        request += 1;
        let reply = raw::read_frame(&mut stream).expect_frame("poll reply");
        anyhow::ensure!(reply.status() == 0, "{address}: poll status {}", reply.status());
        let before = held.len();
        read_batches(&reply.body()[16..], &mut held)?;
        match held.last() {
            Some((offset, _, _)) if held.len() > before => next = offset + 1,
            _ => return Ok(held),
        }
    }
}

/// The messages of the batch records in a poll reply after its 16-byte prefix.
fn read_batches(mut records: &[u8], held: &mut Vec<Held>) -> anyhow::Result<()> {
    while records.len() >= 256 {
        let (base_offset, length, count) =
            (raw::u64_at(records, 8), raw::u64_at(records, 32) as usize, raw::u32_at(records, 48));
        anyhow::ensure!((256..=records.len()).contains(&length), "a batch of {length} bytes in {}", records.len());
        let mut frames = &records[256..length];
        for _ in 0..count {
            anyhow::ensure!(frames.len() >= 48, "a message header cut short");
            let (headers, payload) = (raw::u32_at(frames, 32) as usize, raw::u32_at(frames, 36) as usize);
            let offset = base_offset + u64::from(raw::u32_at(frames, 24));
            held.push((offset, raw::u128_at(frames, 8), frames[48..48 + payload].to_vec()));
            frames = &frames[48 + payload + headers..];
        }
        records = &records[length..];
    }
    Ok(())
}

/// A copy of a partition in a few words: how many messages, and (offset, id) of each.
fn summary(copy: &[Held]) -> String {
    let ids: Vec<(u64, u128)> = copy.iter().map(|(offset, id, _)| (*offset, *id)).collect();
    format!("{} messages {ids:?}", copy.len())
}

/// Waits until every node's own copy of each of `partitions` equals node 0's and passes
/// `check`: the nodes that were not in a commit's quorum have applied it too.
pub(crate) async fn every_node_agrees(
    cluster: &Cluster,
    topic: (u32, u32),
    partitions: &[u32],
    check: impl Fn(u32, &[Held]) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    eventually(TIMEOUT, "every node holds the same copy", || async {
        for &partition in partitions {
            let copies: Vec<Vec<Held>> =
                cluster.addresses.iter().map(|a| poll_on(a, topic, partition)).collect::<anyhow::Result<_>>()?;
            for (node, copy) in copies.iter().enumerate() {
                anyhow::ensure!(
                    copy == &copies[0],
                    "partition {partition}: node {node}'s copy differs from node 0's: {} against {}",
                    summary(copy),
                    summary(&copies[0])
                );
            }
            check(partition, &copies[0])?;
        }
        Ok(())
    })
    .await
}

/// Waits until every node serves the same messages in every partition of `acknowledged`,
/// each acknowledged id among them, offsets from 0 without a gap, each payload the one
/// sent with its id (`send`'s).
pub(crate) async fn every_node_serves(
    cluster: &Cluster,
    topic: (u32, u32),
    acknowledged: &BTreeMap<u32, Vec<u128>>,
) -> anyhow::Result<()> {
    let partitions: Vec<u32> = acknowledged.keys().copied().collect();
    every_node_agrees(cluster, topic, &partitions, |partition, held| {
        for (index, (offset, id, payload)) in held.iter().enumerate() {
            anyhow::ensure!(*offset == index as u64, "partition {partition}: offset {offset} at {index}");
            let expected = format!("p{partition}-m{id}");
            anyhow::ensure!(payload == expected.as_bytes(), "partition {partition}: payload of {id}");
        }
        let present: std::collections::BTreeSet<u128> = held.iter().map(|(_, id, _)| *id).collect();
        let missing: Vec<&u128> = acknowledged[&partition].iter().filter(|id| !present.contains(id)).collect();
        anyhow::ensure!(missing.is_empty(), "partition {partition} lacks acknowledged ids {missing:?}");
        Ok(())
    })
    .await
}

/// Every file of the partitions under a node's data directory (segments, indexes, stored
/// consumer offsets), by its path below it.
pub(crate) fn partition_files(data: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    rill_tests::files_under(&data.join("streams"))
        .into_iter()
        .map(|path| {
            (
                path.strip_prefix(data).expect("below the data directory").to_path_buf(),
                std::fs::read(&path).expect("readable"),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_partitions_survive_a_primary_kill_and_match_byte_for_byte() -> anyhow::Result<()> {
    let mut cluster = start()?;
    let client = client_once_committing(&cluster).await?;
    let topic = create_stream_and_topic(&client, "replicated", "events", PARTITIONS).await?;

    let mut acknowledged: BTreeMap<u32, Vec<u128>> = BTreeMap::new();
    let mut next_id = 1u128;
    for round in 0..5 {
        send_round(&client, topic, &format!("send round {round}"), &mut next_id, &mut acknowledged).await?;
    }
    eventually(TIMEOUT, "node 0 holds every acknowledged message", || check_partitions(&client, topic, &acknowledged))
        .await?;
    // Both groups took sends: each journal holds prepares (the partitions spread over both
    // shards), so group 1's were forwarded by node 0 to node 1.
    for group in 0..SHARDS {
        let journal = cluster.nodes[0].data_dir().join("groups").join(group.to_string()).join("journal.wal");
        let len = std::fs::metadata(&journal).map(|m| m.len()).unwrap_or(0);
        assert!(len > 0, "group {group}'s journal {} is empty", journal.display());
    }

    // Consumer offsets go through the groups too.
    let reader = Consumer::new(id(7));
    for partition in 0..PARTITIONS {
        let offset = u64::from(10 + partition);
        client.store_consumer_offset(&reader, &id(topic.0), &id(topic.1), Some(partition), offset).await?;
    }

    // Group 1's primary goes; node 0 keeps the metadata and forwards to the next primary.
    cluster.nodes[1].kill9()?;
    for round in 0..2 {
        let what = format!("send round {round} after the kill");
        send_round(&client, topic, &what, &mut next_id, &mut acknowledged).await?;
    }
    eventually(TIMEOUT, "the survivors serve every acknowledged message", || {
        check_partitions(&client, topic, &acknowledged)
    })
    .await?;

    for partition in 0..PARTITIONS {
        let stored = client.get_consumer_offset(&reader, &id(topic.0), &id(topic.1), Some(partition)).await?;
        let stored = stored.map(|info| info.stored_offset);
        assert_eq!(stored, Some(u64::from(10 + partition)), "partition {partition}'s offset after the failover");
        let offset = u64::from(20 + partition);
        let what = format!("an offset store after the failover, partition {partition}");
        eventually(TIMEOUT, &what, || async {
            Ok(client.store_consumer_offset(&reader, &id(topic.0), &id(topic.1), Some(partition), offset).await?)
        })
        .await?;
    }

    cluster.nodes[1].restart()?;
    send_round(&client, topic, "send once node 1 is back", &mut next_id, &mut acknowledged).await?;
    // A forwarded send is acknowledged once it commits; node 0 applies it within a heartbeat.
    eventually(TIMEOUT, "every acknowledged message, node 1 back", || check_partitions(&client, topic, &acknowledged))
        .await?;
    // An auto-commit poll's store goes through the group as well.
    let auto = Consumer::new(id(8));
    let polled =
        client.poll_messages(&id(topic.0), &id(topic.1), Some(0), &auto, &PollingStrategy::offset(0), 5, true).await?;
    assert_eq!(polled.messages.len(), 5);
    let stored = client.get_consumer_offset(&auto, &id(topic.0), &id(topic.1), Some(0)).await?;
    assert_eq!(stored.map(|info| info.stored_offset), Some(4), "the auto-commit stored the last offset polled");
    // A last round: a node that applied it applied every op before it in its group,
    // the offset stores included.
    send_round(&client, topic, "a last round", &mut next_id, &mut acknowledged).await?;
    // Node 1 catches up through repair (its own view, read with raw frames); then every
    // node stops gracefully (flushing) and the partition logs are compared whole.
    every_node_serves(&cluster, topic, &acknowledged).await?;
    drop(client);
    let files = stop_and_compare(&mut cluster)?;
    let segments = files.keys().filter(|path| path.extension().is_some_and(|e| e == "log")).count();
    assert_eq!(segments, PARTITIONS as usize, "one segment per partition: {:?}", files.keys());
    let offsets = files.keys().filter(|path| path.components().any(|c| c.as_os_str() == "consumers")).count();
    assert_eq!(offsets, PARTITIONS as usize + 1, "an offset per partition and the auto-commit: {:?}", files.keys());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_and_a_recreated_topic_start_every_replica_again_at_offset_zero() -> anyhow::Result<()> {
    let mut cluster = start()?;
    let client = client_once_committing(&cluster).await?;
    let topic = create_stream_and_topic(&client, "again", "events", PARTITIONS).await?;
    let mut next_id = 1u128;
    let mut before: BTreeMap<u32, Vec<u128>> = BTreeMap::new();
    for round in 0..2 {
        send_round(&client, topic, &format!("round {round}"), &mut next_id, &mut before).await?;
    }
    let reader = Consumer::new(id(3));
    client.store_consumer_offset(&reader, &id(topic.0), &id(topic.1), Some(0), 5).await?;

    // A purge empties every replica, offsets included, and the offsets start again at 0.
    client.purge_topic(&id(topic.0), &id(topic.1)).await?;
    every_node_holds(&cluster, "again", 0).await?;
    let stored = client.get_consumer_offset(&reader, &id(topic.0), &id(topic.1), Some(0)).await?;
    assert_eq!(stored.map(|info| info.stored_offset), None, "the purge removed the stored offset");
    let mut after_purge: BTreeMap<u32, Vec<u128>> = BTreeMap::new();
    send_round(&client, topic, "a round after the purge", &mut next_id, &mut after_purge).await?;
    eventually(TIMEOUT, "offsets from 0 after the purge", || check_partitions(&client, topic, &after_purge)).await?;

    // A topic deleted and created again gets the same ids: its partitions start at 0 too,
    // not where the deleted one's group state ended.
    client.delete_topic(&id(topic.0), &id(topic.1)).await?;
    let created = client.create_topic(&id(topic.0), "events", &rill_tests::topic_options(PARTITIONS)).await?;
    assert_eq!(created.id, topic.1, "the new topic reuses the deleted one's id");
    let mut recreated: BTreeMap<u32, Vec<u128>> = BTreeMap::new();
    send_round(&client, topic, "a round to the new topic", &mut next_id, &mut recreated).await?;
    eventually(TIMEOUT, "offsets from 0 in the new topic", || check_partitions(&client, topic, &recreated)).await?;
    every_node_serves(&cluster, topic, &recreated).await?;
    // A restart replays the resets from the group's journal: they empty nothing again.
    cluster.nodes[1].restart()?;
    eventually(TIMEOUT, "node 1 serves again", || async { messages_on(&cluster.addresses[1], "again").map(drop) })
        .await?;
    every_node_serves(&cluster, topic, &recreated).await?;
    drop(client);
    stop_and_compare(&mut cluster)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_batch_on_one_replica_is_repaired_with_a_peers_copy() -> anyhow::Result<()> {
    let mut cluster = start()?;
    let client = client_once_committing(&cluster).await?;
    // About 1.5 MiB: the first segment is sealed, so the scrubber reads it.
    let sends = 13;
    let (stream, topic) = fill_segments(&client, "damage", sends).await?;
    every_node_holds(&cluster, "damage", 10 * sends as u64).await?;

    // Node 2 stops; one byte in the middle of its sealed segment flips; it starts again.
    cluster.nodes[2].stop_graceful()?;
    let sealed = cluster.nodes[2]
        .data_dir()
        .join(format!("streams/{stream}/topics/{topic}/partitions/0/00000000000000000000.log"));
    let mut bytes = std::fs::read(&sealed)?;
    anyhow::ensure!(bytes.len() as u64 >= SEGMENT_BYTES / 2, "{} holds {} bytes", sealed.display(), bytes.len());
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x10;
    std::fs::write(&sealed, bytes)?;
    cluster.nodes[2].restart()?;
    eventually(TIMEOUT, "node 2's scrubber finds the damage and a peer's copy repairs it", || async {
        let logs = std::fs::read_to_string(cluster.nodes[2].data_dir().join("logs/rill.log")).unwrap_or_default();
        let last: Vec<&str> = logs.lines().rev().take(10).collect();
        anyhow::ensure!(
            logs.contains("repaired a damaged batch with a peer's copy"),
            "not yet; its last lines {last:?}"
        );
        Ok(())
    })
    .await?;
    drop(client);
    let files = stop_and_compare(&mut cluster)?;
    let segments = files.keys().filter(|path| path.extension().is_some_and(|e| e == "log")).count();
    assert!(segments >= 2, "a sealed segment and the active one: {:?}", files.keys());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_segments_go_on_every_replica_from_a_request_to_any_node() -> anyhow::Result<()> {
    let mut cluster = start()?;
    let client = client_once_committing(&cluster).await?;
    // About 2.5 MiB: two sealed segments and the active one.
    let sends = 21;
    let (stream, topic) = fill_segments(&client, "trim", sends).await?;
    every_node_holds(&cluster, "trim", 10 * sends as u64).await?;

    // The oldest segment goes, asked of node 2: every replica deletes the same one.
    let elsewhere = connect_root(&cluster.addresses[2]).await?;
    elsewhere.delete_segments(&id(stream), &id(topic), 0, 1).await?;
    let first = format!("streams/{stream}/topics/{topic}/partitions/0/00000000000000000000.log");
    eventually(TIMEOUT, "every node deleted its oldest segment", || async {
        let left: Vec<usize> =
            (0..cluster.nodes.len()).filter(|&n| cluster.nodes[n].data_dir().join(&first).exists()).collect();
        anyhow::ensure!(left.is_empty(), "nodes {left:?} still hold {first}");
        let counts: Vec<u64> =
            cluster.addresses.iter().map(|a| messages_on(a, "trim")).collect::<anyhow::Result<_>>()?;
        anyhow::ensure!(
            counts.iter().all(|&c| c == counts[0]) && counts[0] < 10 * sends as u64 && counts[0] > 0,
            "messages per node {counts:?}"
        );
        Ok(())
    })
    .await?;
    // Offsets go on where they were: the next send lands after the deleted ones.
    let mut batch = vec![message(10_000, b"after".to_vec(), None)];
    client.send_messages(&id(stream), &id(topic), &Partitioning::partition_id(0), &mut batch).await?;
    let polled = poll_all(&client, &id(stream), &id(topic), 0).await?;
    let last = polled.last().map(|m| (m.header.offset, m.header.id));
    assert_eq!(last, Some((10 * sends as u64, 10_000)), "the send after the deletion");
    assert!(polled[0].header.offset > 0, "polls start past the deleted segment");
    every_node_agrees(&cluster, (stream, topic), &[0], |_, held| {
        anyhow::ensure!(
            held.last().map(|(_, id, _)| *id) == Some(10_000),
            "the send after the deletion is not here yet"
        );
        Ok(())
    })
    .await?;
    drop((client, elsewhere));
    stop_and_compare(&mut cluster)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_the_same_segments_on_every_replica() -> anyhow::Result<()> {
    let mut cluster = start_with(&[("IGGY_DATA_MAINTENANCE_MESSAGES_INTERVAL", "200 ms")])?;
    let client = client_once_committing(&cluster).await?;
    // A 2 MiB cap on 1 MiB segments: about 2.5 MiB of sends make the oldest segment go.
    let sends = 21;
    let cap = MaxTopicSize::Custom(IggyByteSize::from(2 * SEGMENT_BYTES));
    let (stream, topic) = fill_capped_segments(&client, "capped", sends, cap).await?;
    let first = format!("streams/{stream}/topics/{topic}/partitions/0/00000000000000000000.log");
    eventually(TIMEOUT, "every node deleted its oldest segment", || async {
        let left: Vec<usize> =
            (0..cluster.nodes.len()).filter(|&n| cluster.nodes[n].data_dir().join(&first).exists()).collect();
        anyhow::ensure!(left.is_empty(), "nodes {left:?} still hold {first}");
        Ok(())
    })
    .await?;
    // One decision, the group primary's, applied by every replica: the same messages went.
    every_node_agrees(&cluster, (stream, topic), &[0], |_, held| {
        let (first, last) = (held.first().map(|m| m.0), held.last().map(|m| m.1));
        anyhow::ensure!(first > Some(0) && last == Some(sends * 10), "offsets {first:?}.., last id {last:?}");
        Ok(())
    })
    .await?;
    for node in &cluster.nodes {
        let logs = std::fs::read_to_string(node.data_dir().join("logs/rill.log")).unwrap_or_default();
        assert!(logs.contains("deleted the segments the partition group's committed deletion names"), "{logs}");
    }
    drop(client);
    stop_and_compare(&mut cluster)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_send_is_readable_on_the_forwarding_node_once_acknowledged() -> anyhow::Result<()> {
    let mut cluster = start()?;
    let client = client_once_committing(&cluster).await?;
    let topic = create_stream_and_topic(&client, "ryw", "events", PARTITIONS).await?;
    let reader = Consumer::new(id(5));
    let mut acknowledged: BTreeMap<u32, Vec<u128>> = BTreeMap::new();
    // Half the partitions are group 1's, whose primary is node 1: node 0 forwards their
    // sends and answers each only once its own copy holds the batch.
    for round in 0..25u32 {
        for partition in 0..PARTITIONS {
            let first = u128::from(round * PARTITIONS + partition) + 1;
            anyhow::ensure!(send(&client, topic, partition, first, 1).await, "send {first} refused");
            acknowledged.entry(partition).or_default().push(first);
            let polled = client
                .poll_messages(
                    &id(topic.0),
                    &id(topic.1),
                    Some(partition),
                    &reader,
                    &PollingStrategy::offset(u64::from(round)),
                    1,
                    false,
                )
                .await?;
            let got = polled.messages.first().map(|m| (m.header.offset, m.header.id));
            assert_eq!(got, Some((u64::from(round), first)), "partition {partition}, round {round}: poll right after");
        }
    }
    // The node outside each commit's quorum applies it a little later.
    every_node_serves(&cluster, topic, &acknowledged).await?;
    drop(client);
    stop_and_compare(&mut cluster)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_group_polls_through_the_routing_codes_across_a_group_primary_kill() -> anyhow::Result<()> {
    let mut cluster = start()?;
    let client = client_once_committing(&cluster).await?;
    let topic = create_stream_and_topic(&client, "routed", "events", PARTITIONS).await?;
    let (s, t) = (id(topic.0), id(topic.1));
    client.create_consumer_group(&s, &t, "workers").await?;
    client.join_consumer_group(&s, &t, &rill_tests::named("workers")).await?;
    let group = Consumer::group(rill_tests::named("workers"));
    // Three nodes in the cluster metadata: the SDK polls with auto-commit through 103, 14
    // and 104, and the group's offsets are stored through the partition groups.
    let poll_until = |expected: std::collections::BTreeSet<u128>, what: &'static str| {
        let (client, group, s, t) = (&client, &group, &s, &t);
        async move {
            let mut polled = std::collections::BTreeSet::new();
            for _ in 0..200 {
                let batch = client.poll_messages(s, t, None, group, &PollingStrategy::next(), 10, true).await?;
                for got in &batch.messages {
                    anyhow::ensure!(polled.insert(got.header.id), "{what}: message {} polled twice", got.header.id);
                }
                if polled.len() >= expected.len() {
                    break;
                }
            }
            anyhow::ensure!(polled == expected, "{what}: polled {polled:?}, sent {expected:?}");
            Ok(())
        }
    };
    let (mut next_id, mut before) = (1u128, BTreeMap::new());
    send_round(&client, topic, "a round before the kill", &mut next_id, &mut before).await?;
    poll_until(before.values().flatten().copied().collect(), "before the kill").await?;

    // Group 1's primary goes: sends to its partitions fail over, and the group's stored
    // offsets, replicated, make the next polls start right after what was polled.
    cluster.nodes[1].kill9()?;
    let mut after = BTreeMap::new();
    send_round(&client, topic, "a round after the kill", &mut next_id, &mut after).await?;
    poll_until(after.values().flatten().copied().collect(), "after the kill").await?;
    for partition in 0..PARTITIONS {
        let stored = client.get_consumer_offset(&group, &s, &t, Some(partition)).await?;
        assert_eq!(stored.map(|info| info.stored_offset), Some(19), "partition {partition}'s group offset");
    }
    Ok(())
}

/// Size of the segments `fill_segments` writes.
const SEGMENT_BYTES: u64 = 1 << 20;

/// A stream `name` with one single-partition topic of 1 MiB segments, sent `sends` batches
/// of ten 12 KB messages (ids from 1); its stream and topic ids.
async fn fill_segments(client: &IggyClient, name: &str, sends: u128) -> anyhow::Result<(u32, u32)> {
    fill_capped_segments(client, name, sends, MaxTopicSize::Unlimited).await
}

/// `fill_segments` into a topic of at most `cap` bytes.
async fn fill_capped_segments(
    client: &IggyClient,
    name: &str,
    sends: u128,
    cap: MaxTopicSize,
) -> anyhow::Result<(u32, u32)> {
    let stream = client.create_stream(name).await?.id;
    let options = TopicCreateOptions {
        segment_size: Some(IggyByteSize::from(SEGMENT_BYTES)),
        max_topic_size: Some(cap),
        ..rill_tests::topic_options(1)
    };
    let topic = client.create_topic(&id(stream), "events", &options).await?.id;
    for send in 0..sends {
        let mut batch: Vec<IggyMessage> =
            (0..10).map(|i| message(send * 10 + i + 1, vec![(send + i) as u8; 12_000], None)).collect();
        client.send_messages(&id(stream), &id(topic), &Partitioning::partition_id(0), &mut batch).await?;
    }
    Ok((stream, topic))
}

/// A root client on node 0 (the first metadata primary), once the cluster commits.
pub(crate) async fn client_once_committing(cluster: &Cluster) -> anyhow::Result<IggyClient> {
    eventually(TIMEOUT, "the cluster commits", || create_through_any(cluster, &[0], "warm-up")).await?;
    connect_root(&cluster.addresses[0]).await
}

/// Stops every node gracefully (flushing) and checks that all of them hold the same
/// partition files, byte for byte; node 0's files.
pub(crate) fn stop_and_compare(cluster: &mut Cluster) -> anyhow::Result<BTreeMap<PathBuf, Vec<u8>>> {
    for node in &mut cluster.nodes {
        node.stop_graceful()?;
    }
    let mut logs: Vec<BTreeMap<PathBuf, Vec<u8>>> =
        cluster.nodes.iter().map(|n| partition_files(&n.data_dir())).collect();
    for (node, node_logs) in logs.iter().enumerate().skip(1) {
        let (paths, first): (Vec<_>, Vec<_>) = (node_logs.keys().collect(), logs[0].keys().collect());
        anyhow::ensure!(paths == first, "node {node}'s partition files {paths:?}, node 0's {first:?}");
        for (path, bytes) in node_logs {
            anyhow::ensure!(
                bytes == &logs[0][path],
                "node {node}'s {} differs from node 0's ({} / {} bytes)",
                path.display(),
                bytes.len(),
                logs[0][path].len()
            );
        }
    }
    Ok(logs.swap_remove(0))
}

/// Waits until every node's own view counts the same messages in `stream`, at least `total`.
pub(crate) async fn every_node_holds(cluster: &Cluster, stream: &str, total: u64) -> anyhow::Result<()> {
    eventually(TIMEOUT, "every node holds as many messages as node 0", || async {
        let counts: Vec<u64> =
            cluster.addresses.iter().map(|a| messages_on(a, stream)).collect::<anyhow::Result<_>>()?;
        anyhow::ensure!(counts.iter().all(|&c| c == counts[0]) && counts[0] >= total, "messages per node {counts:?}");
        Ok(())
    })
    .await
}

/// A cluster that ran without partition groups (metadata replicated, messages only on the
/// node that took them) restarts with them: node 0's copies, which hold messages no group
/// recorded, are proposed to their groups and adopted, nodes 1 and 2 fetch them, sends go
/// on after them, and the consumer offset stored before is kept. The node logs that it
/// brought them in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_written_without_groups_are_brought_into_them_on_every_node() -> anyhow::Result<()> {
    let mut cluster = start_cluster_with(&|_| {
        vec![
            ("IGGY_SYSTEM_SHARDING_CPU_ALLOCATION", SHARDS.to_string()),
            ("IGGY_CLUSTER_REPLICATE_PARTITIONS", "false".to_owned()),
        ]
    })?;
    let client = client_once_committing(&cluster).await?;
    let topic = create_stream_and_topic(&client, "unrecorded", "t", PARTITIONS).await?;
    let mut acknowledged: BTreeMap<u32, Vec<u128>> = BTreeMap::new();
    let mut next_id = 1u128;
    send_round(&client, topic, "before the groups", &mut next_id, &mut acknowledged).await?;
    let reader = Consumer::new(id(7));
    client.store_consumer_offset(&reader, &id(topic.0), &id(topic.1), Some(0), 5).await?;
    drop(client);

    for node in &mut cluster.nodes {
        node.stop_graceful()?;
        node.set_env("IGGY_CLUSTER_REPLICATE_PARTITIONS", "true");
    }
    for node in &mut cluster.nodes {
        node.restart()?;
    }
    eventually(TIMEOUT, "the cluster commits again", || create_through_any(&cluster, &[0, 1, 2], "again")).await?;
    let client = connect_root(&cluster.addresses[0]).await?;
    send_round(&client, topic, "with the groups", &mut next_id, &mut acknowledged).await?;
    every_node_serves(&cluster, topic, &acknowledged).await?;
    let held = poll_all(&client, &id(topic.0), &id(topic.1), 0).await?;
    let ids: Vec<u128> = held.iter().map(|m| m.header.id).collect();
    assert_eq!(ids, acknowledged[&0], "partition 0: the messages from before, then the new ones");
    let stored = client.get_consumer_offset(&reader, &id(topic.0), &id(topic.1), Some(0)).await?;
    assert_eq!(stored.map(|info| info.stored_offset), Some(5), "the offset stored before the groups");
    let logs = cluster.nodes[0].logs_of_last_launch();
    assert!(logs.contains("brought into it"), "node 0 says it brought its copies in:\n{logs}");
    Ok(())
}
