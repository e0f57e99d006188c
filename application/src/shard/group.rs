//! A shard's partition group (docs/vsr.md, "Partition groups"). With
//! `[cluster] replicate_partitions`, shard `s` of every node runs a replica of group `s`,
//! which carries the partitions the Murmur3 rule gives shard `s` (the same on every node
//! that runs the same shard count). A send to one of them becomes an op of the group and is
//! answered once it commits; every replica, the primary included, writes each committed send
//! into its partition log at the offset the group assigned, stamped with the primary's time.
//! A node whose replica is not the primary forwards the send to the one that is and waits
//! for its reply. Calls into the replica run under one pump lock, and their effects are
//! carried out one at a time, in order: a commit is in its partition's journal before the
//! next effect, and a checkpoint is stored only once every batch it covers is on disk.

use std::cell::{Cell, OnceCell, RefCell};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io;
use std::rc::Rc;
use std::sync::atomic::Ordering;

use futures_channel::oneshot;
use rill_domain::Namespace;
use rill_domain::batch::BatchHeader;
use rill_domain::error::ErrorCode;
use rill_domain::partition_group;
use rill_domain::vsr::{Checkpoint, ENTRY_BODY_MAX, Effect, Entry, Message, Replica, Status};
use rill_domain::wire::codes::operation;
use rill_domain::wire::response;

use super::group_reopen::Halt;
use super::group_transfer::{CHECK_TICKS, Gaps, PeerBatches, Repairs};
use super::maintenance::namespace_label;
use super::{Partition, Shard};
use crate::memory_pool::PoolSlice;
use crate::partition::ConsumerKey;
use crate::ports::{Env, ReplicaNetwork, ShardReply};
use crate::replication::{GroupMachine, JournalError, Membership, Replication, TICK_MS};

/// Sends of one shard in its group's pipeline at once, each on a lane: a client id of its
/// own, since the replica admits one request per client at a time.
const LANES: u8 = 4;
/// A send not committed within this many ticks (10 s) is answered "not committed": the
/// client may retry, and the send may still commit, once.
const COMMIT_TIMEOUT_TICKS: u64 = 10_000 / TICK_MS;
/// How long a committed send waits for its partition to open here (5 s): the topic's
/// creation commits in the metadata log, which this node may apply a little later.
const APPLY_WAIT_TICKS: u64 = 5_000 / TICK_MS;
/// How long a request handed to the primary waits for its answer before it goes again (1 s).
const RESEND_TICKS: u64 = 1_000 / TICK_MS;
/// How long the primary's answer to a forwarded op waits for this node's own commit (1 s).
const HOLD_TICKS: u64 = 1_000 / TICK_MS;

struct Waiter {
    request_number: u64,
    since_tick: u64,
    operation: u8,
    body: Vec<u8>,
    /// The view the request was last handed to a primary in (none yet: no view was normal).
    sent_in: Option<u32>,
    /// The tick it was last handed on: unanswered for `RESEND_TICKS`, it goes again (the
    /// message, or the primary's answer, may have been lost with a connection).
    sent_tick: u64,
    /// The base offset of a send, nothing for an offset store or delete.
    reply: oneshot::Sender<Result<Option<u64>, ErrorCode>>,
    /// The primary's answer to a forwarded op and the tick it came: the client gets it once
    /// this node applied the op too (so a poll here right after sees the send), or after
    /// `HOLD_TICKS` when this copy lags.
    held: Option<(Result<Option<u64>, ErrorCode>, u64)>,
}

/// What a committed op asks of its partition on this node.
#[derive(Debug, Clone, Copy)]
enum Applying {
    /// A send the group gave this partition key and base offset, in an incarnation.
    Send(u64, u64, u64),
    /// A consumer offset stored or deleted, in an incarnation.
    Offset(u64),
    /// A reset that started the partition again.
    Reset,
    /// Sealed segments ending at or below an offset go, in an incarnation.
    DeleteSegments(u64),
    Nothing,
}

/// A committed op waiting for its partition, with what it asks of it.
pub(super) struct Blocked {
    entry: Entry,
    applying: Applying,
    since_tick: u64,
}

/// One shard's replica of its partition group and what drives it.
pub struct PartitionGroup<E: Env> {
    pub(super) replication: Replication<E::Storage, GroupMachine>,
    pub(super) network: Box<dyn ReplicaNetwork>,
    pub(super) pump: async_lock::Mutex<()>,
    /// Client ids: random high bits, this node's replica id, then the lane.
    lanes: RefCell<Vec<u128>>,
    lane_free: async_lock::Semaphore,
    waiters: RefCell<BTreeMap<u128, Waiter>>,
    next_request: Cell<u64>,
    pub(super) ticks: Cell<u64>,
    /// Committed sends whose partition is not open here yet, oldest first: later commits
    /// wait behind them, so each partition's batches are written in commit order.
    pub(super) blocked: RefCell<VecDeque<Blocked>>,
    /// Partitions written since the last checkpoint.
    pub(super) dirty: RefCell<BTreeSet<Namespace>>,
    /// Partitions whose logs lack batches the group committed, being fetched from peers.
    pub(super) gaps: RefCell<Gaps>,
    /// Partitions whose stored consumer offsets a committed op could not change here (a disk
    /// error): made what the group's state says again every second until it works.
    pub(super) unsynced_offsets: RefCell<BTreeSet<Namespace>>,
    /// Damaged stored batches whose intact copies are asked of peers.
    pub(super) repairs: RefCell<Repairs>,
    /// Why the replica is not driven (`group_reopen::Halt`).
    pub(super) halted: Cell<Option<Halt>>,
    /// The seed of the replica's last opening; a reopening derives a new one from it.
    pub(super) seed: Cell<u64>,
}

/// Which node a lane's client id belongs to.
fn lane_node(client_id: u128) -> u8 {
    (client_id >> 8) as u8
}

impl<E: Env> PartitionGroup<E> {
    pub(super) fn replica(&self) -> std::cell::RefMut<'_, Replica<GroupMachine>> {
        self.replication.replica.borrow_mut()
    }

    fn answer(&self, client_id: u128, request_number: u64, result: Result<Option<u64>, ErrorCode>) {
        let mut waiters = self.waiters.borrow_mut();
        if waiters.get(&client_id).is_some_and(|w| w.request_number == request_number)
            && let Some(waiter) = waiters.remove(&client_id)
        {
            // A commit here that lost its outcome (a restored checkpoint) does not undo the
            // primary's answer.
            let result = match (waiter.held, result) {
                (Some((held, _)), Err(_)) => held,
                (_, result) => result,
            };
            let _ = waiter.reply.send(result);
        }
    }

    /// Keeps the primary's successful answer until this node's own commit answers it.
    fn hold(&self, client_id: u128, request_number: u64, result: Result<Option<u64>, ErrorCode>) {
        if let Some(waiter) =
            self.waiters.borrow_mut().get_mut(&client_id).filter(|w| w.request_number == request_number)
        {
            waiter.held.get_or_insert((result, self.ticks.get()));
        }
    }

    /// Marks a waiting request as not handed to any primary, so the next tick sends it.
    fn resend_later(&self, client_id: u128, request_number: u64) {
        if let Some(waiter) =
            self.waiters.borrow_mut().get_mut(&client_id).filter(|w| w.request_number == request_number)
        {
            waiter.sent_in = None;
        }
    }

    /// Sends the prepares among `effects` first: the primary's own journal write then overlaps
    /// the backups' (it counts its own vote once written). Every other effect keeps its order
    /// (a view-change message must follow the superblock write before it).
    fn send_prepares_first(&self, effects: &mut VecDeque<Effect>) {
        let sends = |kind: fn(&Message) -> bool| {
            effects.iter().any(|e| matches!(e, Effect::Send { message, .. } if kind(message)))
        };
        // A new primary's prepares follow its StartView, or backups would ask for the view.
        if !sends(|m| matches!(m, Message::Prepare { .. })) || sends(|m| matches!(m, Message::StartView { .. })) {
            return;
        }
        effects.retain(|effect| match effect {
            Effect::Send { to, message: message @ Message::Prepare { .. } } => {
                self.network.send(*to, message.clone());
                false
            }
            _ => true,
        });
    }

    /// Answers every waiter `keep` refuses: with `code`, or with the primary's answer when
    /// one is held (the op committed).
    fn fail_waiters(&self, code: ErrorCode, keep: impl Fn(&Waiter) -> bool) {
        let mut waiters = self.waiters.borrow_mut();
        let failed: Vec<u128> = waiters.iter().filter(|(_, w)| !keep(w)).map(|(c, _)| *c).collect();
        for client_id in failed {
            if let Some(waiter) = waiters.remove(&client_id) {
                let _ = waiter.reply.send(waiter.held.map_or(Err(code), |(result, _)| result));
            }
        }
    }
}

/// Where a group op's partition is on this node.
pub(super) enum Target<S: crate::ports::Storage> {
    Open(Namespace, Rc<Partition<S>>),
    /// Not open yet: its creation may still be on its way through the metadata log.
    NotOpen,
    /// Never here: a malformed key, or a partition another shard owns.
    Nowhere,
}

/// A partition open on this shard, with its name.
type OpenPartition<S> = (Namespace, Rc<Partition<S>>);

/// Gives a lane back however its send ends (answered, timed out, or dropped).
struct Lane<'a> {
    lanes: &'a RefCell<Vec<u128>>,
    client_id: u128,
    _permit: async_lock::SemaphoreGuard<'a>,
}

impl Drop for Lane<'_> {
    fn drop(&mut self) {
        self.lanes.borrow_mut().push(self.client_id);
    }
}

/// What a group reply says: a send's base offset, nothing for another op that succeeded, or
/// the error its status names (of the few a group's reply carries).
fn reply_result(reply: &[u8]) -> Result<Option<u64>, ErrorCode> {
    if let Some((_, base_offset)) = partition_group::parse_send_reply(reply) {
        return Ok(Some(base_offset));
    }
    let status = reply.first_chunk::<4>().map(|b| u32::from_le_bytes(*b));
    if status == Some(0) {
        return Ok(None);
    }
    let known = [
        ErrorCode::TransientNotAccepted,
        ErrorCode::InvalidFormat,
        ErrorCode::InvalidCommand,
        ErrorCode::ConsumerOffsetNotFound,
    ];
    Err(known.into_iter().find(|code| Some(code.code()) == status).unwrap_or(ErrorCode::InvalidMessagesCount))
}

/// A consumer key as the group's ops name it: kind 1 a consumer, 2 a consumer group.
fn consumer_kind(key: ConsumerKey) -> (u8, u32) {
    match key {
        ConsumerKey::Consumer(id) => (1, id),
        ConsumerKey::Group(id) => (2, id),
    }
}

/// The consumer key a group op's `(kind, id)` names.
pub(super) fn consumer_key_of((kind, id): (u8, u32)) -> ConsumerKey {
    if kind == 2 { ConsumerKey::Group(id) } else { ConsumerKey::Consumer(id) }
}

/// Whether an op committed in `incarnation` belongs to one this copy has left behind: a
/// restart replays sends made before a purge or recreation it applied already (not made).
pub(super) fn superseded<S: crate::ports::Storage>(partition: &Partition<S>, incarnation: u64) -> bool {
    incarnation < partition.incarnation.get()
}

impl<E: Env> Shard<E> {
    pub(super) fn group(&self) -> Option<&PartitionGroup<E>> {
        self.group.get()
    }

    /// Opens this shard's replica of its partition group from `<data>/groups/<shard>/` and
    /// carries out what opening asks (a restarted replica replays its committed sends into
    /// the partitions, which must be open already). `seed` must differ per process start.
    pub async fn open_group(
        &self,
        membership: Membership,
        network: Box<dyn ReplicaNetwork>,
        seed: u64,
    ) -> Result<(), JournalError> {
        let (replication, effects) = self.open_group_replication(membership, seed).await?;
        let base = (rand_high(seed) << 16) | u128::from(membership.replica_id) << 8;
        let group = PartitionGroup {
            replication,
            network,
            pump: async_lock::Mutex::new(()),
            lanes: RefCell::new((0..LANES).map(|lane| base | u128::from(lane)).collect()),
            lane_free: async_lock::Semaphore::new(LANES as usize),
            waiters: RefCell::new(BTreeMap::new()),
            next_request: Cell::new(0),
            ticks: Cell::new(0),
            blocked: RefCell::new(VecDeque::new()),
            dirty: RefCell::new(BTreeSet::new()),
            unsynced_offsets: RefCell::default(),
            gaps: RefCell::new(Gaps::new()),
            repairs: RefCell::new(Repairs::new()),
            halted: Cell::new(None),
            seed: Cell::new(seed),
        };
        if self.group.set(group).is_err() {
            return Ok(());
        }
        let group = self.group().expect("just set");
        let _pump = group.pump.lock().await;
        self.carry_out_group(group, effects).await;
        self.note_journaled_resets(group);
        self.refuse_unrecorded_partitions(group).await;
        self.publish_group_health(group);
        Ok(())
    }

    /// Calls into the group's replica under the pump lock and carries out what it asks.
    async fn drive_group(
        &self,
        group: &PartitionGroup<E>,
        call: impl FnOnce(&mut Replica<GroupMachine>, &mut Vec<Effect>),
    ) {
        let _pump = group.pump.lock().await;
        if group.halted.get().is_some() {
            group.fail_waiters(ErrorCode::IoError, |_| false);
            return;
        }
        let mut effects = Vec::new();
        call(&mut group.replica(), &mut effects);
        self.carry_out_group(group, effects).await;
    }

    pub(super) async fn carry_out_group(&self, group: &PartitionGroup<E>, effects: Vec<Effect>) {
        let mut queue: VecDeque<Effect> = effects.into();
        group.send_prepares_first(&mut queue);
        let mut installed_at = 0;
        while let Some(effect) = queue.pop_front() {
            let mut more = Vec::new();
            let written = match effect {
                Effect::Persist { entry } => {
                    let mut journal = group.replication.journal.lock().await;
                    journal.append(&entry).await.map(|()| {
                        group.replica().on_prepare_persisted(entry.op, entry.checksum, &mut more);
                    })
                }
                Effect::PersistView { superblock } => {
                    let journal = group.replication.journal.lock().await;
                    journal.write_superblock(&self.storage, &superblock).await.map(|()| {
                        group.replica().on_view_persisted(superblock.view, &mut more);
                    })
                }
                Effect::Checkpoint { checkpoint, installed } => {
                    if installed {
                        installed_at = checkpoint.op;
                    }
                    self.checkpoint_group(group, &checkpoint, installed).await
                }
                Effect::Commit { op, entry } => {
                    self.on_group_commit(group, op, entry).await;
                    Ok(())
                }
                // Not while commits wait behind a gap: an installer could drop a last copy (seed 12467).
                Effect::Send { to, message } => {
                    let checkpoint = matches!(message, Message::NewState { checkpoint: Some(_), .. });
                    if !checkpoint || group.blocked.borrow().is_empty() {
                        group.network.send(to, message);
                    }
                    Ok(())
                }
                // This node's own sends are answered by their commit, which follows at once,
                // once the batch is in its partition (so a poll right after sees it).
                Effect::Reply { client_id, request_number, reply } => {
                    if lane_node(client_id) != group.replication.membership.replica_id {
                        group.network.send(lane_node(client_id), Message::Reply { client_id, request_number, reply });
                    }
                    Ok(())
                }
                Effect::NotPrimary { client_id, request_number, .. } => {
                    match lane_node(client_id) == group.replication.membership.replica_id {
                        true => group.resend_later(client_id, request_number),
                        // Forwarded here in an old view: the sender hears at once, not at its timeout.
                        false => {
                            let reply = ErrorCode::TransientNotAccepted.code().to_le_bytes().to_vec();
                            group
                                .network
                                .send(lane_node(client_id), Message::Reply { client_id, request_number, reply })
                        }
                    }
                    Ok(())
                }
            };
            if let Err(error) = written {
                tracing::error!(%error, group = self.shard_id, "cannot write the partition group's journal: its sends are refused until it opens again");
                group.halted.set(Some(Halt::Journal));
                group.fail_waiters(ErrorCode::IoError, |_| false);
                return;
            }
            queue.extend(more);
            group.send_prepares_first(&mut queue);
        }
        // A checkpoint replaced the state: the offset files follow it now, the logs as soon
        // as their gaps are filled.
        if group.replica().state_machine_mut().take_restored() {
            // Waiting commits a state installed from a peer covers are in it already (made now, an
            // offset store would go back in time); a restart's own checkpoints cover nothing (10045).
            group.blocked.borrow_mut().retain(|blocked| blocked.entry.op > installed_at);
            self.adopt_incarnations(group).await;
            self.adopt_log_starts(group, false).await;
            self.adopt_group_offsets(group).await;
            if group.blocked.borrow().is_empty() {
                self.find_gaps(group).await;
            }
        }
    }

    /// Stores a checkpoint once the partitions hold every batch it covers on disk (its journal
    /// entries go with it). One installed from a peer is stored at once: the replica vouches
    /// for entries above it now (seed 406); the partitions get what it covers from peers.
    /// Nor is one stored while offset files lack a committed change: a restart replays it.
    async fn checkpoint_group(&self, group: &PartitionGroup<E>, cp: &Checkpoint, installed: bool) -> io::Result<()> {
        let waiting = !group.blocked.borrow().is_empty() || !group.unsynced_offsets.borrow().is_empty();
        if !installed && waiting {
            return Ok(());
        }
        let dirty: Vec<Namespace> = group.dirty.borrow().iter().copied().collect();
        for namespace in dirty {
            let Ok(partition) = self.owned(namespace) else { continue };
            let mut log = partition.log.lock().await;
            let flushed = match log.flush(&self.storage, true).await {
                Ok(()) => log.offsets.sync_durably(&self.storage).await,
                failed => failed,
            };
            partition.refresh(&log);
            if let Err(error) = flushed {
                tracing::warn!(%error, installed, partition = %namespace_label(namespace), "a partition cannot be flushed for a group checkpoint");
                if !installed {
                    return Ok(());
                }
                continue;
            }
            group.dirty.borrow_mut().remove(&namespace);
        }
        group.replication.journal.lock().await.write_checkpoint(&self.storage, cp).await
    }

    /// One committed op: a send or an offset change is made in its partition (or waits for
    /// it to open); a forwarded op's node learns its outcome here if the primary's reply
    /// was lost.
    async fn on_group_commit(&self, group: &PartitionGroup<E>, op: u64, entry: Entry) {
        let outcome = group.replica().state_machine_mut().take_outcome(op);
        let result = outcome.map_or(Err(ErrorCode::TransientNotCommitted), |o| o.result);
        if let Ok(assigned) = result {
            let incarnation = outcome.map_or(0, |o| o.incarnation);
            let applying = match (entry.operation, assigned) {
                (operation::SEND_MESSAGES, Some((key, base_offset))) => Applying::Send(key, base_offset, incarnation),
                (operation::STORE_CONSUMER_OFFSET | operation::DELETE_CONSUMER_OFFSET, _) => {
                    Applying::Offset(incarnation)
                }
                (operation::RESET_PARTITION, _) if outcome.is_some_and(|o| o.reset) => Applying::Reset,
                (operation::DELETE_SEGMENTS, _) => Applying::DeleteSegments(incarnation),
                _ => Applying::Nothing,
            };
            let waiting = !group.blocked.borrow().is_empty();
            if waiting || !self.apply_committed(group, &entry, applying).await {
                let since_tick = group.ticks.get();
                group.blocked.borrow_mut().push_back(Blocked { entry: entry.clone(), applying, since_tick });
            }
        }
        group.answer(entry.client_id, entry.request_number, result.map(|a| a.map(|(_, base)| base)));
    }

    /// Makes one committed op in its partition; false while the partition is not open here.
    async fn apply_committed(&self, group: &PartitionGroup<E>, entry: &Entry, applying: Applying) -> bool {
        match applying {
            Applying::Send(key, base_offset, incarnation) => {
                self.apply_send(group, entry, (key, base_offset), incarnation).await
            }
            Applying::Offset(incarnation) => self.apply_offset(group, entry, incarnation).await,
            Applying::Reset => self.apply_reset(group, entry).await,
            Applying::DeleteSegments(incarnation) => self.apply_delete_segments(group, entry, incarnation).await,
            Applying::Nothing => true,
        }
    }

    /// Where the partition a group op names is on this node.
    pub(super) fn group_partition(&self, key: u64) -> Target<E::Storage> {
        let Some(namespace) = Namespace::from_packed(key) else { return Target::Nowhere };
        if namespace.shard(self.shared.shard_count) != self.shard_id {
            tracing::error!(partition = %namespace_label(namespace), group = self.shard_id, "a partition group carries a partition another shard owns here: every node must run the same shard count");
            return Target::Nowhere;
        }
        match self.owned(namespace) {
            Ok(partition) => Target::Open(namespace, partition),
            Err(_) => Target::NotOpen,
        }
    }

    /// The open partition a committed op names, or what applying the op returns without
    /// it: false while it is not open here yet, true when it never will be.
    pub(super) fn commit_target(&self, key: u64) -> Result<OpenPartition<E::Storage>, bool> {
        match self.group_partition(key) {
            Target::Open(namespace, partition) => Ok((namespace, partition)),
            Target::NotOpen => Err(false),
            Target::Nowhere => Err(true),
        }
    }

    /// Stores or deletes a committed consumer offset.
    async fn apply_offset(&self, group: &PartitionGroup<E>, entry: &Entry, incarnation: u64) -> bool {
        let Some((key, (kind, id), offset)) = partition_group::parse_offset_body(&entry.body) else { return true };
        let (namespace, partition) = match self.commit_target(key) {
            Ok(found) => found,
            Err(done) => return done,
        };
        let consumer = consumer_key_of((kind, id));
        if !self.start_again(group, namespace, &partition, incarnation).await {
            group.unsynced_offsets.borrow_mut().insert(namespace);
            return true;
        }
        let mut log = partition.log.lock().await;
        if partition.closed.get() || superseded(&partition, incarnation) {
            return true;
        }
        let result = match (entry.operation, offset) {
            (operation::STORE_CONSUMER_OFFSET, Some(offset)) => {
                let fsync = log.settings.consumer_offset_fsync;
                log.offsets.store(&self.storage, consumer, offset, fsync).await
            }
            _ => log.offsets.delete(&self.storage, consumer).await.map(drop),
        };
        if let Err(error) = result {
            tracing::error!(%error, partition = %namespace_label(namespace), "a committed consumer offset cannot be stored on this node (tried again every second)");
            group.unsynced_offsets.borrow_mut().insert(namespace);
        }
        partition.publish_offsets(&log);
        // The next checkpoint makes it durable before the journal entry goes.
        group.dirty.borrow_mut().insert(namespace);
        true
    }

    /// Writes one committed send into its partition; false while the partition is not open
    /// here yet.
    async fn apply_send(
        &self,
        group: &PartitionGroup<E>,
        entry: &Entry,
        (key, base_offset): (u64, u64),
        incarnation: u64,
    ) -> bool {
        let Some((_, _, batch)) = partition_group::parse_send(&entry.body) else { return true };
        let (namespace, partition) = match self.commit_target(key) {
            Ok(found) => found,
            Err(done) => return done,
        };
        if !self.start_again(group, namespace, &partition, incarnation).await {
            return true;
        }
        let mut log = partition.log.lock().await;
        if partition.closed.get() || superseded(&partition, incarnation) {
            return true;
        }
        if base_offset > log.next_offset() {
            // Offsets below it were committed while this node was too far behind to get them
            // from the journal: they come from a peer first, and this send waits for them
            // (unless no peer sent them for a minute: then it is skipped here).
            return self.gap_given_up(group, namespace, log.next_offset(), base_offset);
        }
        let stored = match self.seal(PoolSlice::plain(batch.to_vec())) {
            Ok(stored) => stored,
            Err(code) => {
                tracing::error!(%code, partition = %namespace_label(namespace), "cannot seal a committed batch");
                return true;
            }
        };
        let was_read_only = log.write_failure().is_some();
        let result = log.append_replicated(&self.storage, stored, base_offset, entry.timestamp).await;
        self.note_write(namespace, was_read_only, log.write_failure().is_some(), result.as_ref().err());
        match result {
            Ok(Some(appended)) => {
                partition.stats.appended_messages.fetch_add(u64::from(appended.stored), Ordering::Relaxed);
                partition.stats.appended_bytes.fetch_add(appended.bytes, Ordering::Relaxed);
            }
            Ok(None) => {}
            Err(error) if log.next_offset() < base_offset => {
                tracing::error!(%error, partition = %namespace_label(namespace), "a committed batch cannot be stored on this node");
            }
            // Journaled, not yet written: the retry writes it.
            Err(_) => {}
        }
        partition.refresh(&log);
        group.dirty.borrow_mut().insert(namespace);
        true
    }

    /// Writes the sends that waited for their partitions, in commit order; one that waited
    /// too long is given up on this node (logged: its partition is gone or never opened).
    async fn retry_blocked(&self, group: &PartitionGroup<E>) {
        loop {
            let Some((entry, applying, since_tick)) =
                group.blocked.borrow().front().map(|b| (b.entry.clone(), b.applying, b.since_tick))
            else {
                return;
            };
            if !self.apply_committed(group, &entry, applying).await {
                let filling = Self::op_partition(&entry.body)
                    .is_some_and(|ns| group.gaps.borrow().get(&ns).is_some_and(|gap| !gap.exhausted()));
                if filling || group.ticks.get() - since_tick < APPLY_WAIT_TICKS {
                    return;
                }
                tracing::error!(
                    op = entry.op,
                    operation = entry.operation,
                    "a committed send's partition never opened on this node; skipping it here"
                );
            }
            group.blocked.borrow_mut().pop_front();
        }
    }

    /// A message from a peer's replica of this shard's group.
    pub async fn on_group_message(&self, message: Message) {
        let Some(group) = self.group() else { return };
        match &message {
            Message::Reply { client_id, request_number, reply } => {
                match reply_result(reply) {
                    // Sent to a replica that is no primary: the next tick sends it on again.
                    Err(ErrorCode::TransientNotAccepted) => group.resend_later(*client_id, *request_number),
                    // Committed: answered by this node's own commit of it, which follows.
                    result @ Ok(_) => group.hold(*client_id, *request_number, result),
                    result => group.answer(*client_id, *request_number, result),
                }
                return;
            }
            Message::RequestBatches { replica, partition, incarnation, from_offset, to_offset } => {
                let range = (*from_offset, *to_offset);
                return self.serve_batches(group, *replica, (*partition, *incarnation), range).await;
            }
            Message::Batches { replica, partition, incarnation, from_offset, log_start, batches } => {
                let _pump = group.pump.lock().await;
                let (peer, key, incarnation, from_offset) = (*replica, *partition, *incarnation, *from_offset);
                let answer = PeerBatches { peer, key, incarnation, from_offset, log_start: *log_start, bytes: batches };
                self.receive_batches(group, answer).await;
                return self.retry_blocked(group).await;
            }
            _ => {}
        }
        let now = self.now_us();
        self.drive_group(group, |replica, effects| replica.on_message(now, message, effects)).await;
    }

    /// One tick of the group's replica (every `TICK_MS`); also retries blocked sends and
    /// expires sends that waited too long for a quorum.
    pub async fn group_tick(&self) {
        let Some(group) = self.group() else { return };
        let tick = group.ticks.get() + 1;
        group.ticks.set(tick);
        self.reopen_halted_group(group).await;
        {
            let _pump = group.pump.lock().await;
            self.retry_blocked(group).await;
            if tick % CHECK_TICKS == 0 {
                self.adopt_incarnations(group).await;
                if group.blocked.borrow().is_empty() {
                    self.find_gaps(group).await;
                    self.sync_offsets(group).await;
                    self.adopt_log_starts(group, true).await;
                }
            }
            self.chase_gaps(group).await;
            self.chase_repairs(group);
        }
        let now = self.now_us();
        self.drive_group(group, |replica, effects| replica.tick(now, effects)).await;
        group.fail_waiters(ErrorCode::TransientNotCommitted, |w| match w.held {
            Some((_, held_since)) => tick - held_since < HOLD_TICKS,
            None => tick - w.since_tick < COMMIT_TIMEOUT_TICKS,
        });
        // A request handed to a primary that has since been replaced goes to the new one,
        // and one unanswered for a second goes again (same client id and number: the client
        // table answers it once however often it arrives), so a failover or a lost message
        // costs a view change or a second, not the commit timeout.
        let view = group.replication.replica.borrow().view();
        let stale: Vec<u128> = group
            .waiters
            .borrow()
            .iter()
            .filter(|(_, w)| w.held.is_none() && (w.sent_in != Some(view) || tick - w.sent_tick >= RESEND_TICKS))
            .map(|(c, _)| *c)
            .collect();
        for client_id in stale {
            self.hand_to_primary(group, client_id).await;
        }
        self.publish_group_health(group);
    }

    /// Hands a waiting request to the current primary, when the group runs normally: this
    /// replica itself, or the primary over the plane.
    async fn hand_to_primary(&self, group: &PartitionGroup<E>, client_id: u128) {
        let (view, primary, normal) = {
            let replica = group.replication.replica.borrow();
            (replica.view(), replica.primary_index(replica.view()), replica.status() == Status::Normal)
        };
        let request = group.waiters.borrow_mut().get_mut(&client_id).filter(|_| normal).map(|waiter| {
            waiter.sent_in = Some(view);
            waiter.sent_tick = group.ticks.get();
            (waiter.request_number, waiter.operation, waiter.body.clone())
        });
        let Some((request_number, operation, body)) = request else { return };
        if primary == group.replication.membership.replica_id {
            let now = self.now_us();
            self.drive_group(group, |replica, effects| {
                replica.on_request(now, client_id, request_number, operation, body, effects)
            })
            .await;
        } else {
            group.network.send(primary, Message::Request { client_id, request_number, operation, body });
        }
    }

    /// A validated send to a partition this shard owns, through its group; answered with
    /// the offset the group assigned once it commits.
    pub(super) async fn replicate_send(
        &self,
        group: &PartitionGroup<E>,
        namespace: Namespace,
        batch: PoolSlice,
        stream_id: u32,
        topic_id: u32,
    ) -> ShardReply {
        if partition_group::SEND_PREFIX + batch.len() > ENTRY_BODY_MAX {
            return Err(ErrorCode::TooBigMessagePayload);
        }
        self.ensure_incarnation(group, namespace).await?;
        let count = BatchHeader::read(&batch).message_count;
        let body = partition_group::send_body(namespace.packed(), count, &batch);
        drop(batch);
        let base_offset = self.submit(group, operation::SEND_MESSAGES, body).await?;
        let base_offset = base_offset.ok_or(ErrorCode::InvalidMessagesCount)?;
        let mut out = Vec::new();
        response::send_confirmation(&mut out, stream_id, topic_id, namespace.partition_id(), base_offset);
        Ok(out)
    }

    /// A consumer offset store (`Some`) or delete through the group, answered once it commits.
    pub(super) async fn replicate_offset(
        &self,
        group: &PartitionGroup<E>,
        namespace: Namespace,
        key: ConsumerKey,
        offset: Option<u64>,
    ) -> ShardReply {
        self.ensure_incarnation(group, namespace).await?;
        let (operation, body) = match offset {
            Some(offset) => (
                operation::STORE_CONSUMER_OFFSET,
                partition_group::store_offset_body(namespace.packed(), consumer_kind(key), offset),
            ),
            None => (
                operation::DELETE_CONSUMER_OFFSET,
                partition_group::delete_offset_body(namespace.packed(), consumer_kind(key)),
            ),
        };
        self.submit(group, operation, body).await?;
        Ok(0u32.to_le_bytes().to_vec())
    }

    /// Submits one op: here when this replica is the primary, forwarded to the primary
    /// otherwise (again to each new primary), and waits until it commits or times out.
    pub(super) async fn submit(
        &self,
        group: &PartitionGroup<E>,
        operation: u8,
        body: Vec<u8>,
    ) -> Result<Option<u64>, ErrorCode> {
        if group.halted.get().is_some() {
            return Err(ErrorCode::IoError);
        }
        let permit = group.lane_free.acquire().await;
        let client_id = group.lanes.borrow_mut().pop().expect("a permit stands for a free lane");
        let _lane = Lane { lanes: &group.lanes, client_id, _permit: permit };
        let request_number = group.next_request.get() + 1;
        group.next_request.set(request_number);
        let (reply, answer) = oneshot::channel();
        let since_tick = group.ticks.get();
        let waiter = Waiter {
            request_number,
            since_tick,
            operation,
            body,
            sent_in: None,
            sent_tick: since_tick,
            reply,
            held: None,
        };
        group.waiters.borrow_mut().insert(client_id, waiter);
        // Not normal (a view change under way): the tick hands it on once a view runs.
        self.hand_to_primary(group, client_id).await;
        answer.await.unwrap_or(Err(ErrorCode::TransientNotCommitted))
    }

    /// The group's view and primary, and whether it runs normally (none without a group).
    pub fn group_role(&self) -> Option<(u32, u8, bool)> {
        let replica = self.group()?.replication.replica.borrow();
        Some((replica.view(), replica.primary_index(replica.view()), replica.status() == Status::Normal))
    }
}

/// The random high bits of this process's lane ids, from its seed.
fn rand_high(seed: u64) -> u128 {
    u128::from(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1) << 32 | u128::from(seed >> 32)
}

/// A field for `Shard`: set once the group is open.
pub(super) type GroupCell<E> = OnceCell<PartitionGroup<E>>;
