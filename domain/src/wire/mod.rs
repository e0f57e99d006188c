//! The Iggy binary protocol 0.11 codec: frame headers, commands and reply bodies. Pure code;
//! transports only frame bytes and hand them here.

pub mod codes;
pub mod command;
pub mod decode;
pub mod encode;
pub mod fetch;
pub mod header;
pub mod membership;
pub mod response;
pub mod tlv;
pub mod users;
