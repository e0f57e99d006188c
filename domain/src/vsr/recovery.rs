//! Restart and recovery. A restarted replica rebuilds from its journal the log its superblock
//! names, then asks everyone with a fresh nonce and waits for `f + 1` answers that include the
//! primary of the latest view among them, and adopts that primary's log. Until then it
//! acknowledges nothing. When recovery cannot complete (peers are recovering too, as after a
//! whole-cluster restart, or it takes too long), a replica whose journal is whole joins a view
//! change above its superblock's view instead, offering its durable log: it holds every op the
//! replica acknowledged, so the new primary's choice (highest log view, then highest op) among a
//! quorum of them keeps every committed op.

use std::collections::BTreeMap;

use super::entry::Entry;
use super::log::{Durability, Slot};
use super::message::{Effect, LogSuffix, Message};
use super::replica::{Replica, Status};
use super::state_machine::StateMachine;

impl<S: StateMachine> Replica<S> {
    /// Rebuilds the log the superblock names: the chain below the head the log view began with
    /// (or the applied prefix, when that is higher), extended one op at a time by entries
    /// prepared in the log view itself. Every other entry stays a candidate. Returns whether the
    /// chain reaches the applied prefix without a gap; it does unless the journal lost entries.
    ///
    /// A chain longer than a run gets between checkpoints (the caller kept journal entries
    /// past a checkpoint it could not yet make durable) is applied from the bottom up to
    /// `pipeline_max` below its top. Those ops are committed: a primary prepares op `n` only
    /// once `n - pipeline_max` is committed, so every op at least `pipeline_max` below the
    /// chain's top was committed when the top was prepared, and the chain is the one the top
    /// names.
    pub(super) fn reopen_log(&mut self, entries: Vec<Entry>, effects: &mut Vec<Effect>) -> bool {
        let mut anchor = (self.commit_min, self.commit_min_checksum);
        let journal: BTreeMap<(u64, u128), Entry> = entries
            .into_iter()
            .filter(|entry| entry.op > anchor.0 && entry.verify())
            .map(|entry| ((entry.op, entry.checksum), entry))
            .collect();
        let mut top = if self.log_view_head.0 > anchor.0 { self.log_view_head } else { anchor };
        // Entries of one view are unique per op (one primary made them), so the child is too.
        while let Some(child) = journal
            .range((top.0 + 1, 0)..=(top.0 + 1, u128::MAX))
            .map(|(_, entry)| entry)
            .find(|entry| entry.parent == top.1 && entry.view == self.log_view)
        {
            top = (child.op, child.checksum);
        }
        // From the top down.
        let mut chain = Vec::new();
        let mut want = top;
        while want.0 > anchor.0 {
            let Some(entry) = journal.get(&want) else { break };
            want = (want.0 - 1, entry.parent);
            chain.push((entry.op, entry.checksum));
        }
        let whole = want == anchor;
        // Longer than a run gets between checkpoints: applied through the committed bottom,
        // so the log keeps room: a full run with a hole below it can never be repaired, and a
        // view change would spread such a run to every replica.
        let pipeline = self.options.pipeline_max as usize;
        if whole && chain.len() > self.options.log_capacity() - 2 * pipeline {
            for key in chain.drain(pipeline..).rev() {
                self.apply_next(journal[&key].clone(), false, effects);
                if self.halted.is_some() {
                    return false;
                }
            }
            self.commit_max = self.commit_max.max(self.commit_min);
            anchor = (self.commit_min, self.commit_min_checksum);
            self.log.rebase(anchor.0, anchor.1);
        }
        let durable = |entry: &Entry| Slot { entry: entry.clone(), durability: Durability::Durable };
        if whole {
            // The chain goes in first: it was a run, so it fits, and no candidate can evict it.
            for key in &chain {
                self.log.stash(durable(&journal[key]));
            }
            if !self.log.adopt(anchor, top, &[]) {
                // A chain built down to the prefix continues it.
                self.halt("the journal's chain does not continue the applied prefix");
                return false;
            }
        }
        for entry in journal.values().filter(|entry| entry.op > anchor.0) {
            self.log.stash(durable(entry));
        }
        whole
    }

    /// Enters recovering status and asks everyone. A replica that may offer its own log also
    /// arms the fallback: if recovery has not completed when the timeout fires, it gives up.
    pub(super) fn start_recovery(&mut self, effects: &mut Vec<Effect>) {
        self.status = Status::Recovering;
        self.recovery_nonce = self.prng.next_u64() | 1;
        self.send_recovery(effects);
        if !self.damaged {
            let (ticks, jitter) = (self.ticks, self.jitter());
            self.timeouts.view_change.start(ticks, jitter);
        }
    }

    pub(super) fn send_recovery(&mut self, effects: &mut Vec<Effect>) {
        self.broadcast(Message::Recovery { replica: self.replica, nonce: self.recovery_nonce }, effects);
        let (ticks, jitter) = (self.ticks, self.jitter());
        self.timeouts.resend.start(ticks, jitter);
    }

    /// Only replicas in normal status answer; only the primary sends its log.
    pub(super) fn on_recovery(&mut self, replica: u8, nonce: u64, effects: &mut Vec<Effect>) {
        if self.status != Status::Normal {
            return;
        }
        let log = self.is_primary().then(|| self.log.suffix(self.commit_max));
        self.send(replica, Message::RecoveryResponse { view: self.view, replica: self.replica, nonce, log }, effects);
    }

    /// A peer recovers too. With this replica, a quorum is recovering, so at most `f` replicas
    /// can be normal and no recovery can complete: the recovering ones must start a view.
    pub(super) fn on_peer_recovering(&mut self, replica: u8, effects: &mut Vec<Effect>) {
        self.recovering_peers |= 1 << replica;
        let recovering = self.recovering_peers.count_ones() as usize + 1;
        if recovering >= self.quorum() && self.may_abandon_recovery(self.view + 1) {
            self.abandon_recovery(self.view + 1, effects);
        }
    }

    /// A recovering replica may vote in `view` if its journal is whole and `view` is above every
    /// view it promised in an earlier lifetime.
    pub(super) fn may_abandon_recovery(&self, view: u32) -> bool {
        self.status == Status::Recovering && self.replica_count > 1 && !self.damaged && view > self.view
    }

    /// Gives up on recovery and starts (or joins) the view change for `view`, offering the log
    /// rebuilt from the journal with the log view the superblock holds. That log holds every op
    /// this replica acknowledged, so it votes like a replica that was merely cut off.
    pub(super) fn abandon_recovery(&mut self, view: u32, effects: &mut Vec<Effect>) {
        if !self.may_abandon_recovery(view) {
            self.halt("abandoned a recovery that may not be abandoned");
            return;
        }
        self.leave_recovery();
        self.status = Status::ViewChange;
        self.start_view_change(view, effects);
    }

    /// Forgets the recovery under way (its answers, its peers) as the replica leaves it.
    pub(super) fn leave_recovery(&mut self) {
        self.recovery_responses.clear();
        self.recovering_peers = 0;
        self.recovery_below_view = 0;
    }

    pub(super) fn on_recovery_response(
        &mut self,
        view: u32,
        replica: u8,
        nonce: u64,
        log: Option<LogSuffix>,
        effects: &mut Vec<Effect>,
    ) {
        if nonce != self.recovery_nonce {
            return;
        }
        // A view below the one in our superblock: either that view change (which we voted in) is
        // still under way, or it never formed. A quorum of replicas normal below our view means
        // it never did (each would have promised it first), and nobody will move on by itself:
        // ask for a view change above our promise. Asking is no vote; a recovering replica only
        // adopts the resulting view's log.
        if view < self.view {
            self.recovery_below_view |= 1 << replica;
            if self.recovery_below_view.count_ones() as usize >= self.quorum() {
                self.recovery_below_view = 0;
                self.broadcast(Message::StartViewChange { view: self.view + 1, replica: self.replica }, effects);
            }
            return;
        }
        if log.is_some() && self.primary_index(view) != replica {
            return;
        }
        self.recovery_responses.insert(replica, (view, log));
        if self.recovery_responses.len() < self.quorum() {
            return;
        }
        let view = self.recovery_responses.values().map(|(view, _)| *view).max().unwrap_or(0);
        let Some((primary_view, Some(log))) = self.recovery_responses.get(&self.primary_index(view)) else { return };
        if *primary_view != view {
            return;
        }
        let log = log.clone();
        let anchor = (self.commit_min, self.commit_min_checksum);
        if !self.log.adopt(anchor, (log.op, log.op_checksum), &log.entries) {
            return;
        }
        self.leave_recovery();
        // The primary's log is canonical: whatever the journal lacked, this log replaces it.
        self.damaged = false;
        self.view = view;
        self.log_view = view;
        self.log_view_head = (log.op, log.op_checksum);
        self.status = Status::Normal;
        self.commit_max = self.commit_max.max(log.commit);
        self.prepare_ok_sent = 0;
        self.primary_commit = log.commit;
        self.timeouts.view_change.stop();
        self.start_normal_timeouts();
        self.after_log_change(effects);
    }

    /// A single replica is its own quorum: every durable entry was committed the moment it became
    /// durable, so the rebuilt log is committed through its head.
    pub(super) fn recover_alone(&mut self, effects: &mut Vec<Effect>) {
        self.status = Status::Normal;
        if self.log_view != self.view {
            self.log_view = self.view;
            self.log_view_head = (self.log.op(), self.log.op_checksum());
        }
        self.commit_max = self.log.op();
        self.start_normal_timeouts();
        self.commit_journal(effects);
    }
}
