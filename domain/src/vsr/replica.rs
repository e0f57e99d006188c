//! The replica's state, its constructors (`new` for a fresh cluster, `open` after a restart),
//! read accessors, message dispatch, the tick, IO completions, and the invariants checked at the
//! end of every handler. A handler that breaks one (or a committed op the state machine cannot
//! apply) halts the replica: its effects are taken back and it handles nothing more, so the
//! process that hosts it goes on.

use std::collections::BTreeMap;

use super::client_table::ClientTable;
use super::entry::{Checkpoint, Entry, ROOT_CHECKSUM};
use super::log::{Log, ensure};
use super::message::{Durable, Effect, LogSuffix, Message, Superblock, chain_is_valid};
use super::options::{Options, Prng, REPAIR_BATCH, REPLICAS_MAX, STATE_BATCH, Timeout};
use super::state_machine::StateMachine;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Normal,
    ViewChange,
    Recovering,
}

/// Every timeout of the replica; which ones run depends on status and role.
#[derive(Debug)]
pub(super) struct Timeouts {
    /// Primary: send a `Commit` heartbeat.
    pub(super) heartbeat: Timeout,
    /// Primary: re-send prepares that lack acknowledgements.
    pub(super) prepare: Timeout,
    /// Backup: the primary has been silent for too long.
    pub(super) normal: Timeout,
    /// View change: this view did not start in time, try the next.
    pub(super) view_change: Timeout,
    /// View change and recovery: re-send the messages that may have been lost.
    pub(super) resend: Timeout,
    /// Normal status: ask peers for missing entries.
    pub(super) repair: Timeout,
}

/// A `DoViewChange` the new primary keeps until it has a quorum.
#[derive(Debug, Clone)]
pub(super) struct DoViewChangeVote {
    pub(super) log_view: u32,
    pub(super) log: LogSuffix,
}

/// One replica of a static cluster, generic over the state machine it replicates.
#[derive(Debug)]
pub struct Replica<S> {
    pub(super) replica: u8,
    pub(super) replica_count: u8,
    pub(super) options: Options,
    pub(super) state_machine: S,
    pub(super) prng: Prng,
    pub(super) status: Status,
    pub(super) view: u32,
    /// The latest view in which the status was normal ("last normal view" in the paper).
    pub(super) log_view: u32,
    /// The head of the log when `log_view` began: everything above it was prepared in `log_view`.
    pub(super) log_view_head: (u64, u128),
    /// The superblock as last made durable (by this lifetime, or read back at `open`).
    pub(super) superblock: Superblock,
    /// The superblock write in flight, if any (at most one at a time).
    pub(super) superblock_writing: Option<Superblock>,
    /// The journal read back at `open` may lack entries this replica acknowledged (the superblock
    /// says so, or the log it names has a gap), so it must not offer its log in a view change
    /// until a peer's log replaced it.
    pub(super) damaged: bool,
    pub(super) log: Log,
    /// Applied prefix: the last op applied to the state machine, its checksum and timestamp.
    pub(super) commit_min: u64,
    pub(super) commit_min_checksum: u128,
    pub(super) commit_min_timestamp: u64,
    /// The highest op known to be committed (may run ahead of `commit_min` and of the head).
    pub(super) commit_max: u64,
    pub(super) checkpoint: Option<Checkpoint>,
    pub(super) client_table: ClientTable,
    /// Primary: for each uncommitted op, the replicas that hold it (and its prefix) durably.
    pub(super) prepare_oks: BTreeMap<u64, u32>,
    /// Backup: the highest op acknowledged to the primary in this view.
    pub(super) prepare_ok_sent: u64,
    /// The highest commit number this view's primary announced: a backup's votes for ops
    /// at or below it would tell the primary nothing.
    pub(super) primary_commit: u64,
    pub(super) start_view_change_from: u32,
    pub(super) do_view_change_sent: bool,
    pub(super) do_view_changes: BTreeMap<u8, DoViewChangeVote>,
    pub(super) recovery_nonce: u64,
    pub(super) recovery_responses: BTreeMap<u8, (u32, Option<LogSuffix>)>,
    /// Peers heard sending `Recovery` while this replica recovers: with itself, a quorum of them
    /// means no quorum of normal replicas can answer.
    pub(super) recovering_peers: u32,
    /// Replicas that answered this recovery from a view below ours (a bit per replica).
    pub(super) recovery_below_view: u32,
    pub(super) repair_target: Option<(u64, u128)>,
    pub(super) repair_attempts: u32,
    pub(super) ticks: u64,
    pub(super) timeouts: Timeouts,
    /// Why this replica stopped: an invariant a handler broke, or a committed op its state
    /// machine could not apply. Once set it stays; the replica takes no more input.
    pub(super) halted: Option<&'static str>,
}

impl<S: StateMachine> Replica<S> {
    /// A replica of a fresh cluster: every replica starts normal in view 0 with an empty log.
    pub fn new(replica: u8, replica_count: u8, seed: u64, options: Options, state_machine: S) -> Self {
        let mut this = Self::blank(replica, replica_count, seed, options, state_machine);
        this.status = Status::Normal;
        this.start_normal_timeouts();
        if let Err(broken) = this.check_invariants() {
            this.halt(broken);
        }
        this
    }

    /// A replica restarted from what its journal, checkpoint and superblock held. It rebuilds the
    /// log the superblock names, then runs the recovery protocol (a fresh nonce, `f + 1` answers
    /// including the primary's). If that cannot complete (peers recover too, or time runs out),
    /// it offers its durable log in a view change instead, unless the superblock says the journal
    /// is damaged. A single-replica cluster has no one to ask and trusts its own journal.
    pub fn open(
        replica: u8,
        replica_count: u8,
        seed: u64,
        options: Options,
        state_machine: S,
        durable: Durable,
        effects: &mut Vec<Effect>,
    ) -> Self {
        let mut this = Self::blank(replica, replica_count, seed, options, state_machine);
        let start = effects.len();
        if let Some(checkpoint) = durable.checkpoint
            && !this.install_checkpoint(checkpoint)
        {
            this.halt("the durable checkpoint does not restore");
            return this;
        }
        let superblock = durable.superblock;
        if superblock.log_view > superblock.view {
            this.halt("the superblock's log view is above its view");
            return this;
        }
        (this.view, this.log_view, this.superblock) = (superblock.view, superblock.log_view, superblock);
        this.log_view_head = (superblock.head_op, superblock.head_checksum);
        this.commit_max = this.commit_min.max(superblock.commit);
        let whole = this.reopen_log(durable.entries, effects);
        // A single replica has no one to learn a log from: it trusts its journal.
        this.damaged = replica_count > 1 && (superblock.damaged || !whole);
        // Without peers there is no one to ask, and no one who could have moved on.
        if replica_count == 1 {
            this.recover_alone(effects);
        } else {
            this.start_recovery(effects);
        }
        this.finish(start, effects);
        this
    }

    fn blank(replica: u8, replica_count: u8, seed: u64, options: Options, state_machine: S) -> Self {
        assert!((1..=REPLICAS_MAX).contains(&replica_count) && replica < replica_count);
        options.check();
        let capacity = options.log_capacity();
        Self {
            replica,
            replica_count,
            options,
            state_machine,
            // Distinct replicas with the same seed still draw distinct streams.
            prng: Prng::new(seed ^ (u64::from(replica) << 56)),
            status: Status::Normal,
            view: 0,
            log_view: 0,
            log_view_head: (0, ROOT_CHECKSUM),
            superblock: Superblock::default(),
            superblock_writing: None,
            damaged: false,
            log: Log::new(0, ROOT_CHECKSUM, capacity, 2 * options.pipeline_max as usize),
            commit_min: 0,
            commit_min_checksum: ROOT_CHECKSUM,
            commit_min_timestamp: 0,
            commit_max: 0,
            checkpoint: None,
            client_table: ClientTable::new(options.client_table_max),
            prepare_oks: BTreeMap::new(),
            prepare_ok_sent: 0,
            primary_commit: 0,
            start_view_change_from: 0,
            do_view_change_sent: false,
            do_view_changes: BTreeMap::new(),
            recovery_nonce: 0,
            recovery_responses: BTreeMap::new(),
            recovering_peers: 0,
            recovery_below_view: 0,
            repair_target: None,
            repair_attempts: 0,
            ticks: 0,
            halted: None,
            timeouts: Timeouts {
                heartbeat: Timeout::new(options.heartbeat_ticks),
                prepare: Timeout::new(options.prepare_timeout_ticks),
                normal: Timeout::new(options.view_change_timeout_ticks),
                view_change: Timeout::new(options.view_change_status_timeout_ticks),
                resend: Timeout::new(options.resend_ticks),
                repair: Timeout::new(options.repair_timeout_ticks),
            },
        }
    }

    pub fn replica(&self) -> u8 {
        self.replica
    }

    /// Why this replica halted, if it did: it takes no more messages, ticks or completions,
    /// and the caller stops serving through it (its state is kept for reads and diagnosis).
    pub fn halted(&self) -> Option<&'static str> {
        self.halted
    }

    pub fn replica_count(&self) -> u8 {
        self.replica_count
    }

    pub fn view(&self) -> u32 {
        self.view
    }

    pub fn log_view(&self) -> u32 {
        self.log_view
    }

    pub fn status(&self) -> Status {
        self.status
    }

    /// The head of the log: the highest op this replica holds in the current view.
    pub fn op(&self) -> u64 {
        self.log.op()
    }

    /// The last op applied to the state machine.
    pub fn commit(&self) -> u64 {
        self.commit_min
    }

    /// The highest op known to be committed.
    pub fn commit_max(&self) -> u64 {
        self.commit_max
    }

    pub fn primary_index(&self, view: u32) -> u8 {
        let offset = u32::from(self.options.primary_offset);
        (view.wrapping_add(offset) % u32::from(self.replica_count)) as u8
    }

    pub fn is_primary(&self) -> bool {
        self.primary_index(self.view) == self.replica
    }

    /// The entry at `op` in the log's run, if held.
    pub fn log_entry(&self, op: u64) -> Option<&Entry> {
        self.log.entry(op)
    }

    /// Whether this exact entry is held anywhere in memory (run or stash).
    pub fn has_entry(&self, op: u64, checksum: u128) -> bool {
        self.log.get(op, checksum).is_some()
    }

    pub fn state_machine(&self) -> &S {
        &self.state_machine
    }

    /// For the caller to drain what its state machine recorded while applying (outcomes
    /// kept beside the state); the replicated state itself must change only through commits.
    pub fn state_machine_mut(&mut self) -> &mut S {
        &mut self.state_machine
    }

    /// The superblock as last made durable.
    pub fn superblock(&self) -> &Superblock {
        &self.superblock
    }

    /// Whether the journal read back at `open` could not be trusted and no peer's log has
    /// replaced it yet (such a replica recovers but does not vote).
    pub fn is_damaged(&self) -> bool {
        self.damaged
    }

    pub fn checkpoint(&self) -> Option<&Checkpoint> {
        self.checkpoint.as_ref()
    }

    /// The cached reply of a client's last committed request.
    pub fn client_reply(&self, client_id: u128) -> Option<(u64, &[u8])> {
        self.client_table.get(client_id).map(|session| (session.request_number, session.reply.as_slice()))
    }

    pub(super) fn quorum(&self) -> usize {
        usize::from(self.replica_count / 2 + 1)
    }

    pub(super) fn jitter(&mut self) -> u64 {
        self.prng.below(self.options.jitter_ticks + 1)
    }

    pub(super) fn send(&self, to: u8, message: Message, effects: &mut Vec<Effect>) {
        assert!(to != self.replica && to < self.replica_count);
        effects.push(Effect::Send { to, message });
    }

    pub(super) fn broadcast(&self, message: Message, effects: &mut Vec<Effect>) {
        for to in (0..self.replica_count).filter(|&to| to != self.replica) {
            effects.push(Effect::Send { to, message: message.clone() });
        }
    }

    /// Handles one protocol message. Malformed or out-of-range messages are dropped.
    pub fn on_message(&mut self, now: u64, message: Message, effects: &mut Vec<Effect>) {
        let Some(start) = self.enter(effects) else { return };
        match message {
            // A forwarded client request: the same as one that arrived here.
            Message::Request { client_id, request_number, operation, body } => {
                self.request(now, client_id, request_number, operation, body, effects);
            }
            Message::Reply { .. } | Message::RequestBatches { .. } | Message::Batches { .. } => {}
            message if self.admissible(&message) => self.dispatch(message, effects),
            _ => {}
        }
        self.finish(start, effects);
    }

    fn dispatch(&mut self, message: Message, effects: &mut Vec<Effect>) {
        // A recovering replica acknowledges nothing, since it may have missed what it would
        // acknowledge. It serves repairs (the asker checks the checksum), keeps repairs it gets,
        // adopts a primary's log (asking for it when it hears one), and joins a view change
        // above its superblock's view when its journal is whole (it then holds every op it
        // ever acknowledged).
        if self.status == Status::Recovering {
            match message {
                Message::RecoveryResponse { view, replica, nonce, log } => {
                    self.on_recovery_response(view, replica, nonce, log, effects)
                }
                Message::RequestPrepare { replica, op, checksum } => {
                    self.on_request_prepare(replica, op, checksum, effects)
                }
                Message::Repair { entries, .. } => self.on_repair(entries, effects),
                Message::Recovery { replica, .. } => self.on_peer_recovering(replica, effects),
                // A primary is at work in a view this replica never promised against: its log
                // is canonical, and asking for it needs no quorum of normal replicas.
                Message::Prepare { view, .. } | Message::Commit { view, .. } if view >= self.view => {
                    self.request_start_view(view, effects)
                }
                Message::StartView { view, log } => self.on_start_view(view, log, effects),
                Message::StartViewChange { view, replica } if self.may_abandon_recovery(view) => {
                    self.abandon_recovery(view, effects);
                    self.on_start_view_change(view, replica, effects);
                }
                Message::DoViewChange { view, replica, log_view, log } if self.may_abandon_recovery(view) => {
                    self.abandon_recovery(view, effects);
                    self.on_do_view_change(view, replica, DoViewChangeVote { log_view, log }, effects);
                }
                _ => {}
            }
            return;
        }
        match message {
            Message::Prepare { view, commit, entry } => self.on_prepare(view, commit, entry, effects),
            Message::PrepareOk { view, replica, op, checksum } => {
                self.on_prepare_ok(view, replica, op, checksum, effects)
            }
            Message::Commit { view, commit } => self.on_commit(view, commit, effects),
            Message::StartViewChange { view, replica } => self.on_start_view_change(view, replica, effects),
            Message::DoViewChange { view, replica, log_view, log } => {
                self.on_do_view_change(view, replica, DoViewChangeVote { log_view, log }, effects)
            }
            Message::StartView { view, log } => self.on_start_view(view, log, effects),
            Message::RequestStartView { view, replica } => self.on_request_start_view(view, replica, effects),
            Message::Recovery { replica, nonce } => self.on_recovery(replica, nonce, effects),
            Message::RecoveryResponse { .. } => {}
            Message::RequestPrepare { replica, op, checksum } => {
                self.on_request_prepare(replica, op, checksum, effects)
            }
            Message::Repair { entries, .. } => self.on_repair(entries, effects),
            Message::GetState { view, replica, commit } => self.on_get_state(view, replica, commit, effects),
            Message::NewState { view, checkpoint, entries, .. } => {
                self.on_new_state(view, checkpoint, entries, effects)
            }
            Message::Request { .. }
            | Message::Reply { .. }
            | Message::RequestBatches { .. }
            | Message::Batches { .. } => {}
        }
    }

    /// Range and shape checks on everything that came off the network.
    fn admissible(&self, message: &Message) -> bool {
        let peer = |replica: u8| replica < self.replica_count && replica != self.replica;
        let entries_max = self.options.log_capacity();
        match message {
            Message::Prepare { entry, .. } => entry.op >= 1 && entry.verify(),
            Message::Commit { .. } => true,
            Message::PrepareOk { replica, .. }
            | Message::StartViewChange { replica, .. }
            | Message::RequestStartView { replica, .. }
            | Message::Recovery { replica, .. }
            | Message::RequestPrepare { replica, .. }
            | Message::GetState { replica, .. } => peer(*replica),
            Message::DoViewChange { replica, log_view, log, view } => {
                peer(*replica) && log_view <= view && log.is_valid(entries_max)
            }
            Message::StartView { log, .. } => log.is_valid(entries_max),
            Message::RecoveryResponse { replica, log, .. } => {
                peer(*replica) && log.as_ref().is_none_or(|log| log.is_valid(entries_max))
            }
            Message::Repair { replica, entries } => {
                peer(*replica) && entries.len() <= REPAIR_BATCH && entries.iter().all(|e| e.op >= 1 && e.verify())
            }
            Message::NewState { replica, checkpoint, entries, .. } => {
                peer(*replica)
                    && chain_is_valid(entries, STATE_BATCH)
                    && checkpoint.as_ref().is_none_or(|checkpoint| {
                        entries
                            .first()
                            .is_none_or(|first| first.op == checkpoint.op + 1 && first.parent == checkpoint.checksum)
                    })
            }
            // Handled before this check (`on_message`).
            Message::Request { .. }
            | Message::Reply { .. }
            | Message::RequestBatches { .. }
            | Message::Batches { .. } => false,
        }
    }

    /// Advances time by one tick and fires whatever timeouts are due.
    pub fn tick(&mut self, now: u64, effects: &mut Vec<Effect>) {
        let _ = now;
        let Some(start) = self.enter(effects) else { return };
        self.ticks += 1;
        let ticks = self.ticks;
        if self.timeouts.heartbeat.fired(ticks) {
            self.on_heartbeat_timeout(effects);
        }
        if self.timeouts.prepare.fired(ticks) {
            self.on_prepare_timeout(effects);
        }
        if self.timeouts.normal.fired(ticks) {
            self.timeouts.normal.stop();
            self.start_view_change(self.view + 1, effects);
        }
        if self.timeouts.view_change.fired(ticks) {
            self.timeouts.view_change.stop();
            if self.status == Status::Recovering {
                // Recovery took too long: no quorum of normal replicas is within reach.
                if self.may_abandon_recovery(self.view + 1) {
                    self.abandon_recovery(self.view + 1, effects);
                }
            } else {
                self.start_view_change(self.view + 1, effects);
            }
        }
        if self.timeouts.resend.fired(ticks) {
            self.on_resend_timeout(effects);
        }
        if self.timeouts.repair.fired(ticks) {
            let jitter = self.jitter();
            self.timeouts.repair.start(ticks, jitter);
            self.repair(effects);
        }
        self.finish(start, effects);
    }

    /// The caller finished writing and syncing the journal entry `(op, checksum)`. The checksum
    /// names which write finished: repair may rewrite an op with a different entry.
    pub fn on_prepare_persisted(&mut self, op: u64, checksum: u128, effects: &mut Vec<Effect>) {
        let Some(start) = self.enter(effects) else { return };
        if self.log.mark_durable(op, checksum) {
            self.after_durability(effects);
        }
        self.finish(start, effects);
    }

    /// The caller finished writing and syncing the superblock write in flight, which holds `view`.
    pub fn on_view_persisted(&mut self, view: u32, effects: &mut Vec<Effect>) {
        let Some(start) = self.enter(effects) else { return };
        let written = self.superblock_writing.take().expect("a superblock was persisted that was never asked for");
        assert!(written.view == view, "the superblock persisted is not the one in flight");
        self.superblock = written;
        self.maybe_send_do_view_change(effects);
        self.after_durability(effects);
        self.finish(start, effects);
    }

    /// Where a handler's effects start in `effects`, or None when the replica halted (the
    /// handler then does nothing).
    pub(super) fn enter(&self, effects: &[Effect]) -> Option<usize> {
        self.halted.is_none().then_some(effects.len())
    }

    /// Ends a handler whose effects start at `start`: the superblock catches up with the
    /// state, then the invariants are checked. A handler that halted the replica or broke an
    /// invariant takes back every effect it asked for, since they may rest on a state no
    /// peer shares.
    pub(super) fn finish(&mut self, start: usize, effects: &mut Vec<Effect>) {
        if self.halted.is_none() {
            self.sync_superblock(effects);
        }
        if let Err(broken) = self.check_invariants() {
            self.halt(broken);
        }
        if self.halted.is_some() {
            effects.truncate(start);
        }
    }

    /// Stops the replica for good (the first reason is kept).
    pub(super) fn halt(&mut self, reason: &'static str) {
        self.halted.get_or_insert(reason);
    }

    pub(super) fn persist_unwritten(&mut self, effects: &mut Vec<Effect>) {
        for entry in self.log.take_unwritten() {
            effects.push(Effect::Persist { entry });
        }
    }

    /// Timeouts of normal status for the current role.
    pub(super) fn start_normal_timeouts(&mut self) {
        let ticks = self.ticks;
        self.timeouts.view_change.stop();
        self.timeouts.resend.stop();
        let jitter = self.jitter();
        self.timeouts.repair.start(ticks, jitter);
        if self.is_primary() {
            self.timeouts.normal.stop();
            self.timeouts.heartbeat.start(ticks, 0);
            self.timeouts.prepare.start(ticks, 0);
        } else {
            self.timeouts.heartbeat.stop();
            self.timeouts.prepare.stop();
            let jitter = self.jitter();
            self.timeouts.normal.start(ticks, jitter);
        }
    }

    /// Checked at the end of every handler; a failure is a bug or a peer that broke the
    /// protocol, and halts the replica. Returns the first invariant that does not hold.
    pub fn check_invariants(&self) -> Result<(), &'static str> {
        ensure(self.commit_min <= self.commit_max, "applied beyond the known commit")?;
        ensure(self.log_view <= self.view, "log view above the view")?;
        let superblock = self.superblock;
        ensure(
            superblock.log_view <= superblock.view && superblock.view <= self.view,
            "the durable superblock is ahead of the view",
        )?;
        ensure(superblock.log_view <= self.log_view, "the durable log view is ahead of the log view")?;
        ensure(
            self.superblock_writing.is_none_or(|writing| writing.view <= self.view),
            "a superblock write ahead of the view",
        )?;
        self.log.check(self.commit_min, self.commit_min_checksum)?;
        if let Some(checkpoint) = &self.checkpoint {
            ensure(checkpoint.op <= self.commit_min, "checkpoint ahead of the applied prefix")?;
        }
        ensure(self.client_table.len() <= self.options.client_table_max, "client table over its bound")?;
        ensure(self.do_view_changes.len() <= usize::from(self.replica_count), "more view change votes than replicas")?;
        ensure(
            self.recovery_responses.len() <= usize::from(self.replica_count),
            "more recovery answers than replicas",
        )?;
        match self.status {
            Status::Normal => {
                ensure(self.log_view == self.view, "normal status outside the log view")?;
                if self.is_primary() {
                    ensure(self.commit_max <= self.log.op(), "primary committed beyond its head")?;
                    ensure(
                        self.prepare_oks.keys().all(|&op| op > self.commit_max && op <= self.log.op()),
                        "primary counts votes outside its uncommitted ops",
                    )?;
                } else {
                    ensure(self.prepare_oks.is_empty(), "a backup counts votes")?;
                }
            }
            Status::ViewChange => ensure(self.prepare_oks.is_empty(), "votes counted during a view change")?,
            Status::Recovering => {
                ensure(self.recovery_nonce != 0 || self.replica_count == 1, "recovering without a nonce")?
            }
        }
        Ok(())
    }
}
