//! The group's effects carried out one at a time, in order, under its lock: journal and
//! superblock writes (each completion fed back to the replica), checkpoints, commits made in
//! the partitions, messages to peers and answers to this node's waiting sends. A commit is
//! in its partition's journal before the next effect, and a checkpoint is stored only once
//! every batch it covers is on disk.

use std::collections::VecDeque;

use rill_domain::error::ErrorCode;
use rill_domain::vsr::{Checkpoint, Effect, Message, Replica};

use super::core::{GroupCore, Reach, lane_node, send_prepares_first};
use crate::partitions::label;
use crate::ports::Env;
use crate::replication::{GroupMachine, Halt};

impl<E: Env> GroupCore<E> {
    /// Calls into the group's replica and carries out what it asks; a halted replica is not
    /// driven, and its waiting sends are failed.
    pub async fn drive(
        &mut self,
        reach: &Reach<'_, E>,
        call: impl FnOnce(&mut Replica<GroupMachine>, &mut Vec<Effect>),
    ) {
        if self.halted.is_some() {
            self.fail_waiters(ErrorCode::IoError, |_| false);
            return;
        }
        let mut effects = Vec::new();
        call(&mut self.replica, &mut effects);
        self.carry_out(reach, effects).await;
    }

    /// When the replica halted itself (a broken invariant, a committed op it could not
    /// apply), the group halts until a restart: its sends are refused, its partitions keep
    /// serving reads, and the node goes on. True when it halted.
    pub(super) fn halt_if_broken(&mut self, reach: &Reach<'_, E>) -> bool {
        let Some(reason) = self.replica.halted() else { return false };
        if self.halted == Some(Halt::Broken(reason)) {
            return true;
        }
        tracing::error!(
            group = reach.group(),
            reason,
            recovery = crate::replication::BROKEN_REPLICA_RECOVERY,
            "the partition group's replica halted: its sends are refused, its partitions keep serving reads"
        );
        self.halted = Some(Halt::Broken(reason));
        reach.store.shared.telemetry.replica_halts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.fail_waiters(ErrorCode::IoError, |_| false);
        true
    }

    pub async fn carry_out(&mut self, reach: &Reach<'_, E>, effects: Vec<Effect>) {
        if self.halt_if_broken(reach) {
            return;
        }
        let mut queue: VecDeque<Effect> = effects.into();
        send_prepares_first(reach.network, &mut queue);
        let mut installed_at = 0;
        while let Some(effect) = queue.pop_front() {
            let mut more = Vec::new();
            let written = match effect {
                Effect::Persist { entry } => self.journal.append(&entry).await.map(|()| {
                    self.replica.on_prepare_persisted(entry.op, entry.checksum, &mut more);
                }),
                Effect::PersistView { superblock } => {
                    self.journal.write_superblock(&reach.store.storage, &superblock).await.map(|()| {
                        self.replica.on_view_persisted(superblock.view, &mut more);
                    })
                }
                Effect::Checkpoint { checkpoint, installed } => {
                    if installed {
                        installed_at = checkpoint.op;
                    }
                    self.checkpoint(reach, &checkpoint, installed).await
                }
                Effect::Commit { op, entry } => {
                    self.on_commit(reach, op, entry).await;
                    Ok(())
                }
                // Not while commits wait behind a gap: an installer could drop a last copy.
                Effect::Send { to, message } => {
                    let checkpoint = matches!(message, Message::NewState { checkpoint: Some(_), .. });
                    if !checkpoint || self.blocked.is_empty() {
                        reach.network.send(to, message);
                    }
                    Ok(())
                }
                // This node's own sends are answered by their commit, which follows at once,
                // once the batch is in its partition (so a poll right after sees it).
                Effect::Reply { client_id, request_number, reply } => {
                    if lane_node(client_id) != reach.membership.replica_id {
                        reach.network.send(lane_node(client_id), Message::Reply { client_id, request_number, reply });
                    }
                    Ok(())
                }
                Effect::NotPrimary { client_id, request_number, .. } => {
                    self.not_primary(reach, client_id, request_number);
                    Ok(())
                }
            };
            if let Err(error) = written {
                tracing::error!(%error, group = reach.group(), "cannot write the partition group's journal: its sends are refused until it opens again");
                self.halted = Some(Halt::Journal);
                self.fail_waiters(ErrorCode::IoError, |_| false);
                return;
            }
            if self.halt_if_broken(reach) {
                return;
            }
            queue.extend(more);
            send_prepares_first(reach.network, &mut queue);
        }
        self.after_restore(reach, installed_at).await;
    }

    /// A request this replica cannot take, not being the primary: this node's own goes again
    /// at the next tick; one forwarded here in an old view is refused at once, so its sender
    /// hears now and not at its timeout.
    fn not_primary(&mut self, reach: &Reach<'_, E>, client_id: u128, request_number: u64) {
        if lane_node(client_id) == reach.membership.replica_id {
            self.resend_later(client_id, request_number);
            return;
        }
        let reply = ErrorCode::TransientNotAccepted.code().to_le_bytes().to_vec();
        reach.network.send(lane_node(client_id), Message::Reply { client_id, request_number, reply });
    }

    /// After a checkpoint replaced the state: the copies' incarnations, log starts and
    /// offset files follow it now, the logs as soon as their gaps are filled.
    async fn after_restore(&mut self, reach: &Reach<'_, E>, installed_at: u64) {
        if !self.replica.state_machine_mut().take_restored() {
            return;
        }
        // Waiting commits a state installed from a peer covers are in it already (made now, an
        // offset store would go back in time); a restart's own checkpoints cover nothing.
        self.blocked.retain(|blocked| blocked.entry.op > installed_at);
        self.adopt_incarnations(reach).await;
        self.adopt_log_starts(reach, false).await;
        self.adopt_group_offsets(reach).await;
        if self.blocked.is_empty() {
            self.find_gaps(reach).await;
        }
    }

    /// Stores a checkpoint once the partitions hold every batch it covers on disk (its journal
    /// entries go with it). One installed from a peer is stored at once: the replica vouches
    /// for entries above it now; the partitions get what it covers from peers. Nor is one
    /// stored while offset files lack a committed change: a restart replays it.
    async fn checkpoint(
        &mut self,
        reach: &Reach<'_, E>,
        checkpoint: &Checkpoint,
        installed: bool,
    ) -> std::io::Result<()> {
        let waiting = !self.blocked.is_empty() || !self.unsynced_offsets.is_empty();
        if !installed && waiting {
            return Ok(());
        }
        let store = reach.store;
        let dirty: Vec<_> = self.dirty.iter().copied().collect();
        for namespace in dirty {
            let Ok(partition) = store.owned(namespace) else { continue };
            let mut log = partition.log.lock().await;
            let flushed = match log.flush(&store.storage, true).await {
                Ok(()) => log.offsets.sync_durably(&store.storage).await,
                failed => failed,
            };
            partition.refresh(&log);
            if let Err(error) = flushed {
                tracing::warn!(%error, installed, partition = %label(namespace), "a partition cannot be flushed for a group checkpoint");
                if !installed {
                    return Ok(());
                }
                continue;
            }
            self.dirty.remove(&namespace);
        }
        self.journal.write_checkpoint(&store.storage, checkpoint).await
    }
}
