//! Shard bus port: requests from one shard to another and their replies.
//!
//! Contract:
//! - `call` delivers the request to the target shard's inbox and resolves with that shard's
//!   reply. A full inbox applies back-pressure (the call waits); a request is never dropped.
//! - A call to the caller's own shard is allowed and behaves like any other.
//! - Requests and replies are plain owned data, so any adapter can carry them across threads;
//!   a send's batch crosses as the range of the request frame it arrived in, and a poll's
//!   reply as the frame its batches were read into.

use rill_domain::Namespace;
use rill_domain::answer::Answer;
use rill_domain::constants::HEADER_SIZE;
use rill_domain::error::ErrorCode;
use rill_domain::polling::PollingStrategy;
use rill_domain::wire::encode::EncodedRequest;
use rill_domain::wire::header::RequestHeader;

use super::reply_socket::ReplySocket;
use crate::connection::ConnectionState;
use crate::memory_pool::PoolSlice;
use crate::partition::{ConsumerKey, PartitionSettings};

/// An operation on one partition, executed by the partition's owning shard.
#[derive(Debug, PartialEq, Eq)]
pub enum PartitionOp {
    Send {
        messages_count: u32,
        /// The batch, as the range of the request frame it arrived in.
        batch: PoolSlice,
        stream_id: u32,
        topic_id: u32,
    },
    Poll {
        key: ConsumerKey,
        strategy: PollingStrategy,
        limit: crate::partition::PollLimit,
        auto_commit: bool,
    },
    GetOffset {
        key: ConsumerKey,
    },
    StoreOffset {
        key: ConsumerKey,
        offset: u64,
    },
    DeleteOffset {
        key: ConsumerKey,
    },
    Flush {
        fsync: bool,
    },
    DeleteSegments {
        count: u32,
    },
    /// Lifecycle, sent by shard 0 while it commits a metadata operation.
    Open {
        settings: PartitionSettings,
        fresh: bool,
        /// When the metadata created the partition: which incarnation of its ids it is.
        created_at: u64,
    },
    /// Closes the partition for a deletion the metadata committed; its files go next.
    Remove,
    /// Empties the partition; `incarnation` is the purge's metadata timestamp, which a
    /// replicated partition's group records (docs/vsr.md, "Partition groups").
    Purge {
        incarnation: u64,
    },
}

/// A crossing send whose owner writes the reply: the connection's socket, and the request's
/// header, which the reply's header answers. The connection's shard reads its next request
/// only once the owner's call returns, so replies keep their order.
#[derive(Clone)]
pub struct DirectReply {
    pub socket: std::sync::Arc<dyn ReplySocket>,
    pub header: RequestHeader,
    /// The layout the client's connection reads replies in.
    pub dialect: rill_domain::version::Dialect,
    /// Its 0.12 session's kept replies, when the request is replicated.
    pub replies: Option<std::sync::Arc<crate::session_replies::SessionReplies>>,
}

impl std::fmt::Debug for DirectReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectReply").field("header", &self.header).finish_non_exhaustive()
    }
}

impl PartialEq for DirectReply {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.socket, &other.socket) && self.header == other.header
    }
}

impl Eq for DirectReply {}

/// What travels over the bus.
#[derive(Debug, PartialEq, Eq)]
pub enum ShardRequest {
    Partition {
        namespace: Namespace,
        op: PartitionOp,
    },
    /// A send whose reply the owner writes to the client's socket itself.
    SendReplying {
        namespace: Namespace,
        op: PartitionOp,
        direct: DirectReply,
    },
    /// A metadata mutation forwarded to shard 0: the request's operation byte and body.
    Metadata {
        operation: u8,
        body: Vec<u8>,
    },
    /// A page of the metadata change feed, which shard 0 keeps.
    MetadataChanges {
        query: rill_domain::change_feed::ChangesQuery,
    },
    /// Flush every partition the shard owns (shutdown).
    FlushAll,
    /// A request from a connectionless gateway (HTTP), run for a user it authenticated.
    Execute {
        user_id: u32,
        request: EncodedRequest,
    },
}

impl ShardRequest {
    /// The request's kind, for logs and tests.
    pub fn kind(&self) -> &'static str {
        match self {
            ShardRequest::Partition { .. } => "partition",
            ShardRequest::SendReplying { .. } => "send_replying",
            ShardRequest::Metadata { .. } => "metadata",
            ShardRequest::MetadataChanges { .. } => "metadata_changes",
            ShardRequest::FlushAll => "flush_all",
            ShardRequest::Execute { .. } => "execute",
        }
    }
}

/// A use case's answer on success, or the error code to put on the wire.
pub type ShardReply = Result<Answer, ErrorCode>;

/// A reply as it travels: an answer the connection's transport encodes (binary, or the
/// HTTP API's JSON), or a frame built in place (a poll's batches read straight into it)
/// whose first `HEADER_SIZE` bytes are left for the reply header.
#[derive(Debug, PartialEq)]
pub enum Reply {
    Answer(Answer),
    Frame(PoolSlice),
    /// The owner wrote the reply frame to the client's socket: all of it, or all but this
    /// rest, which the connection's shard writes.
    Sent(Option<PoolSlice>),
}

impl Reply {
    /// The answer a reply that is no frame carries (a frame's is its bytes).
    pub fn into_answer(self) -> Result<Answer, ErrorCode> {
        match self {
            Reply::Answer(answer) => Ok(answer),
            // Only a poll answers with a frame, and only a send is sent by its owner.
            Reply::Frame(_) | Reply::Sent(_) => Err(ErrorCode::Error),
        }
    }

    /// A frame's body: the poll's prefix and batches, after the room for the header.
    pub fn frame_body(frame: &PoolSlice) -> &[u8] {
        &frame[HEADER_SIZE..]
    }
}

impl From<Answer> for Reply {
    fn from(answer: Answer) -> Self {
        Reply::Answer(answer)
    }
}

/// A reply on success, or the error code to put on the wire.
pub type BusReply = Result<Reply, ErrorCode>;

#[allow(async_fn_in_trait)]
pub trait ShardBus {
    /// This shard's id.
    fn shard_id(&self) -> u16;
    fn shard_count(&self) -> u16;
    async fn call(&self, shard: u16, request: ShardRequest) -> BusReply;
}

/// The error a call gets when the target shard is gone (it is shutting down).
pub fn unavailable() -> ErrorCode {
    ErrorCode::Error
}

/// Listener hand-off port: shard 0 passes an accepted connection's duplicated descriptor
/// to the shard that will serve it.
///
/// Contract: on success the target shard owns the descriptor and serves the connection; on
/// failure (the target is gone) the descriptor comes back to the caller.
#[allow(async_fn_in_trait)]
pub trait ConnectionHandoff {
    async fn hand_off(
        &self,
        shard: u16,
        fd: std::os::fd::OwnedFd,
        peer: std::net::SocketAddr,
        kind: ConnectionKind,
    ) -> Result<(), std::os::fd::OwnedFd>;
}

/// What a shard's inbox delivers: a call from another shard with the means to answer it, a
/// connection handed off by shard 0, or the order to stop.
pub enum Delivery<R> {
    Call {
        request: ShardRequest,
        reply: R,
    },
    Connection {
        fd: std::os::fd::OwnedFd,
        peer: std::net::SocketAddr,
        kind: ConnectionKind,
    },
    /// The shard's partitions were flushed and closed; its event loop ends.
    Shutdown,
}

/// Answers one call; dropping it unanswered tells the caller the shard is unavailable.
pub trait Responder {
    fn reply(self, reply: BusReply);
}

/// The receiving end of one shard's inbox.
///
/// Contract: `next` resolves with the next delivery in arrival order, or `None` once no shard
/// can send any more.
#[allow(async_fn_in_trait)]
pub trait Inbox {
    type Responder: Responder;
    async fn next(&self) -> Option<Delivery<Self::Responder>>;
}

/// Which protocol a handed-off plaintext connection speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectionKind {
    Tcp,
    /// Not upgraded yet: the serving shard performs the WebSocket handshake.
    WebSocket,
    /// A plaintext TCP connection moved between requests from the shard that served it,
    /// with its session: the new shard goes on reading the next request.
    MovedTcp(ConnectionState),
    /// A plaintext WebSocket connection moved the same way, upgraded already.
    MovedWebSocket(ConnectionState),
}

/// Shard counts up to this serve plaintext connections on every shard, shard 0 included:
/// with so few cores, keeping one out would idle a large share of the machine.
pub const SMALL_SHARD_COUNT: u16 = 4;

/// Picks the shard for the next accepted plaintext connection: round-robin over every shard
/// on a small machine, and over the peer shards (1..n) on a larger one, where shard 0 keeps
/// its time for listeners, metadata and TLS/QUIC sessions.
pub fn next_connection_shard(accepted: u64, shard_count: u16) -> u16 {
    match shard_count {
        0 | 1 => 0,
        n if n <= SMALL_SHARD_COUNT => (accepted % u64::from(n)) as u16,
        n => 1 + (accepted % u64::from(n - 1)) as u16,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_rotate_over_every_shard_of_a_small_machine_and_the_peers_of_a_large_one() {
        let picks: Vec<u16> = (0..6).map(|n| next_connection_shard(n, 3)).collect();
        assert_eq!(picks, vec![0, 1, 2, 0, 1, 2]);
        assert!((0..5).all(|n| next_connection_shard(n, 1) == 0));
        let picks: Vec<u16> = (0..4).map(|n| next_connection_shard(n, 2)).collect();
        assert_eq!(picks, vec![0, 1, 0, 1]);
        let picks: Vec<u16> = (0..8).map(|n| next_connection_shard(n, 5)).collect();
        assert_eq!(picks, vec![1, 2, 3, 4, 1, 2, 3, 4]);
    }
}
