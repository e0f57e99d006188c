//! State transfer of partition data within a partition group (docs/vsr.md, "Partition
//! groups"). A replica that fell further behind than its peers' journals reach gets the
//! group's state by `NewState`: the next offset of every partition and the stored consumer
//! offsets, but not the batches below them. Its partition logs then have a gap: offsets the
//! group assigned that this node never wrote. The shard finds a gap three ways (a committed
//! send past its log's end, the state a checkpoint installed, and a check every second of
//! each log against the state once every commit is applied), and fills it from a peer: it
//! asks for the stored batches (`RequestBatches`), checks each one it gets by checksum and
//! offset, and writes it at its offset with its own timestamp, so the log ends up
//! byte-identical to the peer's. Committed sends to that partition wait until the gap is
//! filled; the replica goes on voting meanwhile, since its journal is whole.

use std::collections::{BTreeMap, BTreeSet};

use rill_domain::Namespace;
use rill_domain::batch::{self, BatchHeader};
use rill_domain::constants::{BATCH_HEADER_SIZE, MAX_FRAME_SIZE};
use rill_domain::partition_group;
use rill_domain::vsr::{Entry, Message};
use rill_domain::wire::codes::operation;

use super::group::{PartitionGroup, Target, consumer_key_of, superseded};
use super::maintenance::namespace_label;
use super::{Partition, Shard};
use crate::memory_pool::PoolSlice;
use crate::partition::{DamagedBatch, PartitionLog, REPLY_ROOM};
use crate::ports::Env;
use crate::replication::TICK_MS;

/// A partition whose log is behind what its group assigned.
pub(super) struct Gap {
    /// The offset the log must reach.
    target: u64,
    asked_tick: u64,
    /// Requests sent so far: each retry asks the next peer.
    attempts: u32,
}

impl Gap {
    /// Asked of every peer long enough: sends behind it no longer wait for it.
    pub(super) fn exhausted(&self) -> bool {
        self.attempts >= GAP_ATTEMPTS
    }
}

/// Gaps by partition.
pub(super) type Gaps = BTreeMap<Namespace, Gap>;

/// A stored batch that failed its checksums here, asked of the peers.
pub(super) struct Repair {
    damaged: DamagedBatch,
    asked_tick: u64,
    attempts: u32,
}

/// Repairs by partition and the damaged batch's first offset.
pub(super) type Repairs = BTreeMap<(Namespace, u64), Repair>;

/// Peers asked for an intact copy of a damaged batch before giving up (until it is found
/// damaged again).
const REPAIR_ATTEMPTS: u32 = 10;
/// Requests for a gap's batches (a minute's worth) before the sends waiting on it are given
/// up on this node: no peer has them (retention removed them), and the group's other
/// partitions must not wait forever. The gap is still asked for, every second.
const GAP_ATTEMPTS: u32 = 60;

/// A request for batches unanswered this long (1 s) is sent again, to the next peer.
const ASK_AGAIN_TICKS: u64 = 1_000 / TICK_MS;
/// How often every log is checked against the group's state (1 s).
pub(super) const CHECK_TICKS: u64 = 1_000 / TICK_MS;

impl<E: Env> Shard<E> {
    /// Notes the gap below `target` (`note_gap`) for an op that needs it filled first; true
    /// once it is given up (no peer sent the batches for a minute): the op goes on without.
    pub(super) fn gap_given_up(&self, group: &PartitionGroup<E>, namespace: Namespace, next: u64, target: u64) -> bool {
        self.note_gap(group, namespace, next, target);
        group.gaps.borrow().get(&namespace).is_some_and(|gap| gap.exhausted())
    }

    /// Records that `namespace`'s log (now ending at `next_offset`) must reach `target`, and
    /// asks a peer for the batches if this gap is new.
    pub(super) fn note_gap(&self, group: &PartitionGroup<E>, namespace: Namespace, next_offset: u64, target: u64) {
        let fresh = {
            let mut gaps = group.gaps.borrow_mut();
            match gaps.get_mut(&namespace) {
                Some(gap) => {
                    gap.target = gap.target.max(target);
                    false
                }
                None => {
                    gaps.insert(namespace, Gap { target, asked_tick: group.ticks.get(), attempts: 0 });
                    true
                }
            }
        };
        if fresh {
            tracing::warn!(
                partition = %namespace_label(namespace),
                group = self.shard_id,
                from = next_offset,
                to = target,
                "this node lacks batches its partition group committed; fetching them from a peer"
            );
            self.ask_for_batches(group, namespace, next_offset);
        }
    }

    /// Sends one `RequestBatches` for the gap of `namespace` from `from_offset`, to the
    /// primary first, then to each other peer in turn.
    fn ask_for_batches(&self, group: &PartitionGroup<E>, namespace: Namespace, from_offset: u64) {
        let me = group.replication.membership.replica_id;
        let Ok(partition) = self.owned(namespace) else { return };
        let mut gaps = group.gaps.borrow_mut();
        let Some(gap) = gaps.get_mut(&namespace) else { return };
        let Some(peer) = peer_to_ask(group, gap.attempts) else { return };
        gap.attempts += 1;
        gap.asked_tick = group.ticks.get();
        let message = Message::RequestBatches {
            replica: me,
            partition: namespace.packed(),
            incarnation: partition.incarnation.get(),
            from_offset,
            to_offset: gap.target,
        };
        group.network.send(peer, message);
    }

    /// Asks again for every gap whose last request went unanswered (every tick).
    pub(super) async fn chase_gaps(&self, group: &PartitionGroup<E>) {
        let due = unanswered(&group.gaps.borrow(), group.ticks.get(), |gap| (gap.asked_tick, gap.attempts));
        for (namespace, attempts) in due {
            let Ok(partition) = self.owned(namespace) else {
                group.gaps.borrow_mut().remove(&namespace);
                continue;
            };
            // The group has started the partition again since this copy's incarnation (the
            // reset waits behind this gap, and no peer serves the old incarnation's batches):
            // the copy goes into the new one, and the gap with it.
            let known = group.replica().state_machine().state().incarnation(namespace.packed());
            if known > partition.incarnation.get() {
                self.start_again(group, namespace, &partition, known).await;
                continue;
            }
            if attempts == GAP_ATTEMPTS {
                tracing::error!(partition = %namespace_label(namespace), attempts, "no peer sent the batches this node lacks; committed sends to the partition are skipped here until one does");
            }
            let next_offset = partition.log.lock().await.next_offset();
            if attempts % 10 == 9 {
                tracing::warn!(partition = %namespace_label(namespace), attempts, from = next_offset, "no peer has sent the batches this node lacks yet; asking again");
            }
            self.ask_for_batches(group, namespace, next_offset);
        }
    }

    /// Checks every partition log of the group against its state; called under the pump lock
    /// once nothing committed waits, when each log must end where the state says.
    pub(super) async fn find_gaps(&self, group: &PartitionGroup<E>) {
        let expected: Vec<(u64, u64)> = group.replica().state_machine().state().next_offsets().collect();
        for (key, target) in expected {
            let Target::Open(namespace, partition) = self.group_partition(key) else { continue };
            let Some(log) = partition.log.try_lock() else { continue };
            let next_offset = log.next_offset();
            drop(log);
            if next_offset < target {
                self.note_gap(group, namespace, next_offset, target);
            }
        }
    }

    /// Halts the group when one of its partitions holds messages the group's state has no
    /// record of: they were written outside the group (by a node run without
    /// `replicate_partitions`, or on another shard under an earlier placement rule). The
    /// state would number that partition's next send from 0, and a replica whose log is
    /// past it would take the send for one it stored before and drop it, acknowledged. A
    /// halted group refuses every send until the node is restarted with the partition's
    /// directory moved out or without `replicate_partitions`; nothing stored is touched.
    /// Sends in the log above the applied state count as a record too: a restart applies
    /// them once their commit is known again, and they may be in the partition already
    /// (seed 1287 of the partition-group simulation: a recreated partition's first sends
    /// followed the last checkpoint, which had no record of it).
    pub(super) async fn refuse_unrecorded_partitions(&self, group: &PartitionGroup<E>) {
        let in_log = Self::journaled_sends(group);
        for (namespace, partition) in self.owned_partitions() {
            let log = partition.log.lock().await;
            self.refuse_if_unrecorded(group, &in_log, namespace, &partition, &log);
        }
    }

    /// The partitions with a send in the group's journal above what its replica applied.
    pub(super) fn journaled_sends(group: &PartitionGroup<E>) -> BTreeSet<Namespace> {
        Self::journaled(group, operation::SEND_MESSAGES, Self::op_partition)
    }

    /// What `parse` reads from the bodies of the `operation` entries in the group's journal
    /// above what its replica applied (after a restart: committed, but not known to be yet).
    pub(super) fn journaled<T, C: FromIterator<T>>(
        group: &PartitionGroup<E>,
        operation: u8,
        parse: impl Fn(&[u8]) -> Option<T>,
    ) -> C {
        let replica = group.replica();
        let entries = (replica.commit() + 1..=replica.op()).filter_map(|op| replica.log_entry(op));
        entries.filter(|entry| entry.operation == operation).filter_map(|entry| parse(&entry.body)).collect()
    }

    /// Halts the group when the partition holds messages and neither the group's state nor
    /// its journal (`in_log`) records any. A copy older than its incarnation holds the old
    /// incarnation's messages, which the state forgot at the reset and the copy's emptying
    /// (failed, a disk error) removes (seed 299 of the disk-restart runs).
    pub(super) fn refuse_if_unrecorded(
        &self,
        group: &PartitionGroup<E>,
        in_log: &BTreeSet<Namespace>,
        namespace: Namespace,
        partition: &Partition<E::Storage>,
        log: &PartitionLog<E::Storage>,
    ) {
        let recorded = in_log.contains(&namespace)
            || group.replica().state_machine().state().next_offset(namespace.packed()).is_some();
        let held = log.next_offset();
        if recorded || held == 0 || self.copy_behind(namespace, partition) {
            return;
        }
        tracing::error!(
            partition = %namespace_label(namespace),
            directory = %log.dir().display(),
            messages = held,
            group = self.shard_id,
            "a partition holds messages its partition group has no record of (written without \
             replicate_partitions, or on another shard before 2026-12-04's placement): the group \
             refuses every send. To go on, stop the node and either move this partition's \
             directory out of the data directory (the partition starts again empty) or start \
             it without replicate_partitions"
        );
        group.halted.set(Some(super::group_reopen::Halt::UntilRestart));
    }

    /// Makes every offset file of the group's partitions what a state a checkpoint just
    /// installed says (stores the state has, deletes of those it lacks), except in a copy of
    /// a newer incarnation than the state's: the state's offsets are the old one's.
    pub(super) async fn adopt_group_offsets(&self, group: &PartitionGroup<E>) {
        for (namespace, partition) in self.owned_partitions() {
            if let Err(error) = self.adopt_offsets(group, namespace, &partition).await {
                tracing::error!(%error, partition = %namespace_label(namespace), "cannot store the consumer offsets a group checkpoint holds");
                group.unsynced_offsets.borrow_mut().insert(namespace);
            }
        }
    }

    /// Makes the offset files of the partitions a committed op could not change here what
    /// the group's state says; called once nothing committed waits, when the state holds
    /// exactly what this node applied.
    pub(super) async fn sync_offsets(&self, group: &PartitionGroup<E>) {
        let unsynced: Vec<Namespace> = group.unsynced_offsets.borrow().iter().copied().collect();
        for namespace in unsynced {
            // A copy older than its incarnation takes the state's offsets once emptied: the
            // emptying would remove them.
            let synced = match self.owned(namespace) {
                Ok(partition) if self.copy_behind(namespace, &partition) => false,
                Ok(partition) => self.adopt_offsets(group, namespace, &partition).await.is_ok(),
                Err(_) => true,
            };
            if synced {
                group.unsynced_offsets.borrow_mut().remove(&namespace);
            }
        }
    }

    /// Makes one partition's offset files what the group's state says (stores the state has,
    /// deletes of those it lacks), except in a copy of a newer incarnation than the state's.
    async fn adopt_offsets(
        &self,
        group: &PartitionGroup<E>,
        namespace: Namespace,
        partition: &Partition<E::Storage>,
    ) -> std::io::Result<()> {
        let (wanted, incarnation): (Vec<(crate::partition::ConsumerKey, u64)>, u64) = {
            let replica = group.replication.replica.borrow();
            let state = replica.state_machine().state();
            let offsets = state.consumer_offsets(namespace.packed());
            let wanted = offsets.map(|(key, offset)| (consumer_key_of(key), offset)).collect();
            (wanted, state.incarnation(namespace.packed()))
        };
        let mut log = partition.log.lock().await;
        if partition.closed.get() || partition.incarnation.get() > incarnation {
            return Ok(());
        }
        let local = log.offsets.all();
        let mut result = Ok(());
        for (key, _) in local.iter().filter(|(key, _)| !wanted.iter().any(|(k, _)| k == key)) {
            result = result.and(log.offsets.delete(&self.storage, *key).await.map(drop));
        }
        for (key, offset) in wanted.iter().filter(|wanted| !local.contains(wanted)) {
            let fsync = log.settings.consumer_offset_fsync;
            result = result.and(log.offsets.store(&self.storage, *key, *offset, fsync).await);
        }
        partition.publish_offsets(&log);
        result
    }

    /// A peer asks for stored batches of a partition in an incarnation: whole batches from
    /// `from` on, up to a poll's byte budget, or none when this node has none there or its
    /// copy is in another incarnation (one side has not applied a purge or a recreation
    /// yet: the asker tries again, or another peer). The last batch is never cut at
    /// `until`: the asker stores what it gets as it is, and a batch cut short there would
    /// leave its log with other batch boundaries than the group's, and the rest of that
    /// batch's messages fitting nowhere.
    pub(super) async fn serve_batches(
        &self,
        group: &PartitionGroup<E>,
        to: u8,
        (key, incarnation): (u64, u64),
        (from, until): (u64, u64),
    ) {
        let membership = group.replication.membership;
        if to >= membership.replica_count || to == membership.replica_id {
            return;
        }
        let (mut batches, mut log_start) = (Vec::new(), 0);
        if let Target::Open(namespace, partition) = self.group_partition(key) {
            let plan = {
                let log = partition.log.lock().await;
                // Whole batches only: one cut at `until` could not be stored as it is.
                let count = if until > from { log.whole_batches_through(from, until - 1) } else { 0 };
                let same = partition.incarnation.get() == incarnation && !partition.closed.get();
                if same {
                    log_start = log.first_offset();
                }
                (same && from >= log.first_offset() && count > 0).then(|| log.plan_poll(from, count, self.shared.pool))
            };
            if let Some(plan) = plan {
                match plan.read().await {
                    Ok(polled) => batches = polled.frame[REPLY_ROOM..].to_vec(),
                    Err(error) => {
                        tracing::warn!(%error, partition = %namespace_label(namespace), "cannot read batches a peer asked for")
                    }
                }
            }
        }
        let message = Message::Batches {
            replica: membership.replica_id,
            partition: key,
            incarnation,
            from_offset: from,
            log_start,
            batches,
        };
        group.network.send(to, message);
    }

    /// Batches a peer sent for a gap: each is checked (checksums, and that it starts where
    /// the log ends) and written at its offset; the rest is asked for at once. Runs under the
    /// pump lock, so no committed send is written into the partition meanwhile.
    async fn fill_gap(&self, group: &PartitionGroup<E>, answer: &PeerBatches<'_>) {
        let PeerBatches { peer: from, key, incarnation, from_offset, log_start, bytes } = *answer;
        let Target::Open(namespace, partition) = self.group_partition(key) else { return };
        let Some(target) = group.gaps.borrow().get(&namespace).map(|gap| gap.target) else { return };
        let mut log = partition.log.lock().await;
        if partition.closed.get() || partition.incarnation.get() != incarnation || log.next_offset() != from_offset {
            return;
        }
        // The peer's copy starts past this one's: committed deletions (DELETE_SEGMENTS ops,
        // which this copy may never apply: a state installed from a peer covers them) took
        // that prefix. This copy drops it too, or goes on from there if it lacks it all.
        if log_start > from_offset && !self.follow_deletions(namespace, &mut log, log_start).await {
            return;
        }
        let mut at = 0;
        while log.next_offset() < target && at + BATCH_HEADER_SIZE <= bytes.len() {
            let header = BatchHeader::read(&bytes[at..]);
            let end = usize::try_from(header.batch_length).ok().and_then(|len| at.checked_add(len));
            let Some(stored) = end.and_then(|end| bytes.get(at..end)) else { break };
            if header.base_offset != log.next_offset() || !batch::verify_stored(stored) {
                tracing::warn!(partition = %namespace_label(namespace), peer = from, offset = header.base_offset, expected = log.next_offset(), "a peer sent a batch that does not fit the gap; asking another");
                break;
            }
            let written = log
                .append_replicated(
                    &self.storage,
                    PoolSlice::plain(stored.to_vec()),
                    header.base_offset,
                    header.base_timestamp,
                )
                .await;
            if let Err(error) = written {
                tracing::error!(%error, partition = %namespace_label(namespace), "cannot write a batch fetched from a peer");
                break;
            }
            at += stored.len();
        }
        // Once the fetched batches are in, the segment holding what the peer's copy no longer
        // has may be sealed here too.
        if log_start > log.first_offset() {
            self.follow_deletions(namespace, &mut log, log_start).await;
        }
        let next_offset = log.next_offset();
        partition.refresh(&log);
        drop(log);
        group.dirty.borrow_mut().insert(namespace);
        if next_offset >= target {
            group.gaps.borrow_mut().remove(&namespace);
            tracing::info!(partition = %namespace_label(namespace), offset = next_offset, "the partition caught up from its peers");
        } else if next_offset > from_offset {
            // Progress: the next chunk from the same peer, without waiting for a tick.
            if let Some(gap) = group.gaps.borrow_mut().get_mut(&namespace) {
                gap.attempts = gap.attempts.saturating_sub(1);
            }
            self.ask_for_batches(group, namespace, next_offset);
        }
    }

    /// Deletes this node's sealed segments below a committed DELETE_SEGMENTS offset. A copy
    /// lacking batches below it (committed while this node lagged) waits for them from a peer
    /// first, as a send past its end does: deleting before they are in would leave the copy's
    /// segments split elsewhere than its peers', and the prefix the deletion took kept for
    /// good (seed 239). False while it waits.
    pub(super) async fn apply_delete_segments(
        &self,
        group: &PartitionGroup<E>,
        entry: &Entry,
        incarnation: u64,
    ) -> bool {
        let Some((key, below, _)) = partition_group::parse_delete_body(&entry.body) else { return true };
        let (namespace, partition) = match self.commit_target(key) {
            Ok(found) => found,
            Err(done) => return done,
        };
        // A copy that cannot be emptied into the op's incarnation follows the log start
        // once it is (`adopt_log_starts`).
        if !self.start_again(group, namespace, &partition, incarnation).await {
            return true;
        }
        let mut log = partition.log.lock().await;
        if partition.closed.get() || superseded(&partition, incarnation) {
            return true;
        }
        if below > log.next_offset() && !self.gap_given_up(group, namespace, log.next_offset(), below) {
            return false;
        }
        match log.delete_segments_below(&self.storage, below).await {
            Ok(detached) if detached.segments > 0 => self.count_retention(
                namespace,
                &detached,
                "deleted the segments the partition group's committed deletion names",
            ),
            Ok(_) => {}
            Err(error) => {
                tracing::error!(%error, partition = %namespace_label(namespace), "committed segment deletion failed on this node")
            }
        }
        partition.refresh(&log);
        true
    }

    /// Brings this copy's start up to `start`, where deletions that committed while it lagged
    /// left the partition (a peer's first offset, or the log start of a state installed from
    /// a peer): a copy holding nothing from there starts again there, one holding more drops
    /// its sealed segments that end at or below it. False if the copy could not start again.
    async fn follow_deletions(&self, namespace: Namespace, log: &mut PartitionLog<E::Storage>, start: u64) -> bool {
        let label = namespace_label(namespace);
        let end = log.next_offset();
        if end < start {
            if let Err(error) = log.restart_at(&self.storage, start).await {
                tracing::error!(%error, partition = %label, "cannot start a copy again past the segments deletions took");
                return false;
            }
            tracing::warn!(partition = %label, from = end, to = start, "deletions this copy missed took all it lacked; it goes on from where the partition starts");
            return true;
        }
        match log.delete_segments_below(&self.storage, start).await {
            Ok(deleted) if deleted.segments > 0 => {
                let segments = deleted.segments;
                tracing::info!(partition = %label, below = start, segments, "deleted the segments deletions this copy missed took");
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, partition = %label, "cannot delete the segments deletions this copy missed took")
            }
        }
        true
    }

    /// A state installed from a peer may record deletions this node never applied (the state
    /// covers their ops), and a committed deletion may have failed here (a disk error; tried
    /// again every second, `busy_skips` then, so a partition held by a write waits for the
    /// next): each copy in the state's incarnation follows its partition's log start.
    pub(super) async fn adopt_log_starts(&self, group: &PartitionGroup<E>, busy_skips: bool) {
        for (namespace, partition) in self.owned_partitions() {
            let (start, incarnation) = {
                let replica = group.replica();
                let state = replica.state_machine().state();
                (state.log_start(namespace.packed()), state.incarnation(namespace.packed()))
            };
            let mut log = match partition.log.try_lock() {
                Some(log) => log,
                None if busy_skips => continue,
                None => partition.log.lock().await,
            };
            if start > log.first_offset() && !partition.closed.get() && partition.incarnation.get() == incarnation {
                self.follow_deletions(namespace, &mut log, start).await;
                partition.refresh(&log);
            }
        }
    }

    /// A batch stored here failed its checksums: an intact copy is asked of the peers (one
    /// at a time, the primary first), unless one is asked already.
    pub(super) fn ask_repair(&self, group: &PartitionGroup<E>, namespace: Namespace, damaged: &DamagedBatch) {
        let key = (namespace, damaged.first_offset);
        if damaged.length as usize > MAX_FRAME_SIZE || group.repairs.borrow().contains_key(&key) {
            return;
        }
        let repair = Repair { damaged: damaged.clone(), asked_tick: 0, attempts: 0 };
        group.repairs.borrow_mut().insert(key, repair);
        self.ask_for_copy(group, key);
    }

    fn ask_for_copy(&self, group: &PartitionGroup<E>, key: (Namespace, u64)) {
        let mut repairs = group.repairs.borrow_mut();
        let Some(repair) = repairs.get_mut(&key) else { return };
        let Some(peer) = peer_to_ask(group, repair.attempts) else { return };
        repair.attempts += 1;
        repair.asked_tick = group.ticks.get();
        let Ok(partition) = self.owned(key.0) else { return };
        let message = Message::RequestBatches {
            replica: group.replication.membership.replica_id,
            partition: key.0.packed(),
            incarnation: partition.incarnation.get(),
            from_offset: repair.damaged.first_offset,
            to_offset: repair.damaged.last_offset + 1,
        };
        group.network.send(peer, message);
    }

    /// Asks the next peer for every copy unanswered for a second; gives up on a batch no
    /// peer sent an intact copy of in `REPAIR_ATTEMPTS` tries.
    pub(super) fn chase_repairs(&self, group: &PartitionGroup<E>) {
        let due = unanswered(&group.repairs.borrow(), group.ticks.get(), |r| (r.asked_tick, r.attempts));
        for (key, attempts) in due {
            if attempts >= REPAIR_ATTEMPTS {
                group.repairs.borrow_mut().remove(&key);
                tracing::error!(partition = %namespace_label(key.0), first_offset = key.1, "no peer sent an intact copy of a damaged batch; it stays unserved here");
                continue;
            }
            self.ask_for_copy(group, key);
        }
    }

    /// Batches a peer sent: the copy of a damaged batch asked for at `from_offset`, or
    /// batches for a gap; ignored unless of the incarnation this node's copy is in (an
    /// answer to a request made before a purge or a recreation holds the old one's).
    pub(super) async fn receive_batches(&self, group: &PartitionGroup<E>, answer: PeerBatches<'_>) {
        let PeerBatches { peer: from, key, incarnation, from_offset, bytes, .. } = answer;
        let Some(namespace) = Namespace::from_packed(key) else { return };
        let Some(damaged) = group.repairs.borrow().get(&(namespace, from_offset)).map(|r| r.damaged.clone()) else {
            return self.fill_gap(group, &answer).await;
        };
        let Ok(partition) = self.owned(namespace) else { return };
        let mut log = partition.log.lock().await;
        if partition.incarnation.get() != incarnation {
            return;
        }
        let copy = bytes.get(..damaged.length as usize).unwrap_or_default();
        // Not intact, or not written: the next peer is asked at the next chase.
        match log.repair_batch(&self.storage, &damaged, copy).await {
            Ok(true) => {
                group.repairs.borrow_mut().remove(&(namespace, from_offset));
                tracing::info!(partition = %namespace_label(namespace), peer = from, first_offset = from_offset, file = %damaged.file.display(), "repaired a damaged batch with a peer's copy");
            }
            Ok(false) => {}
            Err(error) => {
                tracing::error!(%error, partition = %namespace_label(namespace), "cannot write a peer's copy of a damaged batch")
            }
        }
    }

    /// The partition a group op names, from the key its body starts with.
    pub(super) fn op_partition(body: &[u8]) -> Option<Namespace> {
        Namespace::from_packed(u64::from_le_bytes(body.get(..8)?.try_into().ok()?))
    }
}

/// A peer's `Batches` answer: its stored batches of a partition in an incarnation, from an
/// offset on.
#[derive(Clone, Copy)]
pub(super) struct PeerBatches<'a> {
    pub(super) peer: u8,
    pub(super) key: u64,
    pub(super) incarnation: u64,
    pub(super) from_offset: u64,
    /// The peer's first stored offset: past `from_offset`, a deletion took what was asked.
    pub(super) log_start: u64,
    pub(super) bytes: &'a [u8],
}

/// The peer to ask on attempt `attempts`: the primary first, then each other one in turn.
fn peer_to_ask<E: Env>(group: &PartitionGroup<E>, attempts: u32) -> Option<u8> {
    let me = group.replication.membership.replica_id;
    let count = group.replication.membership.replica_count;
    let primary = {
        let replica = group.replication.replica.borrow();
        replica.primary_index(replica.view())
    };
    let peers: Vec<u8> = (0..count).map(|i| (primary + i) % count).filter(|&peer| peer != me).collect();
    peers.get(attempts as usize % peers.len().max(1)).copied()
}

/// The requests of `asked` last sent `ASK_AGAIN_TICKS` or more before `tick`, with how
/// many times each was sent (`sent` gives a request's tick and count).
fn unanswered<K: Copy + Ord, T>(asked: &BTreeMap<K, T>, tick: u64, sent: impl Fn(&T) -> (u64, u32)) -> Vec<(K, u32)> {
    asked
        .iter()
        .map(|(key, request)| (*key, sent(request)))
        .filter(|(_, (asked_tick, _))| tick - asked_tick >= ASK_AGAIN_TICKS)
        .map(|(key, (_, attempts))| (key, attempts))
        .collect()
}
