//! Offload port: runs CPU-heavy work (password hashing) away from the shard's event loop.
//!
//! Contract: `run` executes the closure on another thread (or inline, in simulation) and
//! resolves with its result; the event loop keeps serving other tasks meanwhile.

#[allow(async_fn_in_trait)]
pub trait Offload {
    async fn run<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> T;
}
