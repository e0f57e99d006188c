//! A partition group halted by a journal that could not be written (a full disk, a device
//! error): it stops being driven, takes no sends and answers no peer; once the disk works it
//! opens again from its files, as a restart opens it, without restarting the node: its
//! replica recovers from its peers (VSR's recovery protocol, with a fresh nonce), and the
//! commits its journal holds are applied again, which skips what its partitions hold
//! already.

use super::core::{GroupCore, Reach};
use super::group::open_replication;
use super::records::{Gaps, Repairs};
use crate::ports::Env;
use crate::replication::{Halt, Replication, TICK_MS, reopening_seed};

/// How often a group halted by its journal tries to open again (5 s): each try reads the
/// journal whole and runs a recovery with the peers.
const REOPEN_TICKS: u64 = 5_000 / TICK_MS;

impl<E: Env> GroupCore<E> {
    /// Opens a group halted by a failed journal write again from its files, every
    /// `REOPEN_TICKS` while the data volume is above its free-space floor. The lanes and
    /// request numbers go on as they were (the client table knows them); the commits
    /// waiting for partitions, gaps and repairs start empty as at a start, and the
    /// partitions written since the last checkpoint stay marked to be synced before the next.
    pub async fn reopen_halted(&mut self, reach: &Reach<'_, E>) {
        let due = self.ticks.is_multiple_of(REOPEN_TICKS);
        if self.halted != Some(Halt::Journal) || !due || reach.store.below_floor() {
            return;
        }
        let seed = reopening_seed(self.seed, reach.store.now_us());
        let (replication, effects) = match open_replication(reach.store, reach.membership, seed).await {
            Ok(opened) => opened,
            Err(error) => {
                tracing::warn!(%error, group = reach.group(), "the partition group's journal does not open yet");
                return;
            }
        };
        let Replication { replica, journal, .. } = replication;
        self.journal = journal.into_inner();
        self.replica = replica.into_inner();
        self.seed = seed;
        self.blocked.clear();
        self.gaps = Gaps::new();
        self.repairs = Repairs::new();
        self.halted = None;
        tracing::warn!(group = reach.group(), "the partition group's journal opened again; its replica recovers");
        self.carry_out(reach, effects).await;
        // Not `note_unrecorded_partitions`, as at a start: since then every write to these
        // partitions came from this group, some from commits applied while it was halted
        // (blocked ones, gaps filled) that its journal never held; they are the group's, and
        // applied again they are skipped.
        self.note_journaled_resets();
    }
}
