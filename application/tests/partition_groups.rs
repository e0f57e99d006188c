//! Partition groups of three nodes in one thread, deterministic: each node runs one or two
//! shards on its own simulated disk with its own (single-node) metadata, each shard a
//! replica of its partition group, and the replica plane is a queue this test delivers from. Every
//! node applies the same metadata requests in the same order on one manual clock (it moves
//! only on ticks), so their incarnations (the metadata timestamps of a partition's creation
//! or purge) agree, as a metadata cluster's would.
//!
//! What it checks: a node that restarts replays its group journal from its last checkpoint,
//! and what it replays must not land in a partition that has since been purged, or deleted
//! and created again (the black-box test `partition_groups::a_purge_and_a_recreated_topic_
//! start_every_replica_again_at_offset_zero` caught that only under load; this fails on the
//! first restart without the check), and a node whose disk failed while a reset committed
//! empties its copy once the disk works again.

mod common;
#[path = "partition_groups/sim.rs"]
mod sim;

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use common::shards::{Client, SimEnv, config, create_stream, numeric, poll_body, reply_of, send_body, start_on};
use common::{Rng, messages};
use rill_adapter_sim::{Jitter, ManualClock, SimStorage};
use rill_application::Shard;
use rill_application::memory_pool::{MemoryPool, PoolBuf};
use rill_application::ports::{Clock, ReplicaNetwork};
use rill_application::replication::{Membership, TICK_MS, VsrJournal};
use rill_domain::vsr::{Checkpoint, Message};
use rill_domain::wire::codes::{code, operation};

const NODES: u8 = 3;
const PARTITIONS: u32 = 2;
/// Steps a request may take before the test calls it a hang.
const STEPS: usize = 200_000;
/// Ticks a restarted replica has to catch up (30 s: a view change and a gap fetch).
const CATCH_UP_TICKS: u64 = 600;

/// Messages in flight on the replica plane: (from, to, the shard whose group it is for,
/// message).
type Plane = Rc<RefCell<VecDeque<(u8, u8, u16, Message)>>>;

/// One shard's end of the replica plane: what its group sends joins the queue, for the
/// same shard of the peer.
struct QueuedPlane {
    node: u8,
    shard: u16,
    queue: Plane,
}

impl ReplicaNetwork for QueuedPlane {
    fn send(&self, to: u8, message: Message) {
        self.queue.borrow_mut().push_back((self.node, to, self.shard, message));
    }
}

/// What the plane does to messages: percent chances of dropping and of duplicating one,
/// delivery in a random order, and a node cut off from the others.
#[derive(Default)]
struct Faults {
    rng: Option<Rng>,
    drop_percent: u64,
    duplicate_percent: u64,
    isolated: Option<u8>,
}

/// A future run beside the requests, and the node it belongs to (dropped if that node is
/// killed).
type Task = (u8, Pin<Box<dyn Future<Output = ()>>>);

struct Node {
    storage: SimStorage,
    /// Its shards while it is up (none while it is down).
    shards: Vec<Rc<Shard<SimEnv>>>,
    client: Option<Client>,
}

struct Cluster {
    nodes: Vec<Node>,
    plane: Plane,
    faults: RefCell<Faults>,
    /// Deliveries, ticks and the simulation's requests, each polled until it ends.
    running: RefCell<Vec<Task>>,
    clock: ManualClock,
    /// While set, ticks leave the clock where it is: metadata requests made on every node
    /// then get one timestamp, as one commit of a metadata cluster would.
    frozen: std::cell::Cell<bool>,
    pool: &'static MemoryPool,
    starts: u64,
    shards_per_node: u16,
}

impl Cluster {
    fn new(shards_per_node: u16) -> Self {
        let nodes = (0..NODES).map(|_| Node { storage: SimStorage::new(), shards: Vec::new(), client: None }).collect();
        let clock = ManualClock::new(1_700_000_000_000_000);
        let pool = common::pool();
        let mut cluster = Self {
            nodes,
            plane: Plane::default(),
            faults: RefCell::default(),
            running: RefCell::default(),
            clock,
            frozen: Default::default(),
            pool,
            starts: 0,
            shards_per_node,
        };
        for node in 0..NODES {
            cluster.start(node);
        }
        cluster
    }

    /// Starts `node` on its disk (recovering what is there), opens each shard's group
    /// replica, and logs a client in on shard 0.
    fn start(&mut self, node: u8) {
        let storage = &self.nodes[node as usize].storage;
        let count = self.shards_per_node;
        let (shards, _) = start_on(storage, config(), &self.clock, count, self.pool, Jitter::default()).expect("start");
        let membership = Membership { replica_id: node, replica_count: NODES };
        for (index, shard) in shards.iter().enumerate() {
            let plane = Box::new(QueuedPlane { node, shard: index as u16, queue: self.plane.clone() });
            self.starts += 1;
            let seed = self.starts;
            let opening = shard.clone();
            self.drive(async move { opening.open_group(membership, plane, seed).await.expect("open group") });
        }
        self.nodes[node as usize].client = Some(Client::login(&shards[0]));
        self.nodes[node as usize].shards = shards;
    }

    /// Stops `node` as a kill would: nothing flushed, its disk kept as it is, or, with
    /// `power_loss`, without whatever it had not fsynced.
    fn kill(&mut self, node: u8, power_loss: bool) {
        let stopped = &mut self.nodes[node as usize];
        stopped.client = None;
        stopped.shards.clear();
        self.running.borrow_mut().retain(|(owner, _)| *owner != node);
        if power_loss {
            stopped.storage.crash(0);
        }
    }

    /// Runs `future` to its end while the plane's messages are delivered and, whenever
    /// nothing else moves, the clock advances one tick and every replica ticks; then lets
    /// every delivery finish.
    fn drive<T>(&self, future: impl Future<Output = T>) -> T {
        let mut future = std::pin::pin!(future);
        let mut context = Context::from_waker(Waker::noop());
        let mut result = None;
        for _ in 0..STEPS {
            if result.is_none()
                && let Poll::Ready(value) = future.as_mut().poll(&mut context)
            {
                result = Some(value);
            }
            let moved = self.step();
            if self.quiet()
                && let Some(value) = result.take()
            {
                return value;
            }
            if !moved {
                self.tick();
            }
        }
        panic!("a request and its replication did not finish in {STEPS} steps");
    }

    /// Nothing runs and nothing is on the plane.
    fn quiet(&self) -> bool {
        self.running.borrow().is_empty() && self.plane.borrow().is_empty()
    }

    /// Polls every running task once and starts delivering what is on the plane; whether
    /// anything ended or was delivered.
    fn step(&self) -> bool {
        let mut context = Context::from_waker(Waker::noop());
        let mut tasks = std::mem::take(&mut *self.running.borrow_mut());
        let before = tasks.len();
        tasks.retain_mut(|(_, task)| task.as_mut().poll(&mut context).is_pending());
        let ended = tasks.len() < before;
        // Tasks started meanwhile (a delivery's, a request's) were added to the empty list.
        tasks.append(&mut self.running.borrow_mut());
        *self.running.borrow_mut() = tasks;
        self.deliver() > 0 || ended
    }

    /// Lets `ticks` ticks pass (the replicas retry, resend and repair on ticks).
    fn pass(&self, ticks: u64) {
        for _ in 0..ticks {
            self.tick();
            self.drive(async {});
        }
    }

    /// Starts delivering every queued message to its node, through the plane's faults
    /// (and never to a node that is down).
    fn deliver(&self) -> usize {
        let mut queued: Vec<(u8, u8, u16, Message)> = self.plane.borrow_mut().drain(..).collect();
        let count = queued.len();
        let mut faults = self.faults.borrow_mut();
        let (drop_percent, duplicate_percent, isolated) =
            (faults.drop_percent, faults.duplicate_percent, faults.isolated);
        if let Some(rng) = faults.rng.as_mut() {
            for index in (1..queued.len()).rev() {
                queued.swap(index, rng.below(index as u64 + 1) as usize);
            }
        }
        for (from, to, group, message) in queued {
            if isolated.is_some_and(|cut| cut == from || cut == to) {
                continue;
            }
            let Some(shard) = self.nodes[to as usize].shards.get(usize::from(group)).cloned() else { continue };
            let (dropped, twice) = match faults.rng.as_mut() {
                Some(rng) => (rng.chance(drop_percent), rng.chance(duplicate_percent)),
                None => (false, false),
            };
            if dropped {
                continue;
            }
            if twice {
                let (again, copy) = (shard.clone(), message.clone());
                self.running.borrow_mut().push((to, Box::pin(async move { again.on_group_message(copy).await })));
            }
            self.running.borrow_mut().push((to, Box::pin(async move { shard.on_group_message(message).await })));
        }
        count
    }

    /// One tick: the clock moves (unless frozen) and every replica that is up ticks; every
    /// second of the clock each shard also retries its failed writes and openings, as the
    /// server's shards do.
    fn tick(&self) {
        if !self.frozen.get() {
            self.clock.advance_us(TICK_MS * 1000);
        }
        let retry = self.clock.now_us() % 1_000_000 < TICK_MS * 1000;
        for (node, up) in self.nodes.iter().enumerate() {
            for shard in up.shards.clone() {
                self.running.borrow_mut().push((
                    node as u8,
                    Box::pin(async move {
                        shard.group_tick().await;
                        if retry {
                            shard.retry_failed_writes().await;
                        }
                    }),
                ));
            }
        }
    }

    /// One request from `node`'s client, answered with its body or its status.
    fn call(&mut self, node: u8, op: u8, nr_code: u32, body: &[u8]) -> Result<Vec<u8>, u32> {
        // Out of the node while its request runs, so the plane can reach the node meanwhile.
        let mut client = self.nodes[node as usize].client.take().expect("node up");
        let frame = client.frame(op, nr_code, body);
        let shard = client.system.clone();
        let outcome = self.drive(shard.handle(&client.connection, PoolBuf::plain(frame)));
        self.nodes[node as usize].client = Some(client);
        reply_of(outcome)
    }

    /// The same metadata request on every node at one clock reading, as a metadata
    /// cluster commits it on each.
    fn everywhere(&mut self, op: u8, body: &[u8]) {
        self.everywhere_but(op, body, None);
    }

    /// The same, where `failing` (a node whose disk fails) may answer with an error.
    fn everywhere_but(&mut self, op: u8, body: &[u8], failing: Option<u8>) {
        self.frozen.set(true);
        for node in 0..NODES {
            let answer = self.call(node, op, 0, body);
            if let Err(status) = answer
                && failing != Some(node)
            {
                panic!("node {node}: op {op} answered {status}");
            }
        }
        self.frozen.set(false);
    }

    /// Creates stream `name` and its topic 0 of `PARTITIONS` partitions on every node (with
    /// `segment_size`, if given); the stream's id and the topic's creation body.
    fn topic_everywhere(&mut self, name: &str, segment_size: Option<u64>) -> (u32, Vec<u8>) {
        let streams: Vec<u32> = (0..NODES)
            .map(|node| create_stream(self.nodes[node as usize].client.as_mut().expect("up"), name))
            .collect();
        let stream = streams[0];
        assert!(streams.iter().all(|&s| s == stream), "every node gave the stream one id: {streams:?}");
        let mut create = numeric(stream);
        create.extend_from_slice(&PARTITIONS.to_le_bytes());
        create.extend_from_slice(&[1, b't']);
        if let Some(size) = segment_size {
            rill_domain::wire::tlv::put(
                &mut create,
                "segment_size",
                rill_domain::wire::tlv::KIND_UINT64,
                &size.to_le_bytes(),
            );
        }
        self.everywhere(operation::CREATE_TOPIC, &create);
        (stream, create)
    }

    /// Sends one message per partition through node 0, each named `<label> <partition>`.
    fn send_round(&mut self, stream: u32, label: &str) {
        for partition in 0..PARTITIONS {
            let payload = format!("{label} {partition}");
            let body = send_body(stream, partition, &[payload.as_bytes()]).0;
            self.call(0, operation::SEND_MESSAGES, 0, &body)
                .unwrap_or_else(|status| panic!("send {payload}: status {status}"));
        }
    }

    /// What `node` serves of each partition: (offset, payload) from offset 0.
    fn served(&mut self, node: u8, stream: u32) -> Vec<Vec<(u64, String)>> {
        (0..PARTITIONS)
            .map(|partition| {
                let body = poll_body(stream, partition, 0, 1000);
                let reply = self.call(node, operation::NON_REPLICATED, code::POLL_MESSAGES, &body).expect("poll");
                messages(&reply[16..])
            })
            .collect()
    }
}

fn expected(labels: &[&str]) -> Vec<Vec<(u64, String)>> {
    (0..PARTITIONS)
        .map(|partition| {
            labels.iter().enumerate().map(|(offset, label)| (offset as u64, format!("{label} {partition}"))).collect()
        })
        .collect()
}

/// Polls `node` after every tick until it serves `want`: a copy catching up after its
/// restart may serve less (a prefix of each partition), never anything else.
fn catches_up(cluster: &mut Cluster, node: u8, stream: u32, want: &[Vec<(u64, String)>], label: &str) {
    for tick in 0..CATCH_UP_TICKS {
        let served = cluster.served(node, stream);
        if served == want {
            return;
        }
        for (partition, (got, expected)) in served.iter().zip(want).enumerate() {
            assert!(
                expected.starts_with(got),
                "{label}: node {node} partition {partition} at tick {tick} served {got:?}, not a prefix of {expected:?}"
            );
        }
        cluster.pass(1);
    }
    panic!("{label}: node {node} still serves {:?} after {CATCH_UP_TICKS} ticks", cluster.served(node, stream));
}

/// Creates a topic on every node, sends to it, purges it, sends, deletes it and creates it
/// again with the same ids, sends, then kills and restarts each node in turn.
fn purge_recreate_and_restart(power_loss: bool, shards_per_node: u16) {
    let mut cluster = Cluster::new(shards_per_node);
    let (stream, create) = cluster.topic_everywhere("again", None);
    let mut topic = numeric(stream);
    topic.extend_from_slice(&numeric(0));
    cluster.send_round(stream, "first");
    cluster.send_round(stream, "second");
    for node in 0..NODES {
        assert_eq!(cluster.served(node, stream), expected(&["first", "second"]), "node {node} before the purge");
    }

    cluster.everywhere(operation::PURGE_TOPIC, &topic);
    cluster.send_round(stream, "after the purge");
    for node in 0..NODES {
        assert_eq!(cluster.served(node, stream), expected(&["after the purge"]), "node {node} after the purge");
    }

    // Deleted and created again with the same ids: the new topic starts at offset 0.
    cluster.everywhere(operation::DELETE_TOPIC, &topic);
    cluster.everywhere(operation::CREATE_TOPIC, &create);
    cluster.send_round(stream, "recreated");
    let want = expected(&["recreated"]);
    for node in 0..NODES {
        assert_eq!(cluster.served(node, stream), want, "node {node} after the recreation");
    }

    // The group's last checkpoint is older than the purge's second half and the
    // recreation, so each restarted node replays sends of the purged and the deleted
    // incarnations from its journal: none may land in the new topic's copy.
    for node in 0..NODES {
        cluster.kill(node, power_loss);
        cluster.start(node);
        let label = format!("after node {node} restarted");
        for other in 0..NODES {
            catches_up(&mut cluster, other, stream, &want, &label);
        }
    }
    cluster.send_round(stream, "after the restarts");
    let want = expected(&["recreated", "after the restarts"]);
    for node in 0..NODES {
        catches_up(&mut cluster, node, stream, &want, "at the end");
    }
}

#[test]
fn a_killed_replica_replays_nothing_into_a_purged_or_recreated_partition() {
    purge_recreate_and_restart(false, 1);
}

#[test]
fn a_replica_that_lost_power_replays_nothing_into_a_purged_or_recreated_partition() {
    purge_recreate_and_restart(true, 1);
}

/// The same with two shards a node: each partition in its own shard's group, the client's
/// requests for the other crossing the node's bus.
#[test]
fn two_shards_a_node_replay_nothing_into_a_purged_or_recreated_partition() {
    purge_recreate_and_restart(true, 2);
}

/// Each message of a partition as its offset and payload length (payloads here are large).
fn lengths(served: &[Vec<(u64, String)>]) -> Vec<Vec<(u64, usize)>> {
    served.iter().map(|log| log.iter().map(|(offset, payload)| (*offset, payload.len())).collect()).collect()
}

/// A node down while a segment deletion commits comes back so far behind that it installs a
/// peer's state, which covers the deletion's op; its copy of that partition lacks nothing,
/// so it fetches nothing there, yet it must drop the deleted segment too.
#[test]
fn a_replica_that_missed_a_segment_deletion_follows_it_from_the_state_it_installs() {
    let mut cluster = Cluster::new(1);
    let (stream, _) = cluster.topic_everywhere("del", Some(rill_domain::constants::MIN_SEGMENT_SIZE_BYTES));
    let send = |cluster: &mut Cluster, partition: u32, payload: String| {
        let body = send_body(stream, partition, &[payload.as_bytes()]).0;
        cluster.call(0, operation::SEND_MESSAGES, 0, &body).unwrap_or_else(|status| panic!("send: status {status}"));
    };
    // 400 KB each: two fill a 1 MiB segment, the third starts the next at offset 2.
    for i in 0..5 {
        send(&mut cluster, 0, format!("big {i} {}", "x".repeat(400_000)));
    }
    let topic = rill_domain::wire::command::TopicRef {
        stream: rill_domain::identifier::Identifier::Numeric(stream),
        topic: rill_domain::identifier::Identifier::Numeric(0),
    };
    // Node 2's copy on disk whole, so it lacks nothing of partition 0 when it comes back.
    let flush =
        rill_domain::wire::command::Command::FlushUnsavedBuffer { topic: topic.clone(), partition_id: 0, fsync: true };
    let request = flush.encode().expect("a flush encodes");
    cluster.call(2, request.operation, request.code, &request.body).expect("node 2 flushes");
    cluster.kill(2, false);
    let delete = rill_domain::wire::command::Command::DeleteSegments { topic, partition_id: 0, segments_count: 1 };
    let request = delete.encode().expect("a deletion encodes");
    cluster.call(0, request.operation, request.code, &request.body).expect("the deletion commits");
    // Past what the peers' logs reach, all to the other partition: node 2's copy of
    // partition 0 will have nothing to fetch.
    for i in 0..60 {
        send(&mut cluster, 1, format!("small {i}"));
    }
    let want = lengths(&cluster.served(0, stream));
    assert_eq!(want[0].first().map(|m| m.0), Some(2), "the oldest segment went on node 0");
    assert_eq!(lengths(&cluster.served(1, stream)), want, "and on node 1");
    cluster.start(2);
    for _ in 0..CATCH_UP_TICKS {
        if lengths(&cluster.served(2, stream)) == want {
            return;
        }
        cluster.pass(1);
    }
    assert_eq!(lengths(&cluster.served(2, stream)), want, "node 2 after it caught up");
}

/// A partition's directory on a node's disk (`None` before it has a file).
fn partition_dir(storage: &SimStorage, partition: u32) -> Option<std::path::PathBuf> {
    let name = partition.to_string();
    storage.paths().into_iter().find_map(|path| {
        let parts: Vec<_> = path.iter().collect();
        let at = parts.windows(2).position(|pair| pair[0] == "partitions" && pair[1] == name.as_str())?;
        Some(parts[..at + 2].iter().collect())
    })
}

/// A replica whose disk fails under a partition while a purge's reset commits cannot
/// empty its copy then; once the disk works again it empties it on its own, without a
/// restart, and serves what was sent after the purge (it served nothing, and dropped those
/// sends as ones it held already, until it was restarted).
#[test]
fn a_replica_that_could_not_empty_a_purged_copy_empties_it_once_its_disk_works() {
    let mut cluster = Cluster::new(1);
    let (stream, _) = cluster.topic_everywhere("bad", None);
    let mut topic = numeric(stream);
    topic.extend_from_slice(&numeric(0));
    cluster.send_round(stream, "first");
    cluster.send_round(stream, "second");

    let storage = cluster.nodes[2].storage.clone();
    storage.fail_under(&partition_dir(&storage, 0).expect("partition 0's files"), std::io::ErrorKind::Other);
    cluster.frozen.set(true);
    for node in 0..2 {
        cluster.call(node, operation::PURGE_TOPIC, 0, &topic).unwrap_or_else(|s| panic!("node {node}: {s}"));
    }
    assert!(storage.failed_calls() > 0, "node 2 tried to empty its copy while its disk failed");
    storage.heal();
    cluster.call(2, operation::PURGE_TOPIC, 0, &topic).expect("node 2 applies the purge");
    cluster.frozen.set(false);

    cluster.send_round(stream, "after the purge");
    let want = expected(&["after the purge"]);
    for node in 0..NODES {
        catches_up(&mut cluster, node, stream, &want, "after the disk healed");
    }
}

/// A node that ran without its partition group and stored messages the group has no
/// record of brings them into the group when it starts with it again, here even though that
/// partition's files could not be opened at that start (a disk error) and the check ran
/// once they opened: a send through it proposes its copy first, the group adopts it, the
/// other nodes fetch its batches, and the send goes on after them.
#[test]
fn a_partition_written_outside_its_group_is_brought_into_it_when_it_opens_late() {
    let mut cluster = Cluster::new(1);
    let (stream, _) = cluster.topic_everywhere("outside", None);
    cluster.kill(2, false);
    let storage = cluster.nodes[2].storage.clone();
    {
        let (shards, _) =
            start_on(&storage, config(), &cluster.clock, 1, cluster.pool, Jitter::default()).expect("start");
        let mut client = Client::login(&shards[0]);
        let body = send_body(stream, 0, &[b"outside the group"]).0;
        client.call(operation::SEND_MESSAGES, 0, &body).expect("a send without the group");
        cluster.drive(shards[0].flush_all()).expect("flush");
    }
    // The next start writes the `created_at` marker again, which fails under a failing disk.
    let dir = partition_dir(&storage, 0).expect("partition 0's files");
    cluster.drive(rill_application::ports::Storage::remove_file(&storage, &dir.join("created_at"))).expect("marker");
    storage.fail_under(&dir, std::io::ErrorKind::Other);
    cluster.start(2);
    assert!(storage.failed_calls() > 0, "partition 0 could not open at the start");
    storage.heal();
    cluster.pass(2 * 1000 / TICK_MS);
    for partition in 0..PARTITIONS {
        let body = send_body(stream, partition, &[format!("after {partition}").as_bytes()]).0;
        cluster.call(2, operation::SEND_MESSAGES, 0, &body).expect("taken through node 2");
    }
    let want =
        vec![vec![(0, "outside the group".to_owned()), (1, "after 0".to_owned())], vec![(0, "after 1".to_owned())]];
    for node in 0..NODES {
        catches_up(&mut cluster, node, stream, &want, "the adopted copy");
    }
}

/// A node whose disk fails while it applies a purge cannot record (`purged_at`) that its
/// copy lags until the group's reset empties it; once the disk works it writes the record,
/// so a restart before that reset knows it (here the node's own metadata replays the purge
/// at a restart anyway; a node whose metadata checkpoint holds the purge does not).
#[test]
fn a_purge_record_a_failing_disk_kept_out_is_written_once_the_disk_works() {
    let mut cluster = Cluster::new(1);
    let (stream, _) = cluster.topic_everywhere("unrecorded", None);
    let mut topic = numeric(stream);
    topic.extend_from_slice(&numeric(0));
    cluster.send_round(stream, "first");

    // Cut off, node 2 never hears of the group's reset, so its copy stays unemptied.
    cluster.faults.borrow_mut().isolated = Some(2);
    let storage = cluster.nodes[2].storage.clone();
    let dir = partition_dir(&storage, 0).expect("partition 0's files");
    let marker = dir.join("purged_at");
    storage.fail_under(&dir, std::io::ErrorKind::Other);
    cluster.everywhere_but(operation::PURGE_TOPIC, &topic, Some(2));
    let exists = |storage: &SimStorage| cluster.drive(rill_application::ports::Storage::exists(storage, &marker));
    assert!(!exists(&storage), "the record could not be written");
    storage.heal();
    cluster.pass(2 * 1000 / TICK_MS);
    assert!(exists(&storage), "the record is written once the disk works");
    assert_eq!(cluster.served(2, stream)[0], Vec::new(), "node 2 serves nothing of the purged copy");

    // `/metrics` shows the lagging copy on node 2 alone, and every group in normal status.
    let gauges = |cluster: &Cluster, node: usize| {
        let group = &cluster.nodes[node].shards[0].shared().telemetry.groups[0];
        let lagging = group.lagging_copies.load(std::sync::atomic::Ordering::Relaxed);
        (
            group.normal.load(std::sync::atomic::Ordering::Relaxed),
            lagging,
            group.commit.load(std::sync::atomic::Ordering::Relaxed),
        )
    };
    let (normal, lagging, commit) = gauges(&cluster, 0);
    assert!(normal && lagging == 0 && commit > 0, "node 0: normal {normal}, lagging {lagging}, commit {commit}");
    assert_eq!(gauges(&cluster, 2).1, 2, "both of node 2's copies lag the topic's purge");
    cluster.faults.borrow_mut().isolated = None;
    cluster.send_round(stream, "after");
    catches_up(&mut cluster, 2, stream, &expected(&["after"]), "back on the plane");
    cluster.pass(2);
    assert_eq!(gauges(&cluster, 2).1, 0, "node 2 caught up");
}

fn group_dir(storage: &SimStorage) -> Option<std::path::PathBuf> {
    let journal = storage.paths().into_iter().find(|path| path.ends_with("groups/0/journal.wal"));
    journal.and_then(|path| path.parent().map(std::path::Path::to_path_buf))
}

/// Sends one message per partition through `node`, each named `<label> <partition>`; the
/// status of each.
fn send_round_through(cluster: &mut Cluster, node: u8, stream: u32, label: &str) -> Vec<Result<(), u32>> {
    (0..PARTITIONS)
        .map(|partition| {
            let body = send_body(stream, partition, &[format!("{label} {partition}").as_bytes()]).0;
            cluster.call(node, operation::SEND_MESSAGES, 0, &body).map(drop)
        })
        .collect()
}

/// `failing`'s group journal cannot be written (a full disk): its replica halts and its
/// node refuses sends through it while the other two go on (after a view change, when it
/// was the primary). Once the disk works the group opens again from its files without a
/// restart, recovers from its peers, catches up and takes sends again.
fn a_group_whose_journal_failed_opens_again_once_its_disk_works(failing: u8) {
    let mut cluster = Cluster::new(1);
    let (stream, _) = cluster.topic_everywhere("journal", None);
    cluster.send_round(stream, "first");
    let storage = cluster.nodes[failing as usize].storage.clone();
    storage.fail_under(&group_dir(&storage).expect("group 0's journal"), std::io::ErrorKind::StorageFull);
    let other = (failing + 1) % NODES;
    let halted = |cluster: &Cluster| {
        let gauges = &cluster.nodes[failing as usize].shards[0].shared().telemetry.groups[0];
        gauges.halted.load(std::sync::atomic::Ordering::Relaxed)
    };
    // The first send through the failing node may be the one its journal refuses.
    let _ = send_round_through(&mut cluster, failing, stream, "maybe");
    cluster.pass(2);
    assert!(storage.failed_calls() > 0 && halted(&cluster), "the journal write failed and the group halted");
    assert_eq!(send_round_through(&mut cluster, failing, stream, "refused"), [Err(13000), Err(13000)]);
    for _ in 0..40 {
        if send_round_through(&mut cluster, other, stream, "second").iter().all(Result::is_ok) {
            break;
        }
        cluster.pass(10);
    }
    cluster.pass(8 * 1000 / TICK_MS);
    assert!(halted(&cluster), "still halted while the disk fails");

    storage.heal();
    cluster.pass(6 * 1000 / TICK_MS);
    assert!(!halted(&cluster), "the group opened again");
    assert_eq!(send_round_through(&mut cluster, failing, stream, "third"), [Ok(()), Ok(())]);
    let served = cluster.served(other, stream);
    for (partition, held) in served.iter().enumerate() {
        let labels: Vec<&str> = held.iter().map(|(_, payload)| payload.rsplit_once(' ').unwrap().0).collect();
        let without_maybe: Vec<&str> = labels.iter().copied().filter(|label| *label != "maybe").collect();
        assert_eq!(without_maybe, ["first", "second", "third"], "partition {partition}: {labels:?}");
    }
    for node in 0..NODES {
        catches_up(&mut cluster, node, stream, &served, "after the journal opened again");
    }
}

#[test]
fn a_backup_whose_journal_failed_opens_again_once_its_disk_works() {
    a_group_whose_journal_failed_opens_again_once_its_disk_works(1);
}

#[test]
fn a_primary_whose_journal_failed_opens_again_once_its_disk_works() {
    a_group_whose_journal_failed_opens_again_once_its_disk_works(0);
}

/// A group replica that halts itself (here: a checkpoint on its disk whose state does not
/// restore, as a damaged or a newer version's would) stops only its group on that node,
/// where the process used to abort: the node starts, refuses sends through the group with an
/// I/O error, serves what its partitions hold, counts the halt, and the other nodes go on.
#[test]
fn a_group_replica_that_halts_itself_stops_only_its_group() {
    let mut cluster = Cluster::new(1);
    let (stream, _) = cluster.topic_everywhere("halting", None);
    cluster.send_round(stream, "first");
    catches_up(&mut cluster, 2, stream, &expected(&["first"]), "before the halt");
    let node_2 = cluster.nodes[2].shards[0].clone();
    cluster.drive(node_2.flush_all()).expect("flush");
    cluster.kill(2, false);
    let storage = cluster.nodes[2].storage.clone();
    let dir = group_dir(&storage).expect("group 0's journal");
    cluster.drive(async {
        let (mut journal, _) = VsrJournal::open(&storage, &dir, true).await.expect("the journal opens");
        let checkpoint = Checkpoint { op: 1, checksum: 7, timestamp: 1, state: b"no state of this version".to_vec() };
        journal.write_checkpoint(&storage, &checkpoint).await.expect("written");
    });
    cluster.start(2);
    let telemetry = &cluster.nodes[2].shards[0].shared().telemetry;
    let halted = telemetry.groups[0].halted.load(std::sync::atomic::Ordering::Relaxed);
    let halts = telemetry.replica_halts.load(std::sync::atomic::Ordering::Relaxed);
    assert!(halted && halts == 1, "the group halted on node 2 (halted {halted}, counted {halts})");
    assert_eq!(send_round_through(&mut cluster, 2, stream, "refused"), [Err(13000), Err(13000)]);
    assert_eq!(cluster.served(2, stream), expected(&["first"]), "node 2 still serves what it holds");
    cluster.send_round(stream, "second");
    catches_up(&mut cluster, 1, stream, &expected(&["first", "second"]), "the others go on");
}
