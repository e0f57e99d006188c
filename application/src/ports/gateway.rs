//! Gateway port: how a transport that runs outside the shards (HTTP, on its own thread and
//! runtime) gets a request executed by a shard.
//!
//! Contract:
//! - `execute` runs the encoded request on some shard as `user_id`, who the gateway has
//!   already authenticated; the shard authorizes and answers exactly as it would a binary
//!   request, and the reply is the use case's answer (a poll's: its reply frame) or the
//!   error code. The transport renders the answer itself (the HTTP API's JSON).
//! - Unlike the shard ports, this one is `Send + Sync` and its future is `Send`: the caller
//!   lives on another thread, so the adapter must carry the request across threads.
//! - A full shard inbox makes the call wait; a request is never dropped.

use rill_domain::wire::encode::EncodedRequest;

use crate::ports::BusReply;

#[async_trait::async_trait]
pub trait Gateway: Send + Sync + 'static {
    async fn execute(&self, user_id: u32, request: EncodedRequest) -> BusReply;
}
