//! Replica network port: how shard 0 sends VSR protocol messages to the other replicas of
//! its cluster.
//!
//! Contract: `send` neither blocks nor reports failure. A message may be dropped (a full
//! queue, a peer that is down, a connection being re-established) or arrive late; the
//! protocol re-sends what it needs. Messages to one peer leave in the order they were given.

use rill_domain::vsr::Message;

pub trait ReplicaNetwork {
    fn send(&self, to: u8, message: Message);
}
