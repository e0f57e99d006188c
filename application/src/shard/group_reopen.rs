//! Replicas halted by a journal that could not be written (a full disk, a device error): a
//! partition group's stops being driven, takes no sends and answers no peer; once the disk
//! works it opens again from its files, as a restart opens it, without restarting the node:
//! its replica recovers from its peers (VSR's recovery protocol, with a fresh nonce), and
//! the commits its journal holds are applied again, which skips what its partitions hold
//! already. The metadata replica does the same (`replication.rs`, `reopen_halted_metadata`).

use super::Shard;
use super::group::PartitionGroup;
use super::group_transfer::{Gaps, Repairs};
use crate::ports::Env;
use crate::replication::{GroupMachine, JournalError, Membership, Replication, TICK_MS, group_options};
use rill_domain::vsr::Effect;

/// How often a group halted by its journal tries to open again (5 s): each try reads the
/// journal whole and runs a recovery with the peers.
const REOPEN_TICKS: u64 = 5_000 / TICK_MS;

/// Why a replica (a partition group's, or the metadata's) is not driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Halt {
    /// A journal, superblock or checkpoint write failed: the replica opens again once the
    /// disk works.
    Journal,
    /// Until a restart: a partition holds messages its group has no record of, and only an
    /// operator can say which copy is right (`refuse_unrecorded_partitions`); or the
    /// metadata journal, opened again, holds less than the node applied.
    UntilRestart,
}

/// A seed for a reopening: differs from the last one, so the recovery's nonce does too.
pub(super) fn reopening_seed(last: u64, now_us: u64) -> u64 {
    (last ^ now_us.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1)
}

impl<E: Env> Shard<E> {
    /// Opens a group halted by a failed journal write again from its files, every
    /// `REOPEN_TICKS` while the data volume is above its free-space floor. The lanes and
    /// request numbers go on as they were (the client table knows them); the commits
    /// waiting for partitions, gaps and repairs start empty as at a start, and the
    /// partitions written since the last checkpoint stay marked to be synced before the next.
    pub(super) async fn reopen_halted_group(&self, group: &PartitionGroup<E>) {
        let due = group.ticks.get().is_multiple_of(REOPEN_TICKS);
        if group.halted.get() != Some(Halt::Journal) || !due || self.below_floor() {
            return;
        }
        let _pump = group.pump.lock().await;
        let seed = reopening_seed(group.seed.get(), self.now_us());
        let (replication, effects) = match self.open_group_replication(group.replication.membership, seed).await {
            Ok(opened) => opened,
            Err(error) => {
                tracing::warn!(%error, group = self.shard_id, "the partition group's journal does not open yet");
                return;
            }
        };
        *group.replication.journal.lock().await = replication.journal.into_inner();
        *group.replica() = replication.replica.into_inner();
        group.seed.set(seed);
        group.blocked.borrow_mut().clear();
        *group.gaps.borrow_mut() = Gaps::new();
        *group.repairs.borrow_mut() = Repairs::new();
        group.halted.set(None);
        tracing::warn!(group = self.shard_id, "the partition group's journal opened again; its replica recovers");
        self.carry_out_group(group, effects).await;
        // Not `refuse_unrecorded_partitions`, as at a start: since then every write to these
        // partitions came from this group, some from commits applied while it was halted
        // (blocked ones, gaps filled) that its journal never held (seed 1246 of the
        // disk-restart runs); they are the group's, and applied again they are skipped.
        self.note_journaled_resets(group);
    }

    /// This shard's replica of its partition group, opened from `<data>/groups/<shard>/`
    /// with the effects of opening, none carried out yet.
    pub(super) async fn open_group_replication(
        &self,
        membership: Membership,
        seed: u64,
    ) -> Result<(Replication<E::Storage, GroupMachine>, Vec<Effect>), JournalError> {
        let dir = self.data_path().join("groups").join(self.shard_id.to_string());
        let options = group_options(self.shard_id, membership.replica_count);
        Replication::open_with(&self.storage, &dir, membership, seed, options, GroupMachine::default()).await
    }

    /// Whether the data volume is below its free-space floor: a reopened journal's first
    /// write would fail again.
    pub(super) fn below_floor(&self) -> bool {
        self.shared.telemetry.data.below_floor.load(std::sync::atomic::Ordering::Relaxed)
    }
}
