//! The official high-level API against the server: an `IggyProducer` sending 100,000 messages in batches, read back by `IggyConsumer`s in consumer-group mode, alone (order kept per partition) and as three members with a late joiner and a leaver (every message consumed exactly once).

use iggy::consumer_ext::MessageConsumer;
use iggy::prelude::*;
use rill_tests::{
    ROOT_PASSWORD, ROOT_USERNAME, TestServer, client_config, connect_configured, connect_root, create_stream_and_topic,
    eventually, message, named,
};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

const STREAM: &str = "hl-stream";
const TOPIC: &str = "hl-topic";
const GROUP: &str = "hl-group";
const PARTITIONS: u32 = 6;
const TOTAL: u64 = 100_000;
const SEND_BATCH: u64 = 1_000;
/// The whole run, producer included, must finish within this.
const OVERALL: Duration = Duration::from_secs(120);

fn payload_of(message_id: u128) -> Vec<u8> {
    format!("hl-{message_id}").into_bytes()
}

/// A root client whose heartbeat (and with it the group re-sync) runs every second.
async fn member_client(address: &str) -> anyhow::Result<IggyClient> {
    let mut config = client_config(address, true);
    config.heartbeat_interval = NonZeroIggyDuration::new(Duration::from_secs(1)).expect("non-zero");
    let client = connect_configured(config).await?;
    client.login_user(ROOT_USERNAME, ROOT_PASSWORD).await?;
    Ok(client)
}

/// Sends message ids 1..=TOTAL through an `IggyProducer` (direct mode, balanced
/// partitioning, 1,000 messages per request) on its own connection.
async fn produce(address: String) -> anyhow::Result<()> {
    let client = connect_root(&address).await?;
    let producer = client
        .producer(STREAM, TOPIC)?
        .direct(DirectConfig::builder().batch_length(SEND_BATCH as u32).build())
        .partitioning(Partitioning::balanced())
        .do_not_create_stream_if_not_exists()
        .do_not_create_topic_if_not_exists()
        .build();
    producer.init().await?;
    for start in (0..TOTAL).step_by(SEND_BATCH as usize) {
        let batch: Vec<IggyMessage> = (start..start + SEND_BATCH)
            .map(|n| {
                let message_id = u128::from(n) + 1;
                message(message_id, payload_of(message_id), None)
            })
            .collect();
        producer.send(batch).await?;
    }
    producer.shutdown().await;
    Ok(())
}

/// A consumer-group member that commits with every poll and reads from the stored offset.
fn group_member(client: &IggyClient, batch_length: u32) -> anyhow::Result<IggyConsumer> {
    Ok(client
        .consumer_group(GROUP, STREAM, TOPIC)?
        .auto_commit(AutoCommit::When(AutoCommitWhen::PollingMessages))
        .polling_strategy(PollingStrategy::next())
        .batch_length(batch_length)
        .poll_interval(IggyDuration::new(Duration::from_millis(1)))
        .polling_retry_interval(NonZeroIggyDuration::new(Duration::from_millis(100)).expect("non-zero"))
        .build())
}

/// What the members consumed, shared by all of them.
#[derive(Default)]
struct Tally {
    ids: HashSet<u128>,
    duplicates: Vec<u128>,
    bad_payloads: u64,
    per_member: BTreeMap<usize, u64>,
    /// (partition, offset, id) in the order the messages were handed over.
    arrivals: Vec<(u32, u64, u128)>,
}

struct Shared {
    tally: Mutex<Tally>,
    /// The number of distinct ids consumed so far.
    progress: watch::Sender<usize>,
}

impl Shared {
    fn new() -> Arc<Self> {
        Arc::new(Self { tally: Mutex::new(Tally::default()), progress: watch::Sender::new(0) })
    }

    fn record(&self, member: usize, received: &ReceivedMessage) {
        let message_id = received.message.header.id;
        let unique = {
            let mut tally = self.tally.lock().unwrap_or_else(|e| e.into_inner());
            if !tally.ids.insert(message_id) {
                tally.duplicates.push(message_id);
            }
            if received.message.payload.as_ref() != payload_of(message_id).as_slice() {
                tally.bad_payloads += 1;
            }
            *tally.per_member.entry(member).or_default() += 1;
            tally.arrivals.push((received.partition_id, received.message.header.offset, message_id));
            tally.ids.len()
        };
        self.progress.send_replace(unique);
    }

    fn unique(&self) -> usize {
        *self.progress.borrow()
    }

    /// Waits until `target` distinct ids were consumed or `deadline` passes.
    async fn wait_for(&self, target: usize, deadline: Instant, what: &str) -> anyhow::Result<()> {
        let mut progress = self.progress.subscribe();
        match tokio::time::timeout_at(deadline, progress.wait_for(|n| *n >= target)).await {
            Ok(Ok(_)) => Ok(()),
            _ => anyhow::bail!("{what}: {} of {target} distinct messages consumed in time", self.unique()),
        }
    }
}

/// When the leaving member stops: after it consumed `threshold` messages once armed.
struct LeavePlan {
    armed: AtomicBool,
    after_arming: AtomicU64,
    threshold: u64,
    reached: Notify,
}

/// The message handler of one member.
struct Member {
    index: usize,
    shared: Arc<Shared>,
    leave: Option<Arc<LeavePlan>>,
}

impl MessageConsumer for Member {
    async fn consume(&self, received: ReceivedMessage) -> Result<(), IggyError> {
        self.shared.record(self.index, &received);
        if let Some(plan) = &self.leave
            && plan.armed.load(Ordering::SeqCst)
            && plan.after_arming.fetch_add(1, Ordering::SeqCst) + 1 == plan.threshold
        {
            // Hand control back to the test, which drops this member. Parking here keeps the
            // member from sending another poll: with one message per poll nothing it
            // fetched (and auto-committed) is left unhandled.
            plan.reached.notify_one();
            std::future::pending::<()>().await;
        }
        Ok(())
    }
}

type MemberTask = (JoinHandle<Result<IggyConsumer, IggyError>>, oneshot::Sender<()>);

/// Runs `consumer` with `member` as its handler until the returned sender fires.
fn spawn_member(mut consumer: IggyConsumer, member: Member) -> MemberTask {
    let (stop, stopped) = oneshot::channel();
    let task = tokio::spawn(async move {
        consumer.consume_messages(&member, stopped).await?;
        Ok(consumer)
    });
    (task, stop)
}

/// Stops a member task and shuts its consumer down (final commit, leave).
async fn stop_member((task, stop): MemberTask) -> anyhow::Result<()> {
    let _ = stop.send(());
    let mut consumer = task.await??;
    consumer.shutdown().await?;
    Ok(())
}

fn sorted_partitions(details: &ConsumerGroupDetails) -> Vec<Vec<u32>> {
    let mut members: Vec<Vec<u32>> = details.members.iter().map(|m| m.partitions.clone()).collect();
    members.iter_mut().for_each(|p| p.sort_unstable());
    members.sort();
    members
}

/// Panics unless each partition's messages arrived at consecutive offsets from 0 with
/// increasing ids, and all partitions together hold every id once.
fn assert_order_per_partition(tally: &Tally) {
    let mut per_partition: BTreeMap<u32, Vec<(u64, u128)>> = BTreeMap::new();
    for &(partition, offset, message_id) in &tally.arrivals {
        per_partition.entry(partition).or_default().push((offset, message_id));
    }
    assert_eq!(per_partition.len(), PARTITIONS as usize, "balanced sends reach every partition");
    for (partition, messages) in &per_partition {
        for (index, (offset, _)) in messages.iter().enumerate() {
            assert_eq!(*offset, index as u64, "partition {partition}: offsets arrive in order, without gaps");
        }
        let ordered = messages.windows(2).all(|pair| pair[0].1 < pair[1].1);
        assert!(ordered, "partition {partition}: ids arrive in the order they were sent");
    }
    let total: usize = per_partition.values().map(Vec::len).sum();
    assert_eq!(total as u64, TOTAL);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_and_a_single_group_member_round_trip_100k_messages_in_order() -> anyhow::Result<()> {
    let deadline = Instant::now() + OVERALL;
    let server = TestServer::start()?;
    let address = server.tcp_address();
    let root = connect_root(&address).await?;
    create_stream_and_topic(&root, STREAM, TOPIC, PARTITIONS).await?;
    tokio::time::timeout_at(deadline, produce(address.clone())).await??;
    let topic = root.get_topic(&named(STREAM), &named(TOPIC)).await?.expect("topic");
    assert_eq!(topic.messages_count, TOTAL, "every message was stored");

    let client = member_client(&address).await?;
    let mut consumer = group_member(&client, 1_000)?;
    consumer.init().await?;
    let details = root.get_consumer_group(&named(STREAM), &named(TOPIC), &named(GROUP)).await?.expect("group");
    assert_eq!(sorted_partitions(&details), vec![(0..PARTITIONS).collect::<Vec<u32>>()], "one member, all partitions");

    let shared = Shared::new();
    let task = spawn_member(consumer, Member { index: 0, shared: shared.clone(), leave: None });
    shared.wait_for(TOTAL as usize, deadline, "single member").await?;
    stop_member(task).await?;

    let tally = shared.tally.lock().unwrap_or_else(|e| e.into_inner());
    assert!(tally.duplicates.is_empty(), "{} messages handed over twice", tally.duplicates.len());
    assert_eq!(tally.ids.len() as u64, TOTAL);
    assert!(tally.ids.iter().all(|&i| (1..=u128::from(TOTAL)).contains(&i)), "only the sent ids");
    assert_eq!(tally.bad_payloads, 0, "payloads arrive unchanged");
    assert_order_per_partition(&tally);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_group_members_consume_100k_messages_exactly_once_across_a_late_join_and_a_leave() -> anyhow::Result<()> {
    let deadline = Instant::now() + OVERALL;
    let server = TestServer::start()?;
    let address = server.tcp_address();
    let root = connect_root(&address).await?;
    create_stream_and_topic(&root, STREAM, TOPIC, PARTITIONS).await?;
    let shared = Shared::new();

    // A creates the group on init and joins; B joins second and reads one message per poll.
    let (a_client, b_client, c_client) =
        (member_client(&address).await?, member_client(&address).await?, member_client(&address).await?);
    let mut a = group_member(&a_client, 1_000)?;
    a.init().await?;
    let mut b = group_member(&b_client, 1)?;
    b.init().await?;
    let plan = Arc::new(LeavePlan {
        armed: AtomicBool::new(false),
        after_arming: AtomicU64::new(0),
        threshold: 300,
        reached: Notify::new(),
    });
    let a_task = spawn_member(a, Member { index: 0, shared: shared.clone(), leave: None });
    let (b_task, _b_stop) = spawn_member(b, Member { index: 1, shared: shared.clone(), leave: Some(plan.clone()) });
    let producer = tokio::spawn(produce(address.clone()));

    // C joins once the others are well under way.
    shared.wait_for(20_000, deadline, "before the late join").await?;
    let mut c = group_member(&c_client, 1_000)?;
    c.init().await?;
    let joined_at = shared.unique();
    plan.armed.store(true, Ordering::SeqCst);
    let c_task = spawn_member(c, Member { index: 2, shared: shared.clone(), leave: None });

    // B leaves after it consumed a while next to C: dropped, then its connection closed.
    tokio::time::timeout_at(deadline, plan.reached.notified()).await?;
    let left_at = shared.unique();
    b_task.abort();
    let _ = b_task.await;
    b_client.shutdown().await?;
    drop(b_client);
    let (s, t, g) = (named(STREAM), named(TOPIC), named(GROUP));
    eventually(Duration::from_secs(30), "the leaver's membership ends", || async {
        let details = root.get_consumer_group(&s, &t, &g).await?.expect("group");
        Ok(details.members_count == 2)
    })
    .await?;

    shared.wait_for(TOTAL as usize, deadline, "after the leave").await?;
    tokio::time::timeout_at(deadline, producer).await???;
    stop_member(a_task).await?;
    stop_member(c_task).await?;

    let tally = shared.tally.lock().unwrap_or_else(|e| e.into_inner());
    eprintln!("late join at {joined_at}, leave at {left_at}, per member {:?}", tally.per_member);
    let first_duplicates: Vec<u128> = tally.duplicates.iter().take(10).copied().collect();
    assert!(tally.duplicates.is_empty(), "{} duplicates, e.g. {first_duplicates:?}", tally.duplicates.len());
    assert_eq!(tally.ids.len() as u64, TOTAL, "every message consumed");
    assert!(tally.ids.iter().all(|&i| (1..=u128::from(TOTAL)).contains(&i)), "only the sent ids");
    assert_eq!(tally.bad_payloads, 0, "payloads arrive unchanged");
    assert!((joined_at as u64) < TOTAL && (left_at as u64) < TOTAL, "join at {joined_at}, leave at {left_at}");
    let counts = &tally.per_member;
    assert!(counts.get(&1).copied().unwrap_or(0) >= plan.threshold, "the leaver consumed: {counts:?}");
    assert!(counts.get(&2).copied().unwrap_or(0) > 0, "the late joiner consumed: {counts:?}");
    Ok(())
}
