//! The crash loop: producers on the official client write to a persisted topic across
//! several partitions and shards, the server is killed with SIGKILL at a random moment,
//! restarted and checked against a ledger of what it acknowledged, cycle after cycle.
//!
//! Checks after every restart: every acknowledged message is stored, byte-exact, once;
//! offsets run without gaps and none that was handed out before holds anything else now
//! (sampled every cycle, every one at the end); nothing the producers never sent appears.
//! `CRASH_LOOP_CYCLES` (default 20) sets the length, `CRASH_LOOP_SEED` the kill moments;
//! `just crash-loop N` runs it against the release server.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use iggy::prelude::*;
use rill_tests::{TestServer, connect_root, connect_root_no_reconnect, id};

const PARTITIONS: u32 = 6;
const PRODUCERS: u32 = 3;
/// Old offsets re-read per partition after each restart.
const SAMPLES_PER_CYCLE: usize = 16;

/// A xorshift generator: the kill moments and batch sizes of a run follow from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

/// The payload of message `id`: its length and bytes follow from the id, so the ledger
/// keeps ids only and every stored byte can still be checked.
fn payload(id: u128) -> Vec<u8> {
    let mixed = (id as u64 ^ (id >> 64) as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let len = 16 + (mixed % 113) as usize;
    (0..len).map(|i| (mixed >> ((i % 8) * 8)) as u8 ^ i as u8).collect()
}

fn message_id(cycle: u64, producer: u32, seq: u64) -> u128 {
    (u128::from(cycle + 1) << 64) | (u128::from(producer) << 40) | u128::from(seq)
}

/// What one producer saw in one cycle: the batches acknowledged, and the one in flight
/// when the server died (stored or not).
#[derive(Default)]
struct Sent {
    acknowledged: Vec<(u32, Vec<u128>)>,
    in_flight: Option<(u32, Vec<u128>)>,
}

/// Sends batches of 1 to 20 messages round-robin over this producer's partitions until a
/// send fails (the server is gone). The first acknowledgement is signalled.
async fn produce(
    client: IggyClient,
    cycle: u64,
    producer: u32,
    seed: u64,
    first_ack: tokio::sync::mpsc::Sender<()>,
) -> Sent {
    let mut rng = Rng(seed | 1);
    let mut sent = Sent::default();
    let partitions: Vec<u32> = (0..PARTITIONS).filter(|p| p % PRODUCERS == producer).collect();
    let mut seq = 0u64;
    for round in 0usize.. {
        let partition = partitions[round % partitions.len()];
        let count = 1 + rng.below(20);
        let ids: Vec<u128> = (seq..seq + count).map(|s| message_id(cycle, producer, s)).collect();
        seq += count;
        let mut batch: Vec<IggyMessage> = ids.iter().map(|&id| rill_tests::message(id, payload(id), None)).collect();
        sent.in_flight = Some((partition, ids));
        let partitioning = Partitioning::partition_id(partition);
        if client.send_messages(&id(0), &id(0), &partitioning, &mut batch).await.is_err() {
            return sent;
        }
        sent.acknowledged.extend(sent.in_flight.take());
        let _ = first_ack.try_send(());
        // Paced, so a long loop keeps its data (and its final full check) small.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    unreachable!("the loop ends with a failed send")
}

/// Reads `count` messages of `partition` from `from` on (fewer when the log ends).
async fn read(client: &IggyClient, partition: u32, from: u64, count: u32) -> anyhow::Result<Vec<IggyMessage>> {
    let consumer = Consumer::new(id(77));
    let mut out: Vec<IggyMessage> = Vec::new();
    loop {
        let next = from + out.len() as u64;
        let want = count - out.len() as u32;
        if want == 0 {
            return Ok(out);
        }
        let strategy = PollingStrategy::offset(next);
        let polled =
            client.poll_messages(&id(0), &id(0), Some(partition), &consumer, &strategy, want.min(1000), false).await?;
        if polled.messages.is_empty() {
            return Ok(out);
        }
        out.extend(polled.messages);
    }
}

/// The ledger: per partition, the id stored at every offset verified so far.
struct Ledger {
    offsets: Vec<Vec<u128>>,
}

impl Ledger {
    /// Checks the partitions against what this cycle's producers saw, then appends what
    /// was found; `full` re-reads every old offset instead of a sample.
    async fn verify(&mut self, client: &IggyClient, sent: &[Sent], rng: &mut Rng, full: bool) -> anyhow::Result<u64> {
        let mut appended = 0;
        for partition in 0..PARTITIONS {
            let known = &mut self.offsets[partition as usize];
            let acked: Vec<u128> = batches(sent, partition, false).flatten().collect();
            let allowed: HashSet<u128> = batches(sent, partition, true).flatten().collect();
            let fresh = read(client, partition, known.len() as u64, u32::MAX).await?;
            let mut stored = HashSet::new();
            for (index, message) in fresh.iter().enumerate() {
                let offset = known.len() as u64 + index as u64;
                let id = message.header.id;
                ensure!(
                    message.header.offset == offset,
                    "partition {partition}: offset {offset} holds offset {}",
                    message.header.offset
                );
                ensure!(allowed.contains(&id), "partition {partition} offset {offset}: id {id:#x} was never sent");
                ensure!(stored.insert(id), "partition {partition} offset {offset}: id {id:#x} stored twice");
                ensure!(
                    message.payload.as_ref() == payload(id).as_slice(),
                    "partition {partition} offset {offset}: payload differs"
                );
            }
            let lost = acked.iter().filter(|id| !stored.contains(id)).count();
            ensure!(lost == 0, "partition {partition}: {lost} of {} acknowledged messages lost", acked.len());
            let old = known.len();
            let checked: Vec<usize> = if full {
                (0..old).collect()
            } else {
                (0..SAMPLES_PER_CYCLE.min(old)).map(|_| rng.below(old as u64) as usize).collect()
            };
            if full && old > 0 {
                let again = read(client, partition, 0, old as u32).await?;
                ensure!(again.len() == old, "partition {partition}: {} of {old} old offsets left", again.len());
                for (offset, message) in again.iter().enumerate() {
                    ensure!(message.header.id == known[offset], "partition {partition}: offset {offset} re-minted");
                    ensure!(
                        message.payload.as_ref() == payload(known[offset]).as_slice(),
                        "partition {partition} offset {offset}: payload differs"
                    );
                }
            } else {
                for offset in checked {
                    let again = read(client, partition, offset as u64, 1).await?;
                    let got = again.first().with_context(|| format!("partition {partition}: offset {offset} gone"))?;
                    ensure!(got.header.id == known[offset], "partition {partition}: offset {offset} re-minted");
                    ensure!(
                        got.payload.as_ref() == payload(known[offset]).as_slice(),
                        "partition {partition} offset {offset}: payload differs"
                    );
                }
            }
            appended += fresh.len() as u64;
            known.extend(fresh.iter().map(|message| message.header.id));
        }
        Ok(appended)
    }
}

/// The ids of `partition`'s acknowledged batches (and the in-flight ones with `in_flight`).
fn batches(sent: &[Sent], partition: u32, in_flight: bool) -> impl Iterator<Item = Vec<u128>> + '_ {
    sent.iter().flat_map(move |one| {
        let flying = one.in_flight.iter().filter(move |_| in_flight);
        one.acknowledged.iter().chain(flying).filter(move |(p, _)| *p == partition).map(|(_, ids)| ids.clone())
    })
}

/// One cycle's load: producers until the first acknowledgement plus a random moment, then
/// SIGKILL; what each producer saw.
async fn load_then_kill(server: &mut TestServer, cycle: u64, rng: &mut Rng) -> anyhow::Result<Vec<Sent>> {
    let (first_ack, mut acked) = tokio::sync::mpsc::channel(PRODUCERS as usize);
    let mut producers = Vec::new();
    for producer in 0..PRODUCERS {
        let client = connect_root_no_reconnect(&server.tcp_address()).await?;
        producers.push(tokio::spawn(produce(client, cycle, producer, rng.next(), first_ack.clone())));
    }
    drop(first_ack);
    tokio::time::timeout(Duration::from_secs(30), acked.recv()).await.context("no send acknowledged in 30 s")?;
    tokio::time::sleep(Duration::from_millis(rng.below(600))).await;
    server.kill9()?;
    let mut sent = Vec::new();
    for producer in producers {
        sent.push(tokio::time::timeout(Duration::from_secs(60), producer).await.context("a producer hung")??);
    }
    Ok(sent)
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill9_in_a_loop_loses_no_acknowledged_message_and_re_mints_no_offset() -> anyhow::Result<()> {
    let cycles = env_number("CRASH_LOOP_CYCLES", 20);
    let seed = env_number("CRASH_LOOP_SEED", {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        now.as_nanos() as u64
    });
    println!("crash loop: {cycles} cycles, CRASH_LOOP_SEED={seed}");
    let mut rng = Rng(seed | 1);
    // Three shards unless the run picks its own count: partitions and connections cross them.
    let shards: Vec<(&str, &str)> = match std::env::var("RILL_TEST_SHARDS") {
        Ok(_) => vec![],
        Err(_) => vec![("IGGY_SYSTEM_SHARDING_CPU_ALLOCATION", "3"), ("IGGY_SYSTEM_SHARDING_PIN_THREADS", "false")],
    };
    let mut server = TestServer::start_with_env(&shards)?;
    server.print_logs_on_drop(false);
    let admin = connect_root(&server.tcp_address()).await?;
    admin.create_stream("crash").await?;
    let options = TopicCreateOptions {
        partitions_count: Some(PARTITIONS),
        durability: Durability::Persisted,
        segment_size: Some(IggyByteSize::from(1u64 << 20)),
        ..rill_tests::topic_options(PARTITIONS)
    };
    admin.create_topic(&id(0), "t", &options).await?;
    drop(admin);
    let mut ledger = Ledger { offsets: vec![Vec::new(); PARTITIONS as usize] };
    let mut startups = Vec::new();
    for cycle in 0..cycles {
        let outcome = async {
            let sent = load_then_kill(&mut server, cycle, &mut rng).await?;
            let started = Instant::now();
            server.restart()?;
            startups.push(started.elapsed());
            let client = connect_root(&server.tcp_address()).await?;
            let last = cycle + 1 == cycles;
            let appended = ledger.verify(&client, &sent, &mut rng, last).await?;
            let acked: usize = sent.iter().flat_map(|s| &s.acknowledged).map(|(_, ids)| ids.len()).sum();
            println!("cycle {cycle}: {acked} acknowledged, {appended} stored, start-up {:?}", startups.last().unwrap());
            anyhow::Ok(())
        }
        .await;
        if let Err(error) = outcome {
            bail!("crash loop CRASH_LOOP_SEED={seed}, cycle {cycle}: {error:#}\n{}", server.logs_of_last_launch());
        }
    }
    startups.sort();
    let stored: usize = ledger.offsets.iter().map(Vec::len).sum();
    println!(
        "crash loop: {cycles} cycles, {stored} messages stored and verified, zero acknowledged lost, zero offsets re-minted; start-up median {:?}, p99 {:?}, max {:?}",
        startups[startups.len() / 2],
        startups[(startups.len() - 1) * 99 / 100],
        startups.last().unwrap()
    );
    Ok(())
}
