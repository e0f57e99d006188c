//! The black-box suite: the real rill-server binary driven by the official iggy 0.11.0 client,
//! one module per area, linked into a single test binary (one link and one copy on disk).

mod bad_frames;
mod cli;
mod cluster;
mod cluster_faults;
mod cluster_routing;
mod config;
mod consumer_groups;
mod crash_loop;
mod dedup;
mod direct_io;
mod disk_full;
mod encryption;
mod high_level;
mod hostile;
mod http_api;
mod integrity;
mod limits;
mod messages;
mod metadata_journal;
mod metrics;
mod offsets;
mod packaging;
mod permissions;
mod replica_plane;
mod restart;
mod retention;
mod sessions;
mod sharding;
mod streams_topics;
mod system;
mod systemd;
mod telemetry;
mod tokens;
mod transport_bad_input;
mod users;
