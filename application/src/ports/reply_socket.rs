//! Reply socket port: a client's socket that a partition's owner on another shard may write
//! a reply to itself.
//!
//! Contract: `try_send` writes what it can without waiting and says how much; whatever it
//! did not take, the connection's own shard writes, in order.

/// A client's socket the shard owning a partition may write a reply to itself (a plaintext
/// TCP connection), so the reply does not cross back to the connection's shard first.
pub trait ReplySocket: Send + Sync + std::fmt::Debug {
    /// Writes what it can of `bytes` without waiting; how much it wrote.
    fn try_send(&self, bytes: &[u8]) -> std::io::Result<usize>;
}
