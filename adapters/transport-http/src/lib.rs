//! The HTTP transport on axum. It runs on its own thread with a single-threaded tokio
//! runtime (axum's home), beside the shards. Reads for authentication and metrics use the
//! gateway context and a metadata reader of its own (behind a mutex only this thread
//! takes, since the reader is not `Sync`); every resource request is encoded as the
//! binary command and executed by a shard through the gateway port, so REST and binary
//! clients share one decoder, authorization and journal, and its typed answer comes back
//! to be rendered as JSON here (`replies.rs`).
//!
//! Routes: the REST table the 0.11 SDK's HTTP client uses (streams, topics, partitions,
//! segments, messages, consumer offsets and groups, users, personal access tokens,
//! clients, stats, cluster metadata), JWT login/refresh/logout, `/ping`, `/metrics`, and
//! the web console at `/ui` with the one extra read it needs (`console.rs`).
mod api;
mod auth;
pub mod bodies;
mod clock;
mod console;
mod jwt;
mod messages;
mod metrics;
mod permissions;
mod poll_json;
mod replies;
mod resources;
mod routes;
mod serve;
mod state;
mod system;
mod users;

pub use routes::{ROUTE_PREFIXES, bind, spawn};
pub use serve::{CorsSettings, TlsConfig, check_cors};
pub use state::{HttpSettings, HttpState};
