//! Which incarnation each of this node's copies is in (docs/vsr.md, "Partition groups").
//! The group's state outlives a partition: a purge empties it, and a deleted partition's ids
//! may name a new one later. Both start the partition again through the group, as a
//! `RESET_PARTITION` op carrying the incarnation, the metadata timestamp of the creation or
//! the purge, which is the same on every node: every node submits it when it applies that
//! metadata (or, for a creation, before its first send or offset change there), the first
//! to commit empties the partition on every replica, in the group's order, and the rest
//! change nothing. A copy whose incarnation is older than the one it must reach lags, and
//! serves nothing meanwhile.

use rill_domain::Namespace;
use rill_domain::partition_group;
use rill_domain::vsr::Entry;
use rill_domain::wire::codes::operation;

use super::apply::commit_target;
use super::core::{GroupCore, Reach};
use super::records::CopyState;
use crate::partitions::{Partition, label, markers};
use crate::ports::Env;

impl<E: Env> GroupCore<E> {
    pub fn copy(&self, namespace: Namespace) -> CopyState {
        self.copies.get(&namespace).copied().unwrap_or_default()
    }

    /// Learns a copy's incarnations from its partition's markers, when it opens.
    pub async fn adopt_copy(&mut self, reach: &Reach<'_, E>, namespace: Namespace) {
        let dir = reach.store.partition_dir(namespace);
        let found = markers::read_incarnations(&reach.store.storage, &dir).await;
        let copy = CopyState {
            incarnation: found.created_at.max(found.reset),
            wanted: found.created_at.max(found.purged),
            ..CopyState::default()
        };
        self.copies.insert(namespace, copy);
    }

    /// Whether this node's copy of a partition is older than the incarnation the partition
    /// is in: a purge or a recreation this node's metadata applied, or its group committed,
    /// not made in the copy yet (it lags). Its messages and stored offsets are gone from
    /// the partition already, so reads here serve none of them meanwhile.
    pub fn behind(&self, namespace: Namespace) -> bool {
        let known = self.replica.state_machine().state().incarnation(namespace.packed());
        let copy = self.copy(namespace);
        known.max(copy.wanted) > copy.incarnation
    }

    /// Whether an op committed in `incarnation` belongs to one this copy has left behind: a
    /// restart replays sends made before a purge or recreation it applied already (not made).
    pub fn superseded(&self, namespace: Namespace, incarnation: u64) -> bool {
        incarnation < self.copy(namespace).incarnation
    }

    /// After a restart: a reset in the journal above what the replica applied is a purge or
    /// a recreation the metadata committed; until it commits here too, the copy it empties
    /// lags and serves nothing (a node whose purge record could not be written restarted,
    /// and must not serve purged messages until its group catches up).
    pub fn note_journaled_resets(&mut self) {
        let resets: Vec<(u64, u64)> = self.journaled(operation::RESET_PARTITION, partition_group::parse_reset_body);
        for (key, incarnation) in resets {
            let Some(namespace) = Namespace::from_packed(key) else { continue };
            if let Some(copy) = self.copies.get_mut(&namespace) {
                copy.wanted = copy.wanted.max(incarnation);
            }
        }
    }

    /// Empties every copy here that is older than the incarnation the group's state names:
    /// after a checkpoint installed from a peer (a purge or recreation this node missed), so
    /// the gaps found next are filled with the new incarnation's batches only, and every
    /// second, for a copy whose emptying failed (a disk error) when its reset committed.
    pub async fn adopt_incarnations(&mut self, reach: &Reach<'_, E>) {
        for (namespace, partition) in reach.store.owned_partitions() {
            let incarnation = self.replica.state_machine().state().incarnation(namespace.packed());
            self.start_again(reach, namespace, &partition, incarnation).await;
        }
    }

    /// A committed reset that started the partition again: its log and stored offsets are
    /// emptied here too, and a gap it had is gone with them. False while it is not open.
    pub async fn apply_reset(&mut self, reach: &Reach<'_, E>, entry: &Entry) -> bool {
        let Some((key, incarnation)) = partition_group::parse_reset_body(&entry.body) else { return true };
        let (namespace, partition) = match commit_target(reach, key) {
            Ok(found) => found,
            Err(done) => return done,
        };
        // Replayed from the journal after a restart, this copy is in that incarnation already.
        self.start_again(reach, namespace, &partition, incarnation).await;
        true
    }

    /// Empties this node's copy of a partition into `incarnation`, unless it is in that one
    /// or a newer one already; whether it is now. Before a committed op of `incarnation` is
    /// made in a copy, false means the emptying failed (a disk error; tried again every
    /// second): the op would land among the old incarnation's messages and offsets, so it
    /// is not made there (the copy fetches it from a peer, or takes its offsets from the
    /// group's state, once emptied).
    pub async fn start_again(
        &mut self,
        reach: &Reach<'_, E>,
        namespace: Namespace,
        partition: &Partition<E::Storage>,
        incarnation: u64,
    ) -> bool {
        if incarnation <= self.copy(namespace).incarnation {
            return true;
        }
        let mut log = partition.log.lock().await;
        if partition.closed() {
            return false;
        }
        let copy = self.copies.entry(namespace).or_default();
        match reach.store.purge_partition(namespace, &mut log, Some(incarnation)).await {
            Ok(()) => {
                tracing::info!(partition = %label(namespace), incarnation, "the partition group started this copy again (emptied)");
                copy.incarnation = incarnation;
            }
            // Tried again every second; logged once an incarnation, not every time.
            Err(error) if std::mem::replace(&mut copy.failed_reset, incarnation) != incarnation => {
                tracing::error!(%error, partition = %label(namespace), "cannot empty a partition its group started again: it serves nothing and takes no sends here until it can (tried again every second)")
            }
            Err(_) => {}
        }
        let started = incarnation <= copy.incarnation;
        partition.refresh(&log);
        partition.publish_offsets(&log);
        self.gaps.remove(&namespace);
        self.repairs.retain(|(named, _), _| *named != namespace);
        started
    }

    /// Records a purge this node's metadata applied to a replicated partition: the copy lags
    /// from now on (a restart included) until its group's reset empties it. The record is
    /// written under the partition's lock: another node's reset for this purge, committing
    /// here, empties the directory it goes into, and a file made during that removal would
    /// fail it. A record that cannot be written still makes the copy serve nothing.
    pub async fn note_purge(
        &mut self,
        reach: &Reach<'_, E>,
        namespace: Namespace,
        partition: &Partition<E::Storage>,
        incarnation: u64,
    ) -> std::io::Result<()> {
        let _log = partition.log.lock().await;
        let copy = self.copies.entry(namespace).or_default();
        if incarnation <= copy.wanted {
            return Ok(());
        }
        copy.wanted = incarnation;
        let recorded = record_purge(reach, namespace, incarnation).await;
        copy.unrecorded_purge = recorded.is_err();
        recorded
    }

    /// Writes the purge records a disk error kept from being written, for copies their
    /// group has not emptied since (an emptied copy records its incarnation itself), so a
    /// restart before the group's reset still knows the copy lags.
    pub async fn record_purges(&mut self, reach: &Reach<'_, E>) {
        let unrecorded: Vec<Namespace> =
            self.copies.iter().filter(|(_, copy)| copy.unrecorded_purge).map(|(ns, _)| *ns).collect();
        for namespace in unrecorded {
            let Ok(partition) = reach.store.owned(namespace) else {
                self.copies.remove(&namespace);
                continue;
            };
            let _log = partition.log.lock().await;
            let copy = self.copy(namespace);
            let recorded = partition.closed()
                || copy.incarnation >= copy.wanted
                || record_purge(reach, namespace, copy.wanted).await.is_ok();
            if let Some(copy) = self.copies.get_mut(&namespace) {
                copy.unrecorded_purge = !recorded;
            }
        }
    }
}

async fn record_purge<E: Env>(reach: &Reach<'_, E>, namespace: Namespace, incarnation: u64) -> std::io::Result<()> {
    let dir = reach.store.partition_dir(namespace);
    markers::write_marker(&reach.store.storage, &dir, &dir.join(markers::PURGED_MARKER), incarnation).await
}
