//! Shard 0's side of metadata replication: every call into the replica (a client's
//! metadata op, a message from a peer, a tick) runs under one pump lock, and its effects are
//! carried out in order: journal writes first (the replica learns of each completion), then
//! messages to peers, then committed ops, which are published to every shard's view and
//! mirrored in partition storage before the waiting request is answered.

use futures_channel::oneshot;
use rill_domain::error::ErrorCode;
use rill_domain::vsr::{Effect, Message, Replica, Status};

use super::Shard;
use super::metadata_writer::{COMMIT_TIMEOUT_TICKS, METADATA_BODY_MAX, MetadataWriter, Waiter};
use crate::ports::{Env, MetadataPublish};
use crate::replication::{BROKEN_REPLICA_RECOVERY, Halt, reopening_seed};
use crate::replication::{MetadataMachine, Outcome, Replication};
use crate::shared::ReplicaRole;

impl<E: Env> Shard<E> {
    fn writer(&self) -> &MetadataWriter<E> {
        self.writer.as_ref().expect("only shard 0 drives the replica")
    }

    /// Calls into the replica under the pump lock and carries out what it asks.
    pub(super) async fn drive(&self, call: impl FnOnce(&mut Replica<MetadataMachine>, &mut Vec<Effect>)) {
        let writer = self.writer();
        let _pump = writer.pump.lock().await;
        if writer.halted.get().is_some() {
            writer.fail_waiters(ErrorCode::IoError, |_| false);
            return;
        }
        let mut effects = Vec::new();
        call(&mut writer.replication.replica.borrow_mut(), &mut effects);
        self.carry_out(effects).await;
    }

    /// Effects of opening the replica at start, carried out once shard 0 serves.
    pub async fn start_replication(&self, effects: Vec<Effect>) {
        let writer = self.writer();
        let _pump = writer.pump.lock().await;
        self.carry_out(effects).await;
    }

    async fn carry_out(&self, effects: Vec<Effect>) {
        let writer = self.writer();
        let (external, failure) = writer.replication.settle_until_failure(&self.storage, effects).await;
        for effect in external {
            match effect {
                Effect::Send { to, message } => {
                    if let Some(network) = &writer.network {
                        network.send(to, message);
                    }
                }
                Effect::Commit { op, entry } => self.on_commit(op, entry.client_id, entry.request_number).await,
                Effect::NotPrimary { client_id, request_number, .. } if client_id == writer.client_id => {
                    if let Some(waiter) = writer.waiters.borrow_mut().remove(&request_number) {
                        let _ = waiter.reply.send(Err(ErrorCode::TransientNotAccepted));
                    }
                }
                _ => {}
            }
        }
        if let Some(reason) = writer.replication.replica.borrow().halted() {
            tracing::error!(
                reason,
                recovery = BROKEN_REPLICA_RECOVERY,
                "the metadata replica halted: metadata changes are refused, data traffic goes on"
            );
            writer.halted.set(Some(Halt::Broken(reason)));
            self.shared.telemetry.metadata_halted.store(true, std::sync::atomic::Ordering::Relaxed);
            self.shared.telemetry.replica_halts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            writer.fail_waiters(ErrorCode::IoError, |_| false);
            return;
        }
        if let Some(error) = failure {
            // The replica waits for a write that will not complete: it is not driven again,
            // so nothing it journaled is contradicted. What committed before the failure was
            // published above; data traffic goes on.
            tracing::error!(%error, "cannot write the metadata journal: metadata changes are refused until it opens again");
            writer.halted.set(Some(Halt::Journal));
            self.shared.telemetry.metadata_halted.store(true, std::sync::atomic::Ordering::Relaxed);
            writer.fail_waiters(ErrorCode::IoError, |_| false);
            return;
        }
        if let Some(role) = self.replica_role() {
            self.shared.replica.set_role(role);
        }
        let replica = writer.replication.replica.borrow();
        if !(replica.is_primary() && replica.status() == Status::Normal) {
            drop(replica);
            // This node cannot commit now: its waiting requests learn it at once.
            writer.fail_waiters(ErrorCode::TransientNotAccepted, |_| false);
        }
    }

    /// One committed op: make it visible on every shard, mirror it in storage, answer it.
    async fn on_commit(&self, op: u64, client_id: u128, request_number: u64) {
        let writer = self.writer();
        let (outcome, restored) = {
            let mut replica = writer.replication.replica.borrow_mut();
            let machine = replica.state_machine_mut();
            (machine.take_outcome(op), machine.take_restored())
        };
        if restored {
            let metadata = writer.metadata(Clone::clone);
            writer.publisher.borrow_mut().replace(&metadata);
        }
        self.shared.replica.set_commit(op);
        let Some(outcome) = outcome else { return };
        let mut reflected = Ok(());
        if let Ok(applied) = &outcome.result {
            writer.publisher.borrow_mut().publish(outcome.op, outcome.operation, outcome.timestamp, &outcome.body);
            if let Err(error) = self.reflect(applied, outcome.timestamp).await {
                // Committed, but its partitions are not all in place: they are opened again
                // at the next start. The client hears of the failure.
                tracing::error!(%error, ?applied, "a committed metadata change could not be mirrored in partition storage");
                reflected = Err(ErrorCode::IoError);
            }
        }
        if client_id == writer.client_id
            && let Some(waiter) = writer.waiters.borrow_mut().remove(&request_number)
        {
            let _ = waiter.reply.send(reflected.map(|()| outcome));
        }
    }

    /// Submits a metadata op as this node's client and waits until it commits. The op is
    /// first checked against the current state, so a request that would fail is refused
    /// without entering the journal.
    pub(super) async fn replicate(&self, operation: u8, body: &[u8], timestamp: u64) -> Result<Outcome, ErrorCode> {
        let writer = self.writer();
        // Keeps every replica message carrying a log suffix well under the frame limit.
        if body.len() > METADATA_BODY_MAX {
            return Err(ErrorCode::InvalidFormat);
        }
        let _one_at_a_time = writer.requests.lock().await;
        if writer.halted.get().is_some() {
            return Err(ErrorCode::IoError);
        }
        let mut reader = rill_domain::reader::Reader::new(body);
        let Ok(Some(op)) = rill_domain::wire::command::MetadataOp::decode(operation, &mut reader) else {
            return Err(ErrorCode::InvalidFormat);
        };
        writer.metadata(|metadata| metadata.clone().apply(&op, 0, timestamp).map(|_| ()))?;
        let request_number = writer.next_request.get() + 1;
        writer.next_request.set(request_number);
        let (reply, answer) = oneshot::channel();
        writer.waiters.borrow_mut().insert(request_number, Waiter { reply, since_tick: writer.ticks.get() });
        let client_id = writer.client_id;
        self.drive(|replica, effects| {
            replica.on_request(timestamp, client_id, request_number, operation, body.to_vec(), effects)
        })
        .await;
        answer.await.unwrap_or(Err(ErrorCode::TransientNotCommitted))
    }

    /// Commits the root account when the metadata has no user and this replica is the
    /// primary of a running cluster; true once the metadata has a user.
    pub async fn ensure_root_user(&self) -> bool {
        let writer = self.writer();
        if writer.metadata(|m| m.users().next().is_some()) {
            return true;
        }
        let ready = self.replica_role().is_some_and(|role| role.normal && role.primary == self.replica_id());
        if !ready {
            return false;
        }
        let (operation, body) = super::root_user_op(&self.shared.config);
        match self.replicate(operation, &body, self.now_us()).await {
            Ok(_) => {
                if self.shared.config.root.generated {
                    println!(
                        "rill-server: created root user `{}` with generated password: {}",
                        self.shared.config.root.username, self.shared.config.root.password
                    );
                }
                true
            }
            Err(_) => false,
        }
    }

    /// Hands a journal-only op this node cannot commit (it is a backup) to the primary,
    /// without waiting: whoever needs it reads the metadata once the op is applied here.
    pub(super) async fn forward_metadata(&self, operation: u8, body: Vec<u8>) {
        let writer = self.writer();
        let (Some(network), Some(role)) = (&writer.network, self.replica_role()) else { return };
        if !role.normal || role.primary == self.replica_id() || body.len() > METADATA_BODY_MAX {
            return;
        }
        let _one_at_a_time = writer.requests.lock().await;
        let request_number = writer.next_request.get() + 1;
        writer.next_request.set(request_number);
        network.send(role.primary, Message::Request { client_id: writer.client_id, request_number, operation, body });
    }

    fn replica_id(&self) -> u8 {
        self.writer().replication.membership.replica_id
    }

    /// A protocol message from a peer replica.
    pub async fn on_replica_message(&self, message: Message) {
        let now = self.now_us();
        self.drive(|replica, effects| replica.on_message(now, message, effects)).await;
    }

    /// One replica tick (every `TICK_MS`, clustered nodes only); also expires requests
    /// that waited too long for a quorum.
    pub async fn replica_tick(&self) {
        let writer = self.writer();
        let tick = writer.ticks.get() + 1;
        writer.ticks.set(tick);
        let now = self.now_us();
        self.drive(|replica, effects| replica.tick(now, effects)).await;
        writer.fail_waiters(ErrorCode::TransientNotCommitted, |w| tick - w.since_tick < COMMIT_TIMEOUT_TICKS);
    }

    /// Opens a metadata replica halted by a failed journal write again from its files, as a
    /// start opens it (called every second, while the data volume is above its free-space
    /// floor). Only when the files hold everything this node applied: a backup of a
    /// cluster may have applied committed ops it never journaled, and its published view
    /// cannot go back; it stays halted until a restart (logged once, no more tries).
    pub(super) async fn reopen_halted_metadata(&self) {
        let Some(writer) = self.writer.as_ref() else { return };
        if writer.halted.get() != Some(Halt::Journal) || self.partitions.below_floor() {
            return;
        }
        let _pump = writer.pump.lock().await;
        let dir = self.data_path().join("metadata");
        let seed = reopening_seed(writer.client_id as u64, self.now_us());
        let membership = writer.replication.membership;
        let (replication, effects) = match Replication::open(&self.storage, &dir, membership, seed).await {
            Ok(opened) => opened,
            Err(error) => {
                tracing::warn!(%error, "the metadata journal does not open yet");
                return;
            }
        };
        let (held, applied) = (replication.commit(), writer.replication.commit());
        if held < applied {
            tracing::error!(held, applied, "the metadata journal holds less than this node applied: restart the node");
            writer.halted.set(Some(Halt::UntilRestart));
            return;
        }
        // What it committed while opening up to what this node applied is in the published
        // view already; an op the failed write journaled whole after all (the failure was
        // its fsync, or the superblock's) commits now, as any commit does.
        let effects = replication.without_commits_through(applied, effects);
        *writer.replication.journal.lock().await = replication.journal.into_inner();
        *writer.replication.replica.borrow_mut() = replication.replica.into_inner();
        writer.halted.set(None);
        self.shared.telemetry.metadata_halted.store(false, std::sync::atomic::Ordering::Relaxed);
        tracing::warn!(commit = held, "the metadata journal opened again: metadata changes are taken again");
        self.carry_out(effects).await;
    }

    /// The replica's view and who leads it.
    pub fn replica_role(&self) -> Option<ReplicaRole> {
        let replica = self.writer.as_ref()?.replication.replica.borrow();
        Some(ReplicaRole {
            view: replica.view(),
            primary: replica.primary_index(replica.view()),
            normal: replica.status() == Status::Normal,
        })
    }
}
