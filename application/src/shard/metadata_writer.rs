//! Shard 0's write side of the metadata: the replica, the client identity it uses for the
//! requests this node submits, the publisher every shard's view is fed from, and the
//! requests waiting for their ops to commit (`replication.rs` drives it).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

use futures_channel::oneshot;
use rill_domain::error::ErrorCode;
use rill_domain::metadata::Metadata;

use crate::ports::{Env, ReplicaNetwork};
use crate::replication::{Halt, Outcome, Replication, TICK_MS};

/// A metadata request waiting for its op to commit, and the tick it started at.
pub(super) struct Waiter {
    pub reply: oneshot::Sender<Result<Outcome, ErrorCode>>,
    pub since_tick: u64,
}

/// A request not committed within this many ticks (10 s) is answered "not committed"
/// (57): the client may retry, and the op may still commit later, once.
pub(super) const COMMIT_TIMEOUT_TICKS: u64 = 10_000 / TICK_MS;

/// Largest metadata op body (names are at most 255 bytes; option blocks and permission
/// blobs are small). A log suffix of a full journal then stays far below the replica
/// plane's 64 MiB frame limit.
pub(super) const METADATA_BODY_MAX: usize = 64 * 1024;

/// Shard 0's write side of the metadata: the replica, the client identity it uses for the
/// requests this node submits, and the publisher every shard's view is fed from.
pub struct MetadataWriter<E: Env> {
    pub(super) replication: Replication<E::Storage>,
    pub(super) publisher: RefCell<E::MetadataPublisher>,
    pub(super) network: Option<Box<dyn ReplicaNetwork>>,
    /// Serialises calls into the replica with the handling of their effects.
    pub(super) pump: async_lock::Mutex<()>,
    /// One metadata request of this node at a time: each is validated against the state
    /// its predecessor left.
    pub(super) requests: async_lock::Mutex<()>,
    pub(super) waiters: RefCell<BTreeMap<u64, Waiter>>,
    pub(super) client_id: u128,
    pub(super) next_request: Cell<u64>,
    pub(super) ticks: Cell<u64>,
    /// Why the replica is no longer driven: every metadata request is refused until it opens
    /// again (`reopen_halted_metadata`) or the node restarts; data traffic goes on.
    pub(super) halted: Cell<Option<Halt>>,
}

impl<E: Env> MetadataWriter<E> {
    /// `client_id` names this node's requests in the replica's client table; make it unique
    /// per process start (a restarted node's request numbers begin again at 1).
    pub fn new(
        replication: Replication<E::Storage>,
        publisher: E::MetadataPublisher,
        network: Option<Box<dyn ReplicaNetwork>>,
        client_id: u128,
    ) -> Self {
        Self {
            replication,
            publisher: RefCell::new(publisher),
            network,
            pump: async_lock::Mutex::new(()),
            requests: async_lock::Mutex::new(()),
            waiters: RefCell::new(BTreeMap::new()),
            client_id,
            next_request: Cell::new(0),
            ticks: Cell::new(0),
            halted: Cell::new(None),
        }
    }

    pub(super) fn metadata<R>(&self, f: impl FnOnce(&Metadata) -> R) -> R {
        f(self.replication.replica.borrow().state_machine().metadata())
    }

    pub(super) fn fail_waiters(&self, code: ErrorCode, keep: impl Fn(&Waiter) -> bool) {
        let mut waiters = self.waiters.borrow_mut();
        let failed: Vec<u64> = waiters.iter().filter(|(_, w)| !keep(w)).map(|(n, _)| *n).collect();
        for request_number in failed {
            if let Some(waiter) = waiters.remove(&request_number) {
                let _ = waiter.reply.send(Err(code));
            }
        }
    }
}
