//! The shard bus on crossfire: one bounded multi-producer inbox per shard. A call sends an
//! envelope with a oneshot for the reply; a full inbox makes the sender wait (back-pressure),
//! never drop. The same inbox carries accepted connections handed from shard 0 to a peer.

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use crossfire::mpsc::{self, Array};
use crossfire::oneshot::{self, TxOneshot};
use crossfire::{AsyncRx, MAsyncTx};
use rill_application::ports::bus::ConnectionKind;
use rill_application::ports::{BusReply, ConnectionHandoff, Delivery, Gateway, ShardBus, ShardRequest};
use rill_domain::wire::encode::EncodedRequest;

/// What a shard's inbox receives: a call answered through a `Responder`, a handed-off
/// connection, or `Shutdown`.
pub type Envelope = Delivery<Responder>;

/// Sends one reply back to the calling shard.
pub struct Responder(TxOneshot<BusReply>);

impl rill_application::ports::Responder for Responder {
    fn reply(self, reply: BusReply) {
        self.0.send(reply);
    }
}

/// One shard's handle on the bus: it can reach every shard's inbox.
#[derive(Clone)]
pub struct CrossfireBus {
    shard_id: u16,
    inboxes: Arc<Vec<MAsyncTx<Array<Envelope>>>>,
}

/// The receiving end of one shard's inbox.
pub struct Inbox {
    rx: AsyncRx<Array<Envelope>>,
}

impl rill_application::ports::Inbox for Inbox {
    type Responder = Responder;

    /// The next envelope, or `None` once every sender is gone.
    async fn next(&self) -> Option<Envelope> {
        self.rx.recv().await.ok()
    }
}

/// Builds the bus for `shard_count` shards with inboxes of `capacity` envelopes each.
pub fn bus(shard_count: u16, capacity: usize) -> (Vec<CrossfireBus>, Vec<Inbox>) {
    let (senders, inboxes): (Vec<_>, Vec<_>) =
        (0..shard_count).map(|_| mpsc::bounded_async(capacity)).map(|(tx, rx)| (tx, Inbox { rx })).unzip();
    let senders = Arc::new(senders);
    let handles = (0..shard_count).map(|shard_id| CrossfireBus { shard_id, inboxes: senders.clone() }).collect();
    (handles, inboxes)
}

impl ConnectionHandoff for CrossfireBus {
    /// Hands an accepted connection to `shard`. Waits while its inbox is full.
    async fn hand_off(&self, shard: u16, fd: OwnedFd, peer: SocketAddr, kind: ConnectionKind) -> Result<(), OwnedFd> {
        match self.inboxes[shard as usize].send(Delivery::Connection { fd, peer, kind }).await {
            Ok(()) => Ok(()),
            Err(error) => match error.0 {
                Delivery::Connection { fd, .. } => Err(fd),
                _ => unreachable!("the envelope sent is the one returned"),
            },
        }
    }
}

impl CrossfireBus {
    /// Asks every shard's event loop to stop.
    pub async fn shutdown_all(&self) {
        for inbox in self.inboxes.iter() {
            let _ = inbox.send(Delivery::Shutdown).await;
        }
    }
}

impl ShardBus for CrossfireBus {
    fn shard_id(&self) -> u16 {
        self.shard_id
    }

    fn shard_count(&self) -> u16 {
        self.inboxes.len() as u16
    }

    async fn call(&self, shard: u16, request: ShardRequest) -> BusReply {
        let (tx, rx) = oneshot::oneshot();
        let envelope = Delivery::Call { request, reply: Responder(tx) };
        if self.inboxes[shard as usize].send(envelope).await.is_err() {
            return Err(rill_application::ports::bus::unavailable());
        }
        rx.await.unwrap_or_else(|_| Err(rill_application::ports::bus::unavailable()))
    }
}

/// The gateway for transports outside the shards: each request goes to the next shard in
/// turn, which runs it like a binary request (forwarding metadata to shard 0 and
/// partition operations to their owners as usual).
pub struct CrossfireGateway {
    bus: CrossfireBus,
    next: std::sync::atomic::AtomicU64,
}

impl CrossfireGateway {
    pub fn new(bus: CrossfireBus) -> Self {
        Self { bus, next: std::sync::atomic::AtomicU64::new(0) }
    }
}

#[async_trait::async_trait]
impl Gateway for CrossfireGateway {
    async fn execute(&self, user_id: u32, request: EncodedRequest) -> BusReply {
        let turn = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let shard = (turn % u64::from(self.bus.shard_count())) as u16;
        self.bus.call(shard, ShardRequest::Execute { user_id, request }).await
    }
}
