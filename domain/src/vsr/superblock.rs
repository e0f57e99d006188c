//! When the superblock is written and what it holds. The view is promised (written) before the
//! replica sends `DoViewChange`; the log view and the head it began with are written only once
//! the log they name is durable from its start through that head. Votes in a view wait until
//! the superblock names that view's log, so a restart rebuilds from the journal a log that holds
//! every op the replica acknowledged (`Replica::reopen_log`). A damaged journal is declared in
//! the superblock at once, and stays declared until a peer's log is named in its place.

use super::message::{Effect, Superblock};
use super::replica::{Replica, Status};
use super::state_machine::StateMachine;

impl<S: StateMachine> Replica<S> {
    /// Whether this replica may vouch for entries in its current view: it is normal and its
    /// superblock names this view's log, trusted.
    pub(super) fn can_vote(&self) -> bool {
        let superblock = &self.superblock;
        self.status == Status::Normal
            && superblock.view == self.view
            && superblock.log_view == self.view
            && !superblock.damaged
    }

    /// Whether the log is durable, with no hole, from the start of its run through the head the
    /// log view began with (everything above that head was prepared in the log view).
    fn log_durable_through_view_head(&self) -> bool {
        self.log.durable_prefix(self.commit_min).is_some_and(|through| through >= self.log_view_head.0)
    }

    /// What the superblock should hold now.
    fn superblock_target(&self) -> Superblock {
        let durable = self.superblock;
        let durable_log = (durable.log_view, (durable.head_op, durable.head_checksum), durable.damaged);
        let log = (self.log_view, self.log_view_head, false);
        // The log is named (and a damaged journal declared whole again) once it is durable; a
        // recovering replica names nothing: it has not adopted anyone's log yet.
        let name = durable_log != log
            && self.status != Status::Recovering
            && !self.damaged
            && self.log_durable_through_view_head();
        let (log_view, head, damaged) =
            if name { log } else { (durable_log.0, durable_log.1, durable_log.2 || self.damaged) };
        // A view is promised before `DoViewChange` goes out, and a normal view once its log is named.
        let promise = match self.status {
            Status::Normal => log_view == self.view,
            Status::ViewChange => self.start_view_change_from.count_ones() as usize + 1 >= self.quorum(),
            Status::Recovering => false,
        };
        let view = if promise { self.view } else { durable.view.max(log_view) };
        Superblock { view, log_view, commit: self.commit_max, head_op: head.0, head_checksum: head.1, damaged }
    }

    /// Emits a superblock write when the durable one lags the state (one write in flight at a
    /// time: a completion names only its view, and writes must not overtake each other). The
    /// commit number alone never causes a write: it is only a lower bound.
    pub(super) fn sync_superblock(&mut self, effects: &mut Vec<Effect>) {
        if self.superblock_writing.is_some() {
            return;
        }
        let target = self.superblock_target();
        let key = |s: &Superblock| (s.view, s.log_view, s.head_op, s.head_checksum, s.damaged);
        if key(&target) != key(&self.superblock) {
            self.superblock_writing = Some(target);
            effects.push(Effect::PersistView { superblock: target });
        }
    }
}
