//! Recovery after a restart: the replica kept its journal, but it may have missed views and
//! commits while it was down, so it asks everyone with a fresh nonce and waits for `f + 1`
//! answers that include the primary of the latest view among them, then adopts that primary's
//! log. Until then it votes in nothing and acknowledges nothing.

use super::message::{Effect, LogSuffix, Message};
use super::replica::{Replica, Status};
use super::state_machine::StateMachine;

impl<S: StateMachine> Replica<S> {
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

    pub(super) fn on_recovery_response(
        &mut self,
        view: u32,
        replica: u8,
        nonce: u64,
        log: Option<LogSuffix>,
        effects: &mut Vec<Effect>,
    ) {
        // A view below the one in our superblock is news of nothing: that view change (which we
        // voted in) is still under way, and a later answer will carry its outcome.
        if nonce != self.recovery_nonce || view < self.view {
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
        self.recovery_responses.clear();
        self.view = view;
        self.log_view = view;
        self.status = Status::Normal;
        self.commit_max = self.commit_max.max(log.commit);
        self.prepare_ok_sent = 0;
        self.request_persist_view(effects);
        self.start_normal_timeouts();
        self.after_log_change(effects);
    }

    /// A single replica is its own quorum: every durable entry was committed the moment it became
    /// durable, so the head is the longest chain of durable entries above the applied prefix.
    pub(super) fn recover_alone(&mut self, effects: &mut Vec<Effect>) {
        let mut head = (self.commit_min, self.commit_min_checksum);
        while let Some(child) = self.log.stashed_child(head.0, head.1) {
            head = (head.0 + 1, child);
        }
        let anchor = (self.commit_min, self.commit_min_checksum);
        assert!(self.log.adopt(anchor, head, &[]), "a chain built upward from the prefix continues it");
        self.status = Status::Normal;
        self.log_view = self.view;
        self.commit_max = head.0;
        self.start_normal_timeouts();
        self.commit_journal(effects);
    }
}
