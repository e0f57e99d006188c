//! Rill's composition root: reads configuration, builds the adapters, opens the system and
//! serves it. `main.rs` is a thin wrapper so the wiring can be tested as a library.

pub mod cluster;
pub mod config;
pub mod config_cluster;
pub mod config_data;
pub mod config_iggy;
pub mod config_sections;
pub mod dotenv;
pub mod env;
pub mod host;
pub mod logfile;
pub mod otlp;
pub mod page_alloc;
pub mod server;
pub mod session_ledger;
pub mod systemd;
pub mod transports;

#[global_allocator]
static ALLOCATOR: page_alloc::PageAligned = page_alloc::PageAligned;
