//! Repair and state transfer. A hole below the log's run, or a gap below early prepares, is
//! filled by asking every peer for the exact `(op, checksum)` the chain vouches for; any peer
//! holding that copy answers, whatever its status, since the checksum proves it. A replica too
//! far behind (or whose peers trimmed the ops it needs) asks one peer in its view for committed
//! state instead: a checkpoint when needed, then committed entries.

use super::client_table::ClientTable;
use super::entry::{Checkpoint, Entry};
use super::message::{Effect, Message};
use super::options::{REPAIR_ATTEMPTS_MAX, REPAIR_BATCH, STATE_BATCH, within_body_budget};
use super::replica::{Replica, Status};
use super::state_machine::StateMachine;

impl<S: StateMachine> Replica<S> {
    /// Asks for whatever the log is missing; called on the repair timeout and when a gap appears.
    pub(super) fn repair(&mut self, effects: &mut Vec<Effect>) {
        if self.status != Status::Normal {
            return;
        }
        // The hole below the run comes first: the applied prefix waits on it.
        let hole = self.log.hole_target(self.commit_min).map(|target| (target, target.0 - self.commit_min));
        let gap = self.log.future_target().map(|target| (target, target.0 - self.log.op()));
        if let Some((target, depth)) = hole.or(gap) {
            if self.repair_target != Some(target) {
                self.repair_target = Some(target);
                self.repair_attempts = 0;
            }
            self.repair_attempts += 1;
            // Peers keep about one checkpoint interval below their own: a deeper hole, or one
            // that repair does not fill, needs committed state instead.
            if self.repair_attempts > REPAIR_ATTEMPTS_MAX || depth > self.options.checkpoint_interval {
                self.repair_attempts = 0;
                self.request_state(effects);
            } else {
                let (op, checksum) = target;
                self.broadcast(Message::RequestPrepare { replica: self.replica, op, checksum }, effects);
            }
        } else if self.commit_max > self.log.op() {
            // Committed ops above the head, and no prepare in sight to chain them from.
            self.request_state(effects);
        }
    }

    /// Asks one random peer, not all: a state transfer may carry a whole checkpoint.
    fn request_state(&mut self, effects: &mut Vec<Effect>) {
        if self.replica_count == 1 {
            return;
        }
        let offset = 1 + self.prng.below(u64::from(self.replica_count) - 1) as u8;
        let peer = (self.replica + offset) % self.replica_count;
        self.send(peer, Message::GetState { view: self.view, replica: self.replica, commit: self.commit_min }, effects);
    }

    pub(super) fn on_request_prepare(&mut self, replica: u8, op: u64, checksum: u128, effects: &mut Vec<Effect>) {
        let mut entries = self.log.chain_below(op, checksum, REPAIR_BATCH);
        within_body_budget(&mut entries);
        if !entries.is_empty() {
            self.send(replica, Message::Repair { replica: self.replica, entries }, effects);
        }
    }

    pub(super) fn on_repair(&mut self, entries: Vec<Entry>, effects: &mut Vec<Effect>) {
        let targets = (self.log.hole_target(self.commit_min), self.log.future_target());
        for entry in entries {
            self.log.offer(entry, self.commit_min);
        }
        self.log.settle(self.commit_min);
        self.persist_unwritten(effects);
        if self.status != Status::Normal {
            return;
        }
        self.commit_journal(effects);
        self.after_durability(effects);
        // Progress: ask for the next missing piece right away rather than at the next timeout.
        if (self.log.hole_target(self.commit_min), self.log.future_target()) != targets {
            self.repair(effects);
        }
    }

    /// Answers with committed state only, which is the same on every replica of the view.
    pub(super) fn on_get_state(&mut self, view: u32, replica: u8, commit: u64, effects: &mut Vec<Effect>) {
        if self.status != Status::Normal || view != self.view || self.commit_min <= commit {
            return;
        }
        // The asker continues from its own applied prefix when our run still reaches it, and
        // from our checkpoint when we trimmed past it.
        let (checkpoint, base) = if self.log.entry(commit + 1).is_some() {
            (None, commit)
        } else {
            match &self.checkpoint {
                Some(checkpoint) if checkpoint.op > commit => (Some(checkpoint.clone()), checkpoint.op),
                // Our run starts above the asker's commit, and our checkpoint is not above it:
                // a restart that replayed a long journal applied the ops between and left
                // them out of its run (`reopen_log`). With every peer so, the asker could
                // never fill its hole (a new primary would stay below its commit for good).
                // The applied state is committed too, and goes as the checkpoint.
                _ => (Some(self.applied_checkpoint()), self.commit_min),
            }
        };
        let count = (self.commit_min - base).min(STATE_BATCH as u64) as usize;
        let mut entries = self.log.entries_from(base + 1, count);
        within_body_budget(&mut entries);
        if entries.first().is_some_and(|first| first.op != base + 1) {
            entries.clear();
        }
        if checkpoint.is_none() && entries.is_empty() {
            return;
        }
        let message = Message::NewState { view: self.view, replica: self.replica, checkpoint, entries };
        self.send(replica, message, effects);
    }

    pub(super) fn on_new_state(
        &mut self,
        view: u32,
        checkpoint: Option<Checkpoint>,
        entries: Vec<Entry>,
        effects: &mut Vec<Effect>,
    ) {
        if self.status != Status::Normal || view != self.view {
            return;
        }
        if let Some(checkpoint) = checkpoint
            && checkpoint.op > self.commit_min
        {
            // A primary's head is at or above every committed op of its view.
            let beyond_head = self.is_primary() && checkpoint.op > self.log.op();
            if beyond_head || !self.log.can_rebase(checkpoint.op, checkpoint.checksum) {
                return;
            }
            if !self.install_checkpoint(checkpoint.clone()) {
                return;
            }
            effects.push(Effect::Checkpoint { checkpoint, installed: true });
        }
        if let Some(top) = entries.last().map(|top| (top.op, top.checksum)) {
            // Committed entries of this view are canonical: above the head they become the head.
            if top.0 > self.log.op() && !self.is_primary() {
                let anchor = (self.commit_min, self.commit_min_checksum);
                if !self.log.adopt(anchor, top, &entries) {
                    return;
                }
            } else {
                for entry in entries {
                    self.log.offer(entry, self.commit_min);
                }
            }
            self.commit_max = self.commit_max.max(top.0.min(self.log.op()));
        }
        let commit_max = self.commit_max;
        self.prepare_oks.retain(|&op, _| op > commit_max);
        self.after_log_change(effects);
    }

    /// Replaces the applied state with a checkpoint's; false (nothing changed) if it does not
    /// decode. The caller has checked that the log agrees with it.
    pub(super) fn install_checkpoint(&mut self, checkpoint: Checkpoint) -> bool {
        let capacity = self.options.client_table_max;
        let Some((table, snapshot)) = ClientTable::decode_state(&checkpoint.state, capacity) else { return false };
        if self.state_machine.restore(snapshot).is_err() {
            return false;
        }
        self.client_table = table;
        self.commit_min = checkpoint.op;
        self.commit_min_checksum = checkpoint.checksum;
        self.commit_min_timestamp = checkpoint.timestamp;
        self.commit_max = self.commit_max.max(checkpoint.op);
        self.log.rebase(checkpoint.op, checkpoint.checksum);
        self.checkpoint = Some(checkpoint);
        true
    }
}
