//! The partitions whose flush a send left to the shard's flusher (`flusher.rs`), each
//! queued once however many sends reach a threshold.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, VecDeque};

use rill_domain::namespace::Namespace;

/// Partitions due a deferred flush, oldest first.
pub(crate) struct FlushQueue {
    pub(super) due: RefCell<VecDeque<Namespace>>,
    /// Partitions in `due`, so one is queued once however many sends reach a threshold.
    pub(super) queued: RefCell<BTreeSet<Namespace>>,
    pub(super) ready: async_lock::Semaphore,
    pub(super) running: Cell<bool>,
}

impl Default for FlushQueue {
    fn default() -> Self {
        Self {
            due: RefCell::default(),
            queued: RefCell::default(),
            ready: async_lock::Semaphore::new(0),
            running: Cell::new(false),
        }
    }
}

impl FlushQueue {
    pub(crate) fn running(&self) -> bool {
        self.running.get()
    }

    pub(crate) fn push(&self, namespace: Namespace) {
        if self.queued.borrow_mut().insert(namespace) {
            self.due.borrow_mut().push_back(namespace);
            self.ready.add_permits(1);
        }
    }
}
