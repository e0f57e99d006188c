//! Segment deletions in a partition group: retention's primary asks the group to delete
//! the sealed segments below an offset (`DELETE_SEGMENTS`), and every replica deletes the
//! same messages when it applies the op. A copy that missed deletions (a state installed
//! from a peer covers their ops, or one failed here) follows its partition's log start.

use rill_domain::Namespace;
use rill_domain::partition_group;
use rill_domain::vsr::Entry;

use super::core::{GroupCore, Reach};
use crate::partition::PartitionLog;
use crate::partitions::label;
use crate::ports::Env;

impl<E: Env> GroupCore<E> {
    /// Deletes this node's sealed segments below a committed DELETE_SEGMENTS offset. A copy
    /// lacking batches below it (committed while this node lagged) waits for them from a peer
    /// first, as a send past its end does: deleting before they are in would leave the copy's
    /// segments split elsewhere than its peers', and the prefix the deletion took kept for
    /// good. False while it waits.
    pub async fn apply_delete_segments(&mut self, reach: &Reach<'_, E>, entry: &Entry, incarnation: u64) -> bool {
        let Some((key, below, _)) = partition_group::parse_delete_body(&entry.body) else { return true };
        // A copy that cannot be emptied into the op's incarnation follows the log start
        // once it is (`adopt_log_starts`).
        let (namespace, partition) = match self.copy_in(reach, key, incarnation).await {
            Ok(found) => found,
            Err(done) => return done,
        };
        let mut log = partition.log.lock().await;
        if partition.closed() || self.superseded(namespace, incarnation) {
            return true;
        }
        if below > log.next_offset() && !self.gap_given_up(reach, namespace, log.next_offset(), below) {
            return false;
        }
        match log.delete_segments_below(&reach.store.storage, below).await {
            Ok(detached) if detached.segments > 0 => reach.store.count_retention(
                namespace,
                &detached,
                "deleted the segments the partition group's committed deletion names",
            ),
            Ok(_) => {}
            Err(error) => {
                tracing::error!(%error, partition = %label(namespace), "committed segment deletion failed on this node")
            }
        }
        partition.refresh(&log);
        true
    }

    /// A state installed from a peer may record deletions this node never applied (the state
    /// covers their ops), and a committed deletion may have failed here (a disk error; tried
    /// again every second, `busy_skips` then, so a partition held by a write waits for the
    /// next): each copy in the state's incarnation follows its partition's log start.
    pub async fn adopt_log_starts(&mut self, reach: &Reach<'_, E>, busy_skips: bool) {
        for (namespace, partition) in reach.store.owned_partitions() {
            let state = self.replica.state_machine().state();
            let (start, incarnation) = (state.log_start(namespace.packed()), state.incarnation(namespace.packed()));
            let mut log = match partition.log.try_lock() {
                Some(log) => log,
                None if busy_skips => continue,
                None => partition.log.lock().await,
            };
            let same = self.copy(namespace).incarnation == incarnation;
            if start > log.first_offset() && !partition.closed() && same {
                follow_deletions(reach, namespace, &mut log, start).await;
                partition.refresh(&log);
            }
        }
    }
}

/// Brings a copy's start up to `start`, where deletions that committed while it lagged left
/// the partition (a peer's first offset, or the log start of a state installed from a
/// peer): a copy holding nothing from there starts again there, one holding more drops its
/// sealed segments that end at or below it. False if the copy could not start again.
pub(super) async fn follow_deletions<E: Env>(
    reach: &Reach<'_, E>,
    namespace: Namespace,
    log: &mut PartitionLog<E::Storage>,
    start: u64,
) -> bool {
    let storage = &reach.store.storage;
    let end = log.next_offset();
    if end < start {
        if let Err(error) = log.restart_at(storage, start).await {
            tracing::error!(%error, partition = %label(namespace), "cannot start a copy again past the segments deletions took");
            return false;
        }
        tracing::warn!(partition = %label(namespace), from = end, to = start, "deletions this copy missed took all it lacked; it goes on from where the partition starts");
        return true;
    }
    match log.delete_segments_below(storage, start).await {
        Ok(deleted) if deleted.segments > 0 => {
            let segments = deleted.segments;
            tracing::info!(partition = %label(namespace), below = start, segments, "deleted the segments deletions this copy missed took");
        }
        Ok(_) => {}
        Err(error) => {
            tracing::warn!(%error, partition = %label(namespace), "cannot delete the segments deletions this copy missed took")
        }
    }
    true
}
