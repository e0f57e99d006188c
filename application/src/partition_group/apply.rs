//! Committed ops made in this node's partitions: every replica, the primary included,
//! writes each committed send into its partition log at the offset the group assigned,
//! stamped with the primary's time, and stores or deletes each committed consumer offset.
//! An op whose partition is not open here yet waits, and every later op waits behind it, so
//! each partition's batches are written in commit order.

use std::rc::Rc;
use std::sync::atomic::Ordering;

use rill_domain::Namespace;
use rill_domain::error::ErrorCode;
use rill_domain::partition_group;
use rill_domain::vsr::Entry;
use rill_domain::wire::codes::operation;

use super::core::{Applying, Blocked, GroupCore, Reach, consumer_key_of, op_partition};
use crate::memory_pool::PoolSlice;
use crate::partitions::{Partition, label};
use crate::ports::Env;
use crate::replication::TICK_MS;

/// How long a committed send waits for its partition to open here (5 s): the topic's
/// creation commits in the metadata log, which this node may apply a little later.
const APPLY_WAIT_TICKS: u64 = 5_000 / TICK_MS;

/// Where a group op's partition is on this node.
pub(super) enum Target<S: crate::ports::Storage> {
    Open(Namespace, Rc<Partition<S>>),
    /// Not open yet: its creation may still be on its way through the metadata log.
    NotOpen,
    /// Never here: a malformed key, or a partition another shard owns.
    Nowhere,
}

/// Where the partition a group op names is on this node.
pub(super) fn group_partition<E: Env>(reach: &Reach<'_, E>, key: u64) -> Target<E::Storage> {
    let Some(namespace) = Namespace::from_packed(key) else { return Target::Nowhere };
    let store = reach.store;
    if namespace.shard(store.shared.shard_count) != store.shard_id() {
        tracing::error!(partition = %label(namespace), group = store.shard_id(), "a partition group carries a partition another shard owns here: every node must run the same shard count");
        return Target::Nowhere;
    }
    match store.owned(namespace) {
        Ok(partition) => Target::Open(namespace, partition),
        Err(_) => Target::NotOpen,
    }
}

/// A partition open on this shard, with its name.
pub(super) type OpenPartition<S> = (Namespace, Rc<Partition<S>>);

/// The open partition a committed op names, or what applying the op returns without it:
/// false while it is not open here yet, true when it never will be.
pub(super) fn commit_target<E: Env>(reach: &Reach<'_, E>, key: u64) -> Result<OpenPartition<E::Storage>, bool> {
    match group_partition(reach, key) {
        Target::Open(namespace, partition) => Ok((namespace, partition)),
        Target::NotOpen => Err(false),
        Target::Nowhere => Err(true),
    }
}

impl<E: Env> GroupCore<E> {
    /// The open partition a committed op of `incarnation` names, its copy emptied into that
    /// incarnation first; or what applying the op returns without it: false while the
    /// partition is not open here, true when it never will be or its copy could not be
    /// emptied (a disk error: the op is not made among the old incarnation's messages).
    pub async fn copy_in(
        &mut self,
        reach: &Reach<'_, E>,
        key: u64,
        incarnation: u64,
    ) -> Result<OpenPartition<E::Storage>, bool> {
        let (namespace, partition) = commit_target(reach, key)?;
        match self.start_again(reach, namespace, &partition, incarnation).await {
            true => Ok((namespace, partition)),
            false => Err(true),
        }
    }

    /// One committed op: a send or an offset change is made in its partition (or waits for
    /// it to open); a forwarded op's node learns its outcome here if the primary's reply
    /// was lost.
    pub async fn on_commit(&mut self, reach: &Reach<'_, E>, op: u64, entry: Entry) {
        let outcome = self.replica.state_machine_mut().take_outcome(op);
        let result = outcome.as_ref().map_or(Err(ErrorCode::TransientNotCommitted), |o| o.result);
        if let Ok(assigned) = result {
            let incarnation = outcome.as_ref().map_or(0, |o| o.incarnation);
            let stored = outcome.as_ref().is_some_and(|o| o.stored > 0);
            self.count_duplicates(reach, &entry, outcome.as_ref().map_or(0, |o| o.stored));
            let applying = match (entry.operation, assigned) {
                (send, Some((key, base_offset))) if partition_group::is_send(send) && stored => {
                    let dropped = outcome.and_then(|o| o.dropped).map(std::rc::Rc::from);
                    Applying::Send(key, base_offset, incarnation, dropped)
                }
                (operation::STORE_CONSUMER_OFFSET | operation::DELETE_CONSUMER_OFFSET, _) => {
                    Applying::Offset(incarnation)
                }
                (operation::RESET_PARTITION, _) if outcome.as_ref().is_some_and(|o| o.reset) => Applying::Reset,
                (operation::DELETE_SEGMENTS, _) => Applying::DeleteSegments(incarnation),
                (partition_group::ADOPT_PARTITION, _) => Applying::Adopt(outcome.as_ref().is_some_and(|o| o.adopted)),
                _ => Applying::Nothing,
            };
            let waiting = !self.blocked.is_empty();
            if waiting || !self.apply_committed(reach, &entry, applying.clone()).await {
                let since_tick = self.ticks;
                self.blocked.push_back(Blocked { entry: entry.clone(), applying, since_tick });
            }
        }
        self.answer(entry.client_id, entry.request_number, result.map(|a| a.map(|(_, base)| base)));
    }

    /// Counts the messages of a committed send this node's copy does not store: duplicates
    /// of ids in the window, or a producer's retry (`rill_deduplicated_messages_total`).
    fn count_duplicates(&self, reach: &Reach<'_, E>, entry: &Entry, stored: u32) {
        if let Some((_, declared, _)) = partition_group::parse_any_send(entry.operation, &entry.body)
            && declared > stored
        {
            let dropped = &reach.store.shared.telemetry.data.duplicates_dropped;
            dropped.fetch_add(u64::from(declared - stored), Ordering::Relaxed);
        }
    }

    /// Makes one committed op in its partition; false while the partition is not open here.
    async fn apply_committed(&mut self, reach: &Reach<'_, E>, entry: &Entry, applying: Applying) -> bool {
        match applying {
            Applying::Send(key, base_offset, incarnation, dropped) => {
                self.apply_send(reach, entry, (key, base_offset), incarnation, dropped.as_deref()).await
            }
            Applying::Offset(incarnation) => self.apply_offset(reach, entry, incarnation).await,
            Applying::Reset => self.apply_reset(reach, entry).await,
            Applying::DeleteSegments(incarnation) => self.apply_delete_segments(reach, entry, incarnation).await,
            Applying::Adopt(adopted) => self.apply_adoption(reach, entry, adopted).await,
            Applying::Nothing => true,
        }
    }

    /// Stores or deletes a committed consumer offset.
    async fn apply_offset(&mut self, reach: &Reach<'_, E>, entry: &Entry, incarnation: u64) -> bool {
        let Some((key, (kind, id), offset)) = partition_group::parse_offset_body(&entry.body) else { return true };
        let (namespace, partition) = match commit_target(reach, key) {
            Ok(found) => found,
            Err(done) => return done,
        };
        let consumer = consumer_key_of((kind, id));
        if !self.start_again(reach, namespace, &partition, incarnation).await {
            self.unsynced_offsets.insert(namespace);
            return true;
        }
        let mut log = partition.log.lock().await;
        if partition.closed() || self.superseded(namespace, incarnation) {
            return true;
        }
        let storage = &reach.store.storage;
        let result = match (entry.operation, offset) {
            (operation::STORE_CONSUMER_OFFSET, Some(offset)) => {
                let fsync = log.settings.consumer_offset_fsync;
                log.offsets.store(storage, consumer, offset, fsync).await
            }
            _ => log.offsets.delete(storage, consumer).await.map(drop),
        };
        if let Err(error) = result {
            tracing::error!(%error, partition = %label(namespace), "a committed consumer offset cannot be stored on this node (tried again every second)");
            self.unsynced_offsets.insert(namespace);
        }
        partition.publish_offsets(&log);
        // The next checkpoint makes it durable before the journal entry goes.
        self.dirty.insert(namespace);
        true
    }

    /// Writes one committed send into its partition, without the messages the group dropped
    /// as duplicates; false while the partition is not open here yet.
    async fn apply_send(
        &mut self,
        reach: &Reach<'_, E>,
        entry: &Entry,
        (key, base_offset): (u64, u64),
        incarnation: u64,
        dropped: Option<&[bool]>,
    ) -> bool {
        let Some((_, _, batch)) = partition_group::parse_any_send(entry.operation, &entry.body) else { return true };
        let (namespace, partition) = match self.copy_in(reach, key, incarnation).await {
            Ok(found) => found,
            Err(done) => return done,
        };
        if self.unadopted.contains(&namespace) {
            // A send committed before this copy's messages were adopted: they would sit
            // under offsets the group gives other messages.
            self.diverged(reach, namespace, "a send to it committed before its messages were adopted");
            return true;
        }
        let mut log = partition.log.lock().await;
        if partition.closed() || self.superseded(namespace, incarnation) {
            return true;
        }
        if base_offset > log.next_offset() {
            // Offsets below it were committed while this node was too far behind to get them
            // from the journal: they come from a peer first, and this send waits for them
            // (unless no peer sent them for a minute: then it is skipped here).
            return self.gap_given_up(reach, namespace, log.next_offset(), base_offset);
        }
        let store = reach.store;
        let mut batch = batch.to_vec();
        if let Some(dropped) = dropped {
            let (_, len) = rill_domain::batch::drop_frames(&mut batch, dropped);
            batch.truncate(len);
        }
        let stored = match store.seal(namespace, PoolSlice::plain(batch)) {
            Ok(stored) => stored,
            Err(code) => {
                tracing::error!(%code, partition = %label(namespace), "cannot seal a committed batch");
                return true;
            }
        };
        let was_read_only = log.write_failure().is_some();
        let result = log.append_replicated(&store.storage, stored, base_offset, entry.timestamp).await;
        store.note_write(namespace, was_read_only, log.write_failure().is_some(), result.as_ref().err());
        match result {
            Ok(Some(appended)) => {
                partition.stats.note_appended(u64::from(appended.stored));
                partition.stats.appended_bytes.fetch_add(appended.bytes, Ordering::Relaxed);
            }
            Ok(None) => {}
            Err(error) if log.next_offset() < base_offset => {
                tracing::error!(%error, partition = %label(namespace), "a committed batch cannot be stored on this node");
            }
            // Journaled, not yet written: the retry writes it.
            Err(_) => {}
        }
        partition.refresh(&log);
        self.dirty.insert(namespace);
        true
    }

    /// Writes the sends that waited for their partitions, in commit order; one that waited
    /// too long is given up on this node (logged: its partition is gone or never opened).
    pub async fn retry_blocked(&mut self, reach: &Reach<'_, E>) {
        loop {
            let Some((entry, applying, since_tick)) =
                self.blocked.front().map(|b| (b.entry.clone(), b.applying.clone(), b.since_tick))
            else {
                return;
            };
            if !self.apply_committed(reach, &entry, applying).await {
                let filling =
                    op_partition(&entry.body).is_some_and(|ns| self.gaps.get(&ns).is_some_and(|gap| !gap.exhausted()));
                if filling || self.ticks - since_tick < APPLY_WAIT_TICKS {
                    return;
                }
                tracing::error!(
                    op = entry.op,
                    operation = entry.operation,
                    "a committed send's partition never opened on this node; skipping it here"
                );
            }
            self.blocked.pop_front();
        }
    }
}
