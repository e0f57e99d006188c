//! An in-process shard bus for tests without threads: a call runs the target shard's
//! handler directly on the caller's executor, so a multi-shard server is one deterministic
//! single-threaded program.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::{Rc, Weak};

use rill_application::Shard;
use rill_application::ports::bus::ConnectionKind;
use rill_application::ports::{BusReply, ConnectionHandoff, Env, ShardBus, ShardRequest};

use crate::Jitter;

/// The shards of one simulated server, registered once they are built.
pub struct LocalShards<E: Env> {
    shards: RefCell<Vec<Weak<Shard<E>>>>,
}

impl<E: Env> Default for LocalShards<E> {
    fn default() -> Self {
        Self { shards: RefCell::new(Vec::new()) }
    }
}

impl<E: Env> LocalShards<E> {
    pub fn register(&self, shard: &Rc<Shard<E>>) {
        self.shards.borrow_mut().push(Rc::downgrade(shard));
    }
}

pub struct LocalBus<E: Env> {
    shard_id: u16,
    shard_count: u16,
    shards: Rc<LocalShards<E>>,
    /// Every call made through this handle, for tests: (target shard, request kind).
    pub calls: Rc<RefCell<Vec<(u16, &'static str)>>>,
    /// Pauses on the way there and back, as a channel hop between threads would.
    jitter: Jitter,
}

impl<E: Env> LocalBus<E> {
    pub fn new(shard_id: u16, shard_count: u16, shards: Rc<LocalShards<E>>) -> Self {
        Self { shard_id, shard_count, shards, calls: Rc::default(), jitter: Jitter::default() }
    }

    /// The same bus, pausing a seeded while on each hop.
    pub fn with_jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }
}

impl<E: Env> ShardBus for LocalBus<E> {
    fn shard_id(&self) -> u16 {
        self.shard_id
    }

    fn shard_count(&self) -> u16 {
        self.shard_count
    }

    async fn call(&self, shard: u16, request: ShardRequest) -> BusReply {
        self.calls.borrow_mut().push((shard, request.kind()));
        let target = self.shards.shards.borrow().get(shard as usize).and_then(Weak::upgrade);
        let Some(target) = target else { return Err(rill_application::ports::bus::unavailable()) };
        self.jitter.pause().await;
        // Boxed and type-erased: a shard's handler may call the bus again (shard 0 opening
        // partitions on their owners), and the recursion needs a finite future type.
        let reply: Pin<Box<dyn Future<Output = BusReply>>> =
            Box::pin(async move { target.on_bus_request(request).await });
        let reply = reply.await;
        self.jitter.pause().await;
        reply
    }
}

/// The simulated shards share one thread and no sockets: a connection is never handed over,
/// so the caller keeps serving it.
impl<E: Env> ConnectionHandoff for LocalBus<E> {
    async fn hand_off(
        &self,
        _shard: u16,
        fd: std::os::fd::OwnedFd,
        _peer: std::net::SocketAddr,
        _kind: ConnectionKind,
    ) -> Result<(), std::os::fd::OwnedFd> {
        Err(fd)
    }
}
