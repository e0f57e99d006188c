//! A shard's partition group (docs/vsr.md, "Partition groups"). With `[cluster]
//! replicate_partitions`, shard `s` of every node runs a replica of group `s`, which carries
//! the partitions the Murmur3 rule gives shard `s` (the same on every node that runs the
//! same shard count). A send to one of them becomes an op of the group and is answered once
//! it commits; every replica writes each committed send into its partition log at the
//! offset the group assigned. A node whose replica is not the primary forwards the send to
//! the one that is and waits for its reply. The group's state sits behind one lock, its
//! pump: calls into the replica and the effects they ask for run under it, in order.

use std::sync::atomic::Ordering::Relaxed;

use rill_domain::Namespace;
use rill_domain::error::ErrorCode;
use rill_domain::vsr::{Message, Status};

use super::core::{GroupCore, Reach, reply_result};
use super::gaps::CHECK_TICKS;
use super::lanes::Lanes;
use super::records::PeerBatches;
use crate::partitions::{Partition, PartitionStore};
use crate::ports::{Env, ReplicaNetwork};
use crate::replication::{JournalError, Membership, Replication, TICK_MS, group_options};

/// A send not committed within this many ticks (10 s) is answered "not committed": the
/// client may retry, and the send may still commit, once.
const COMMIT_TIMEOUT_TICKS: u64 = 10_000 / TICK_MS;
/// How long the primary's answer to a forwarded op waits for this node's own commit (1 s).
const HOLD_TICKS: u64 = 1_000 / TICK_MS;
/// How long a request handed to the primary waits for its answer before it goes again (1 s).
pub(super) const RESEND_TICKS: u64 = 1_000 / TICK_MS;

/// One shard's replica of its partition group and what drives it.
pub struct PartitionGroup<E: Env> {
    /// The group's state; its lock is the pump.
    pub(super) core: async_lock::Mutex<GroupCore<E>>,
    pub(super) network: Box<dyn ReplicaNetwork>,
    pub(super) membership: Membership,
    pub(super) lanes: Lanes,
}

impl<E: Env> PartitionGroup<E> {
    /// Opens this shard's replica of its partition group from `<data>/groups/<shard>/` and
    /// carries out what opening asks (a restarted replica replays its committed sends into
    /// the partitions, which must be open already). `seed` must differ per process start.
    pub async fn open(
        store: &PartitionStore<E>,
        membership: Membership,
        network: Box<dyn ReplicaNetwork>,
        seed: u64,
    ) -> Result<Self, JournalError> {
        let dir = store.data_path().join("groups").join(store.shard_id().to_string());
        let fresh = !crate::ports::Storage::exists(&store.storage, &dir.join("superblock")).await;
        let (replication, effects) = open_replication(store, membership, seed).await?;
        let Replication { replica, journal, .. } = replication;
        let mut core = GroupCore::new(replica.into_inner(), journal.into_inner(), seed);
        core.born_at = group_birth(store, &dir, fresh).await;
        let lanes = Lanes::new(seed, membership.replica_id);
        let group = Self { core: async_lock::Mutex::new(core), network, membership, lanes };
        {
            let mut core = group.core.lock().await;
            let reach = group.reach(store);
            for (namespace, _) in store.owned_partitions() {
                core.adopt_copy(&reach, namespace).await;
            }
            core.carry_out(&reach, effects).await;
            core.note_journaled_resets();
            core.note_unrecorded_partitions(&reach).await;
            core.publish_health(&reach);
        }
        Ok(group)
    }

    pub(super) fn reach<'a>(&'a self, store: &'a PartitionStore<E>) -> Reach<'a, E> {
        Reach { store, network: self.network.as_ref(), membership: self.membership }
    }

    /// A message from a peer's replica of this shard's group.
    pub async fn on_message(&self, store: &PartitionStore<E>, message: Message) {
        let reach = self.reach(store);
        match &message {
            Message::Reply { client_id, request_number, reply } => {
                let mut core = self.core.lock().await;
                match reply_result(reply) {
                    // Sent to a replica that is no primary: the next tick sends it on again.
                    Err(ErrorCode::TransientNotAccepted) => core.resend_later(*client_id, *request_number),
                    // Committed: answered by this node's own commit of it, which follows.
                    result @ Ok(_) => core.hold(*client_id, *request_number, result),
                    result => core.answer(*client_id, *request_number, result),
                }
                return;
            }
            Message::RequestBatches { replica, partition, incarnation, from_offset, to_offset } => {
                let range = (*from_offset, *to_offset);
                return self.serve_batches(store, *replica, (*partition, *incarnation), range).await;
            }
            Message::Batches { replica, partition, incarnation, from_offset, log_start, batches } => {
                let mut core = self.core.lock().await;
                let (peer, key, incarnation, from_offset) = (*replica, *partition, *incarnation, *from_offset);
                let answer = PeerBatches { peer, key, incarnation, from_offset, log_start: *log_start, bytes: batches };
                core.receive_batches(&reach, answer).await;
                return core.retry_blocked(&reach).await;
            }
            _ => {}
        }
        let now = store.now_us();
        let mut core = self.core.lock().await;
        core.drive(&reach, |replica, effects| replica.on_message(now, message, effects)).await;
    }

    /// One tick of the group's replica (every `TICK_MS`); also retries blocked sends,
    /// chases gaps and repairs, and expires sends that waited too long for a quorum.
    pub async fn tick(&self, store: &PartitionStore<E>) {
        let reach = self.reach(store);
        let mut core = self.core.lock().await;
        core.ticks += 1;
        let tick = core.ticks;
        core.reopen_halted(&reach).await;
        core.retry_blocked(&reach).await;
        if tick % CHECK_TICKS == 0 {
            core.adopt_incarnations(&reach).await;
            if core.blocked.is_empty() {
                core.find_gaps(&reach).await;
                core.sync_offsets(&reach).await;
                core.adopt_log_starts(&reach, true).await;
            }
        }
        core.chase_gaps(&reach).await;
        core.chase_repairs(&reach);
        let now = store.now_us();
        core.drive(&reach, |replica, effects| replica.tick(now, effects)).await;
        core.fail_waiters(ErrorCode::TransientNotCommitted, |w| match w.held {
            Some((_, held_since)) => tick - held_since < HOLD_TICKS,
            None => tick - w.since_tick < COMMIT_TIMEOUT_TICKS,
        });
        // A request handed to a primary that has since been replaced goes to the new one,
        // and one unanswered for a second goes again (same client id and number: the client
        // table answers it once however often it arrives), so a failover or a lost message
        // costs a view change or a second, not the commit timeout.
        let view = core.replica.view();
        let stale: Vec<u128> = core
            .waiters
            .iter()
            .filter(|(_, w)| w.held.is_none() && (w.sent_in != Some(view) || tick - w.sent_tick >= RESEND_TICKS))
            .map(|(c, _)| *c)
            .collect();
        for client_id in stale {
            core.hand_to_primary(&reach, client_id).await;
        }
        core.publish_health(&reach);
    }

    /// A partition opened after its group, before it is served (one created since, or one
    /// whose files could not be opened when the node started): its incarnations read, and
    /// what the group's opening checks of the others, the journal's resets and messages
    /// written outside the group, checked for it.
    pub(crate) async fn opened(
        &self,
        store: &PartitionStore<E>,
        namespace: Namespace,
        partition: &Partition<E::Storage>,
    ) {
        let reach = self.reach(store);
        let mut core = self.core.lock().await;
        core.adopt_copy(&reach, namespace).await;
        core.check_late_partition(&reach, namespace, partition).await;
    }

    /// A partition removed here: its copy is forgotten (a later one with its ids is new).
    pub(crate) async fn removed(&self, namespace: Namespace) {
        self.core.lock().await.copies.remove(&namespace);
    }

    /// Whether this node's copy of the partition lags its incarnation and serves nothing.
    pub(crate) async fn behind(&self, namespace: Namespace) -> bool {
        self.core.lock().await.behind(namespace)
    }

    /// A damaged batch found here: an intact copy is asked of the peers.
    pub(crate) async fn repair(
        &self,
        store: &PartitionStore<E>,
        namespace: Namespace,
        damaged: &crate::partition::DamagedBatch,
    ) {
        let reach = self.reach(store);
        self.core.lock().await.ask_repair(&reach, namespace, damaged);
    }

    /// Writes purge records a disk error kept from being written (every second).
    pub(crate) async fn record_purges(&self, store: &PartitionStore<E>) {
        let reach = self.reach(store);
        self.core.lock().await.record_purges(&reach).await;
    }

    /// The group's view and primary, and whether it runs normally, as last published (once
    /// a tick).
    pub fn role(&self, store: &PartitionStore<E>) -> Option<(u32, u8, bool)> {
        let gauges = store.shared.telemetry.groups.get(usize::from(store.shard_id()))?;
        gauges
            .open
            .load(Relaxed)
            .then(|| (gauges.view.load(Relaxed), gauges.primary.load(Relaxed) as u8, gauges.normal.load(Relaxed)))
    }
}

impl<E: Env> GroupCore<E> {
    /// Publishes the group's health for `/metrics`: its view, primary, status, commit
    /// number, whether it halted, and how many of this node's copies lag their peers.
    pub fn publish_health(&self, reach: &Reach<'_, E>) {
        let store = reach.store;
        let Some(gauges) = store.shared.telemetry.groups.get(usize::from(store.shard_id())) else { return };
        let owned = store.owned_partitions().into_iter();
        let lagging = owned.filter(|(ns, _)| self.gaps.contains_key(ns) || self.behind(*ns)).count();
        gauges.lagging_copies.store(lagging as u32, Relaxed);
        gauges.halted.store(self.halted.is_some(), Relaxed);
        let replica = &self.replica;
        gauges.view.store(replica.view(), Relaxed);
        gauges.primary.store(u32::from(replica.primary_index(replica.view())), Relaxed);
        gauges.normal.store(replica.status() == Status::Normal, Relaxed);
        gauges.commit.store(replica.commit(), Relaxed);
        gauges.open.store(true, Relaxed);
    }
}

/// This shard's replica of its partition group, opened from `<data>/groups/<shard>/` with
/// the effects of opening, none carried out yet.
pub(super) async fn open_replication<E: Env>(
    store: &PartitionStore<E>,
    membership: Membership,
    seed: u64,
) -> Result<(Replication<E::Storage, crate::replication::GroupMachine>, Vec<rill_domain::vsr::Effect>), JournalError> {
    let shard = store.shard_id();
    let dir = store.data_path().join("groups").join(shard.to_string());
    let options = group_options(shard, membership.replica_count);
    let machine = crate::replication::GroupMachine::default();
    Replication::open_with(&store.storage, &dir, membership, seed, options, machine).await
}

/// The marker of when this node's replica of a group was first created.
const BORN_AT_MARKER: &str = "born_at";

/// When this node's replica of the group in `dir` was first created: written now when the
/// group is `fresh`, else read back (0 for a group from before the marker).
async fn group_birth<E: Env>(store: &PartitionStore<E>, dir: &std::path::Path, fresh: bool) -> u64 {
    let path = dir.join(BORN_AT_MARKER);
    if !fresh {
        return crate::partitions::markers::read_marker(&store.storage, &path).await.unwrap_or(0);
    }
    let now = store.now_us();
    if let Err(error) = crate::partitions::markers::write_marker(&store.storage, dir, &path, now).await {
        tracing::warn!(%error, path = %path.display(), "cannot record when the partition group was created");
    }
    now
}
