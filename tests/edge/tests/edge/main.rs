//! The protocol 0.12 black-box suite: the official 0.12-line client (`iggy` 0.11.1-edge.9)
//! against the real server, one module per area.

mod basics;
mod cli;
mod deferred;
mod encryption;
mod fetch;
mod mixed;
mod pipelining;
mod producers;
mod sessions;
mod surface;
mod updates;
