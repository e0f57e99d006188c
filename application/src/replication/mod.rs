//! Metadata replication: the domain's VSR replica over the metadata state machine, with
//! its journal, superblock and checkpoint on the storage port. A single node is a
//! one-replica cluster (every op still goes through the replica and its journal); a
//! `[cluster]` roster makes it one replica of several.

pub mod group_machine;
pub mod halt;
pub mod journal;
pub mod machine;

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::path::Path;

use rill_domain::vsr::{Effect, Options, Replica, StateMachine};

use crate::ports::Storage;

pub use group_machine::{GroupMachine, GroupOutcome};
pub use halt::{BROKEN_REPLICA_RECOVERY, Halt, reopening_seed};
pub use journal::{JournalError, VsrJournal};
pub use machine::{MetadataMachine, Outcome};

/// This node's place in the cluster. The default is a single node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Membership {
    pub replica_id: u8,
    pub replica_count: u8,
}

impl Default for Membership {
    fn default() -> Self {
        Self { replica_id: 0, replica_count: 1 }
    }
}

impl Membership {
    pub fn clustered(&self) -> bool {
        self.replica_count > 1
    }
}

/// The replica's tuning. One tick is `TICK_MS`: heartbeats every 200 ms, a view change
/// after about 1.2 s without the primary, a checkpoint every 256 committed ops.
pub const TICK_MS: u64 = 50;

pub fn options() -> Options {
    Options { checkpoint_interval: 256, ..Options::default() }
}

/// A partition group's tuning. Its entries carry whole batches, so its log is short: four
/// sends in the pipeline, a checkpoint every eight commits (a log of 32 entries, which a
/// view change ships whole: at most `ENTRY_BODY_MAX` each). Group `g` starts with its
/// primary on node `g mod n`, so the groups' primaries spread over the nodes. Commits are
/// announced at once, so the backups' copies trail the primary's by one round trip.
pub fn group_options(group: u16, replica_count: u8) -> Options {
    Options {
        pipeline_max: 4,
        checkpoint_interval: 8,
        primary_offset: (group % u16::from(replica_count.max(1))) as u8,
        commit_eagerly: true,
        ..Options::default()
    }
}

/// A replica and its durable files: the metadata's, owned by shard 0, or a partition
/// group's, owned by the shard whose partitions it carries.
pub struct Replication<S: Storage, M: StateMachine = MetadataMachine> {
    pub replica: RefCell<Replica<M>>,
    pub journal: async_lock::Mutex<VsrJournal<S>>,
    pub membership: Membership,
}

impl<S: Storage> Replication<S> {
    /// Opens the metadata replica from `dir` (see `open_with`), with the storage effects of
    /// opening carried out; returns the other effects. Files the replica halts on (a
    /// checkpoint that does not restore, a superblock that contradicts itself) are refused
    /// as damaged: the node does not serve a metadata view it could not rebuild.
    pub async fn open(
        storage: &S,
        dir: &Path,
        membership: Membership,
        seed: u64,
    ) -> Result<(Self, Vec<Effect>), JournalError> {
        let (this, effects) =
            Self::open_with(storage, dir, membership, seed, options(), MetadataMachine::default()).await?;
        if let Some(reason) = this.replica.borrow().halted() {
            return Err(JournalError::Damaged { path: dir.to_path_buf(), reason: reason.to_string() });
        }
        let external = this
            .settle(storage, effects)
            .await
            .map_err(|source| JournalError::Io { path: dir.join("journal.wal"), source })?;
        Ok((this, external))
    }
}

impl<S: Storage, M: StateMachine> Replication<S, M> {
    /// Opens a replica from `dir`: a node that never wrote a superblock is new and starts
    /// in view 0 (its first superblock is written now, before it takes part in anything);
    /// any other node is reopened from its journal and runs the recovery protocol.
    /// Returns the replica and the effects opening produced, none carried out yet.
    pub async fn open_with(
        storage: &S,
        dir: &Path,
        membership: Membership,
        seed: u64,
        options: Options,
        machine: M,
    ) -> Result<(Self, Vec<Effect>), JournalError> {
        let fresh = !storage.exists(&dir.join("superblock")).await;
        let (journal, durable) = VsrJournal::open(storage, dir, membership.clustered()).await?;
        let Membership { replica_id, replica_count } = membership;
        let mut effects = Vec::new();
        let replica = if fresh && durable.entries.is_empty() && durable.checkpoint.is_none() {
            journal
                .write_superblock(storage, &durable.superblock)
                .await
                .map_err(|source| JournalError::Io { path: dir.join("superblock"), source })?;
            Replica::new(replica_id, replica_count, seed, options, machine)
        } else {
            Replica::open(replica_id, replica_count, seed, options, machine, durable, &mut effects)
        };
        let this = Self { replica: RefCell::new(replica), journal: async_lock::Mutex::new(journal), membership };
        Ok((this, effects))
    }

    /// Carries out the storage effects (journal appends, superblock and checkpoint writes),
    /// feeding each completion back to the replica, until none are left. Returns the other
    /// effects (sends, commits, replies) in the order the replica emitted them.
    pub async fn settle(&self, storage: &S, effects: Vec<Effect>) -> io::Result<Vec<Effect>> {
        match self.settle_until_failure(storage, effects).await {
            (external, None) => Ok(external),
            (_, Some(error)) => Err(error),
        }
    }

    /// Like `settle`, but a failed write stops it with what it gathered so far: commits that
    /// became durable before the failure are still handed out, with the error.
    pub async fn settle_until_failure(&self, storage: &S, effects: Vec<Effect>) -> (Vec<Effect>, Option<io::Error>) {
        let mut queue: VecDeque<Effect> = effects.into();
        let mut external = Vec::new();
        let mut journal = self.journal.lock().await;
        while let Some(effect) = queue.pop_front() {
            let mut more = Vec::new();
            let written = match effect {
                Effect::Persist { entry } => journal.append(&entry).await.map(|()| {
                    self.replica.borrow_mut().on_prepare_persisted(entry.op, entry.checksum, &mut more);
                }),
                Effect::PersistView { superblock } => journal.write_superblock(storage, &superblock).await.map(|()| {
                    self.replica.borrow_mut().on_view_persisted(superblock.view, &mut more);
                }),
                Effect::Checkpoint { checkpoint, .. } => journal.write_checkpoint(storage, &checkpoint).await,
                other => {
                    external.push(other);
                    Ok(())
                }
            };
            if let Err(error) = written {
                return (external, Some(error));
            }
            queue.extend(more);
        }
        (external, None)
    }

    pub fn membership(&self) -> Membership {
        self.membership
    }

    pub fn commit(&self) -> u64 {
        self.replica.borrow().commit()
    }
}

impl<S: Storage> Replication<S> {
    /// Drops the commits among `effects` (and the outcomes they left), for the start-up
    /// path, whose state seeds every view directly; returns the rest.
    pub fn without_commits(&self, effects: Vec<Effect>) -> Vec<Effect> {
        self.without_commits_through(u64::MAX, effects)
    }

    /// Drops the commits of ops up to `through` (and the outcomes they left): a reopened
    /// replica's view holds those already; later ones are carried out as any commit.
    pub fn without_commits_through(&self, through: u64, effects: Vec<Effect>) -> Vec<Effect> {
        let mut replica = self.replica.borrow_mut();
        let machine = replica.state_machine_mut();
        machine.take_restored();
        let mut rest = Vec::new();
        for effect in effects {
            match effect {
                Effect::Commit { op, .. } if op <= through => {
                    machine.take_outcome(op);
                }
                other => rest.push(other),
            }
        }
        rest
    }

    pub fn metadata(&self) -> rill_domain::metadata::Metadata {
        self.with_metadata(Clone::clone)
    }

    pub fn with_metadata<R>(&self, f: impl FnOnce(&rill_domain::metadata::Metadata) -> R) -> R {
        f(self.replica.borrow().state_machine().metadata())
    }
}
