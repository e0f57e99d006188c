//! Replica network port: how a replica sends VSR protocol messages to the other replicas
//! of its cluster. Shard 0 has one for the metadata's replica, and each shard one for its
//! partition group's, on that shard's event loop.
//!
//! Contract: `send` neither blocks nor reports failure. A message may be dropped (a full
//! queue, a peer that is down, a connection being re-established) or arrive late; the
//! protocol re-sends what it needs. Messages to one peer leave in the order they were given.

use rill_domain::vsr::Message;

pub trait ReplicaNetwork {
    fn send(&self, to: u8, message: Message);
}
