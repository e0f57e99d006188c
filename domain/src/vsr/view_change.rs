//! The view change: `StartViewChange` until `f` peers agree, `DoViewChange` (with the log) to the
//! new primary once the view is durable, and `StartView` from the new primary, which picks the
//! log with the highest `(log_view, op)`: it holds every op that may have committed.

use super::message::{Effect, LogSuffix, Message};
use super::replica::{DoViewChangeVote, Replica, Status};
use super::state_machine::StateMachine;

impl<S: StateMachine> Replica<S> {
    /// Moves to `view` in view-change status and tells everyone.
    pub(super) fn start_view_change(&mut self, view: u32, effects: &mut Vec<Effect>) {
        assert!(view > self.view && self.status != Status::Recovering);
        self.view = view;
        self.status = Status::ViewChange;
        // Votes, acknowledgements and early prepares of the old view mean nothing in the new one.
        self.start_view_change_from = 0;
        self.do_view_change_sent = false;
        self.do_view_changes.clear();
        self.prepare_oks.clear();
        self.prepare_ok_sent = 0;
        self.primary_commit = 0;
        self.log.clear_future();
        let (ticks, jitter) = (self.ticks, self.jitter());
        for timeout in [&mut self.timeouts.heartbeat, &mut self.timeouts.prepare, &mut self.timeouts.normal] {
            timeout.stop();
        }
        self.timeouts.repair.stop();
        self.timeouts.view_change.start(ticks, jitter);
        self.timeouts.resend.start(ticks, 0);
        self.broadcast(Message::StartViewChange { view, replica: self.replica }, effects);
        self.maybe_send_do_view_change(effects);
    }

    pub(super) fn on_start_view_change(&mut self, view: u32, replica: u8, effects: &mut Vec<Effect>) {
        if view < self.view || (view == self.view && self.status != Status::ViewChange) {
            return;
        }
        // Joining a higher view at once, instead of waiting for our own timeout, lets one
        // replica's timeout carry the whole cluster into the next view.
        if view > self.view {
            self.start_view_change(view, effects);
        }
        self.start_view_change_from |= 1 << replica;
        self.maybe_send_do_view_change(effects);
    }

    /// With `f` peers in this view change, sends `DoViewChange` once the view is durable: a
    /// replica must never forget a view it handed its log to.
    pub(super) fn maybe_send_do_view_change(&mut self, effects: &mut Vec<Effect>) {
        let peers = self.start_view_change_from.count_ones() as usize;
        if self.status != Status::ViewChange || self.do_view_change_sent || peers + 1 < self.quorum() {
            return;
        }
        // The superblock write itself is emitted at the end of the handler (`sync_superblock`).
        if self.superblock.view < self.view {
            return;
        }
        self.do_view_change_sent = true;
        self.send_do_view_change(effects);
    }

    fn send_do_view_change(&mut self, effects: &mut Vec<Effect>) {
        let vote = DoViewChangeVote { log_view: self.log_view, log: self.log.suffix(self.commit_max) };
        let primary = self.primary_index(self.view);
        if primary == self.replica {
            self.record_do_view_change(self.replica, vote, effects);
        } else {
            let message = Message::DoViewChange {
                view: self.view,
                replica: self.replica,
                log_view: vote.log_view,
                log: vote.log,
            };
            self.send(primary, message, effects);
        }
    }

    pub(super) fn on_do_view_change(
        &mut self,
        view: u32,
        replica: u8,
        vote: DoViewChangeVote,
        effects: &mut Vec<Effect>,
    ) {
        if view < self.view {
            return;
        }
        if view == self.view && self.status == Status::Normal {
            // Our StartView was lost on the way to this replica.
            if self.is_primary() {
                self.send_start_view(replica, effects);
            }
            return;
        }
        if view > self.view {
            self.start_view_change(view, effects);
        }
        // Its sender is in this view change too.
        self.start_view_change_from |= 1 << replica;
        if self.primary_index(view) == self.replica {
            self.record_do_view_change(replica, vote, effects);
        }
        self.maybe_send_do_view_change(effects);
    }

    fn record_do_view_change(&mut self, replica: u8, vote: DoViewChangeVote, effects: &mut Vec<Effect>) {
        self.do_view_changes.insert(replica, vote);
        if self.do_view_changes.len() >= self.quorum() && self.do_view_changes.contains_key(&self.replica) {
            self.start_view_as_primary(effects);
        }
    }

    /// The new primary installs the best log of its quorum and starts the view.
    fn start_view_as_primary(&mut self, effects: &mut Vec<Effect>) {
        let votes = std::mem::take(&mut self.do_view_changes);
        let commit = votes.values().map(|vote| vote.log.commit).max().unwrap_or(0);
        let best =
            votes.iter().max_by_key(|(replica, vote)| (vote.log_view, vote.log.op, std::cmp::Reverse(**replica)));
        let Some((&best_replica, _)) = best else { return };
        // The other logs' entries are candidates for the ops the best log does not carry.
        for (_, vote) in votes.iter().filter(|(replica, _)| **replica != best_replica) {
            for entry in &vote.log.entries {
                self.log.offer(entry.clone(), self.commit_min);
            }
        }
        let best = &votes[&best_replica].log;
        let anchor = (self.commit_min, self.commit_min_checksum);
        if !self.log.adopt(anchor, (best.op, best.op_checksum), &best.entries) {
            return;
        }
        self.status = Status::Normal;
        self.log_view = self.view;
        self.log_view_head = (self.log.op(), self.log.op_checksum());
        // Every op a quorum member knew committed is in the best log; clamping to the head only
        // guards against a malformed vote.
        self.commit_max = self.commit_max.max(commit).min(self.log.op()).max(self.commit_min);
        self.prepare_oks = (self.commit_max + 1..=self.log.op()).map(|op| (op, 0)).collect();
        self.start_normal_timeouts();
        for backup in (0..self.replica_count).filter(|&r| r != self.replica) {
            self.send_start_view(backup, effects);
        }
        self.after_log_change(effects);
    }

    fn send_start_view(&self, to: u8, effects: &mut Vec<Effect>) {
        self.send(to, Message::StartView { view: self.view, log: self.log.suffix(self.commit_max) }, effects);
    }

    /// Also taken by a recovering replica: the log of a started view is canonical, so adopting
    /// it ends recovery (and repairs a damaged journal) as a quorum of recovery answers would.
    pub(super) fn on_start_view(&mut self, view: u32, log: LogSuffix, effects: &mut Vec<Effect>) {
        if view < self.view || (view == self.view && self.status == Status::Normal) {
            return;
        }
        if self.primary_index(view) == self.replica {
            return;
        }
        // The new primary's log is canonical for the view: it replaces ours from its head down,
        // keeping our copies (and their durability) wherever the checksums agree.
        let anchor = (self.commit_min, self.commit_min_checksum);
        if !self.log.adopt(anchor, (log.op, log.op_checksum), &log.entries) {
            return;
        }
        self.leave_recovery();
        self.damaged = false;
        self.view = view;
        self.status = Status::Normal;
        self.log_view = view;
        self.log_view_head = (log.op, log.op_checksum);
        self.commit_max = self.commit_max.max(log.commit);
        self.start_view_change_from = 0;
        self.do_view_change_sent = false;
        self.do_view_changes.clear();
        self.prepare_oks.clear();
        self.prepare_ok_sent = 0;
        self.primary_commit = log.commit;
        // Acknowledgements in the new view wait until the superblock names its log, which it does
        // once that log is durable (`sync_superblock`).
        self.start_normal_timeouts();
        self.after_log_change(effects);
    }

    /// After the log was replaced: persist what is new, apply, vote or acknowledge, repair.
    pub(super) fn after_log_change(&mut self, effects: &mut Vec<Effect>) {
        self.log.settle(self.commit_min);
        self.persist_unwritten(effects);
        self.commit_journal(effects);
        self.after_durability(effects);
        self.repair(effects);
    }

    pub(super) fn request_start_view(&mut self, view: u32, effects: &mut Vec<Effect>) {
        let primary = self.primary_index(view);
        if primary != self.replica {
            self.send(primary, Message::RequestStartView { view, replica: self.replica }, effects);
        }
    }

    pub(super) fn on_request_start_view(&mut self, view: u32, replica: u8, effects: &mut Vec<Effect>) {
        if self.status == Status::Normal && view == self.view && self.is_primary() {
            self.send_start_view(replica, effects);
        }
    }

    /// View change and recovery: messages that may have been lost go out again.
    pub(super) fn on_resend_timeout(&mut self, effects: &mut Vec<Effect>) {
        self.timeouts.resend.start(self.ticks, 0);
        match self.status {
            Status::ViewChange => {
                self.broadcast(Message::StartViewChange { view: self.view, replica: self.replica }, effects);
                if self.do_view_change_sent && !self.is_primary() {
                    self.send_do_view_change(effects);
                }
            }
            Status::Recovering => self.send_recovery(effects),
            Status::Normal => self.timeouts.resend.stop(),
        }
    }
}
