//! The ports the use cases drive. Adapters implement them; nothing here names a runtime.

pub mod clock;
pub mod storage;

pub use clock::Clock;
pub use storage::{Storage, StorageFile};

/// Bundles the ports so one type parameter threads through the server.
pub trait Env: 'static {
    type Storage: Storage;
    type Clock: Clock;
}
