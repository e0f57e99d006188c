//! Normal operation: a request becomes a prepare at the primary, backups acknowledge it once it
//! is durable, a quorum commits it, every replica applies committed ops in order, and the
//! primary replies. Checkpoints are taken here as the applied prefix crosses the interval.

use super::entry::{Checkpoint, ENTRY_BODY_MAX, Entry};
use super::message::{Effect, Message};
use super::replica::{Replica, Status};
use super::state_machine::StateMachine;

impl<S: StateMachine> Replica<S> {
    /// A client request. Only a ready primary prepares it; a backup names the primary; a
    /// duplicate of the client's last committed request gets the cached reply again.
    pub fn on_request(
        &mut self,
        now: u64,
        client_id: u128,
        request_number: u64,
        operation: u8,
        body: Vec<u8>,
        effects: &mut Vec<Effect>,
    ) {
        let Some(start) = self.enter(effects) else { return };
        self.request(now, client_id, request_number, operation, body, effects);
        self.finish(start, effects);
    }

    pub(super) fn request(
        &mut self,
        now: u64,
        client_id: u128,
        request_number: u64,
        operation: u8,
        body: Vec<u8>,
        effects: &mut Vec<Effect>,
    ) {
        if self.status != Status::Normal || body.len() > ENTRY_BODY_MAX {
            return;
        }
        if !self.is_primary() {
            let primary = self.primary_index(self.view);
            effects.push(Effect::NotPrimary { client_id, request_number, primary });
            return;
        }
        if let Some(session) = self.client_table.get(client_id) {
            if request_number == session.request_number {
                let reply = session.reply.clone();
                effects.push(Effect::Reply { client_id, request_number, reply });
            }
            if request_number <= session.request_number {
                return;
            }
        }
        // At most one request per client in the pipeline: a retry waits for the first's reply.
        if !self.ready_to_prepare() || self.log.in_flight(client_id, self.commit_min) {
            return;
        }
        let head_timestamp = self.log.head().map_or(self.commit_min_timestamp, |head| head.timestamp);
        let entry = Entry {
            op: self.log.op() + 1,
            view: self.view,
            timestamp: now.max(head_timestamp + 1),
            client_id,
            request_number,
            operation,
            parent: self.log.op_checksum(),
            body,
            checksum: 0,
        }
        .seal();
        if !self.log.append(entry.clone()) {
            // `ready_to_prepare` checked the room and the entry continues the head.
            self.halt("a prepare the log did not take");
            return;
        }
        self.prepare_oks.insert(entry.op, 0);
        self.persist_unwritten(effects);
        self.broadcast(Message::Prepare { view: self.view, commit: self.commit_max, entry }, effects);
    }

    /// The primary prepares only with everything committed applied (so the client table is
    /// current), no hole in its log, and room in the pipeline.
    fn ready_to_prepare(&self) -> bool {
        self.commit_min == self.commit_max
            && self.log.hole_target(self.commit_min).is_none()
            && self.log.op() - self.commit_max < self.options.pipeline_max
            && self.log.has_room()
    }

    /// What a backup does with any word from the primary (a prepare or a heartbeat): a message
    /// of an older view is ignored, one of a view it has not started asks for that view, and one
    /// of its own view resets the view-change timer and advances the known commit. True when
    /// the message is from this view's primary and the caller should go on.
    fn heard_from_primary(&mut self, view: u32, commit: u64, effects: &mut Vec<Effect>) -> bool {
        if view < self.view {
            return false;
        }
        if view > self.view || self.status == Status::ViewChange {
            self.request_start_view(view, effects);
            return false;
        }
        if self.is_primary() {
            return false;
        }
        let (ticks, jitter) = (self.ticks, self.jitter());
        self.timeouts.normal.start(ticks, jitter);
        self.commit_max = self.commit_max.max(commit);
        self.primary_commit = self.primary_commit.max(commit);
        true
    }

    pub(super) fn on_prepare(&mut self, view: u32, commit: u64, entry: Entry, effects: &mut Vec<Effect>) {
        if !self.heard_from_primary(view, commit, effects) {
            return;
        }
        if entry.op <= self.log.op() {
            // A re-sent prepare: our acknowledgement may have been lost, so vouch again.
            let held = self.log.entry(entry.op).is_some_and(|held| held.checksum == entry.checksum);
            if held && self.can_vote() && entry.op <= self.log.durable_through(self.commit_min) {
                self.prepare_ok_sent = 0;
            }
        } else {
            let gap_before = self.log.future_target();
            self.log.insert_future(entry);
            self.log.settle(self.commit_min);
            self.persist_unwritten(effects);
            if self.log.future_target() != gap_before {
                self.repair(effects);
            }
        }
        self.commit_journal(effects);
        self.send_prepare_oks(effects);
    }

    pub(super) fn on_prepare_ok(&mut self, view: u32, replica: u8, op: u64, checksum: u128, effects: &mut Vec<Effect>) {
        if self.status != Status::Normal || view != self.view || !self.is_primary() {
            return;
        }
        if op <= self.commit_max || self.log.entry(op).is_none_or(|entry| entry.checksum != checksum) {
            return;
        }
        // An acknowledgement vouches for the op and its whole prefix.
        for votes in self.prepare_oks.range_mut(..=op).map(|(_, votes)| votes) {
            *votes |= 1 << replica;
        }
        self.commit_pipeline(effects);
    }

    pub(super) fn on_commit(&mut self, view: u32, commit: u64, effects: &mut Vec<Effect>) {
        if self.heard_from_primary(view, commit, effects) {
            self.commit_journal(effects);
        }
    }

    /// After a journal write or superblock write completed: vote or acknowledge.
    pub(super) fn after_durability(&mut self, effects: &mut Vec<Effect>) {
        if self.status != Status::Normal {
            return;
        }
        if self.is_primary() {
            self.commit_pipeline(effects);
        } else {
            self.send_prepare_oks(effects);
        }
    }

    /// Backup: acknowledges the highest op it holds durably with its whole prefix. Only entries
    /// whose write completed count, and only once the superblock names this view's log.
    pub(super) fn send_prepare_oks(&mut self, effects: &mut Vec<Effect>) {
        if self.is_primary() || !self.can_vote() {
            return;
        }
        let through = self.log.durable_through(self.commit_min);
        // Ops the primary announced committed need no vote. Ops only this backup knows to be
        // committed do: a primary that took over with a lower commit number (its view change
        // heard from the others) commits them only with a quorum's votes, and nothing else
        // tells it: without this vote, backups that know an op committed and a primary that
        // does not would wait on each other for good.
        if through <= self.prepare_ok_sent || through <= self.primary_commit {
            return;
        }
        // The applied prefix's last op may have left the log (a peer's log adopted at it).
        let checksum = match through == self.commit_min {
            true => Some(self.commit_min_checksum),
            false => self.log.entry(through).map(|entry| entry.checksum),
        };
        let Some(checksum) = checksum else { return };
        self.prepare_ok_sent = through;
        let message = Message::PrepareOk { view: self.view, replica: self.replica, op: through, checksum };
        self.send(self.primary_index(self.view), message, effects);
    }

    /// Primary: counts its own durable copies, commits the highest op a quorum holds, applies.
    pub(super) fn commit_pipeline(&mut self, effects: &mut Vec<Effect>) {
        if self.can_vote() {
            let through = self.log.durable_through(self.commit_min);
            for votes in self.prepare_oks.range_mut(..=through).map(|(_, votes)| votes) {
                *votes |= 1 << self.replica;
            }
        }
        // Votes propagate to lower ops, so the highest op with a quorum commits its whole prefix.
        let quorum = self.quorum();
        let committed = self.prepare_oks.iter().rev().find(|(_, votes)| votes.count_ones() as usize >= quorum);
        if let Some((&op, _)) = committed {
            self.commit_max = op;
            self.prepare_oks = self.prepare_oks.split_off(&(op + 1));
            if self.options.commit_eagerly {
                self.broadcast(Message::Commit { view: self.view, commit: op }, effects);
            }
        }
        self.commit_journal(effects);
    }

    /// Applies committed ops in order while the log holds them. Backups apply too, so that any
    /// of them can take over as primary with the state and the client table already built.
    pub(super) fn commit_journal(&mut self, effects: &mut Vec<Effect>) {
        if self.status != Status::Normal {
            return;
        }
        while self.commit_min < self.commit_max.min(self.log.op()) && self.halted.is_none() {
            let Some(entry) = self.log.entry(self.commit_min + 1).cloned() else { break };
            let reply = self.is_primary();
            self.apply_next(entry, reply, effects);
        }
    }

    /// Applies the op after the applied prefix (`entry` must continue it), answers its client
    /// when `reply`, and takes a checkpoint at each interval. An op that does not continue
    /// the prefix, or that the state machine could not apply, halts the replica.
    pub(super) fn apply_next(&mut self, entry: Entry, reply: bool, effects: &mut Vec<Effect>) {
        let op = self.commit_min + 1;
        if entry.op != op || entry.parent != self.commit_min_checksum {
            self.halt("applying an op that does not follow the applied prefix");
            return;
        }
        let result = self.state_machine.apply(op, entry.timestamp, entry.operation, &entry.body);
        if let Some(reason) = self.state_machine.unapplied() {
            self.halt(reason);
            return;
        }
        self.client_table.record(entry.client_id, entry.request_number, op, result.clone());
        self.commit_min = op;
        self.commit_min_checksum = entry.checksum;
        self.commit_min_timestamp = entry.timestamp;
        if reply {
            let (client_id, request_number) = (entry.client_id, entry.request_number);
            effects.push(Effect::Reply { client_id, request_number, reply: result });
        }
        effects.push(Effect::Commit { op, entry });
        if op.is_multiple_of(self.options.checkpoint_interval) {
            self.take_checkpoint(effects);
        }
    }

    /// Snapshots the applied state and trims the log, keeping one interval of history so that
    /// peers a little behind can still repair instead of needing a state transfer.
    fn take_checkpoint(&mut self, effects: &mut Vec<Effect>) {
        let checkpoint = self.applied_checkpoint();
        self.log.trim(self.commit_min.saturating_sub(self.options.checkpoint_interval));
        self.checkpoint = Some(checkpoint.clone());
        effects.push(Effect::Checkpoint { checkpoint, installed: false });
    }

    /// The applied state as a checkpoint at `commit_min`.
    pub(super) fn applied_checkpoint(&self) -> Checkpoint {
        let state = self.client_table.encode_state(&self.state_machine.snapshot());
        Checkpoint {
            op: self.commit_min,
            checksum: self.commit_min_checksum,
            timestamp: self.commit_min_timestamp,
            state,
        }
    }

    pub(super) fn on_heartbeat_timeout(&mut self, effects: &mut Vec<Effect>) {
        self.timeouts.heartbeat.start(self.ticks, 0);
        if self.status == Status::Normal && self.is_primary() {
            self.broadcast(Message::Commit { view: self.view, commit: self.commit_max }, effects);
        }
    }

    /// Primary: re-sends every uncommitted prepare to the backups that have not vouched for it.
    pub(super) fn on_prepare_timeout(&mut self, effects: &mut Vec<Effect>) {
        self.timeouts.prepare.start(self.ticks, 0);
        if self.status != Status::Normal || !self.is_primary() {
            return;
        }
        for (&op, &votes) in &self.prepare_oks {
            let Some(entry) = self.log.entry(op) else { continue };
            for backup in (0..self.replica_count).filter(|&r| r != self.replica && votes & (1 << r) == 0) {
                let message = Message::Prepare { view: self.view, commit: self.commit_max, entry: entry.clone() };
                self.send(backup, message, effects);
            }
        }
    }
}
