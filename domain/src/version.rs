//! The protocol version gate applied at login.

use crate::constants::PROTOCOL_VERSION;

/// Accepts every 0.11.x client: at least the server's version with patch zeroed, and the
/// same major and minor.
pub fn client_accepted(client_version: u32) -> bool {
    let minimum = PROTOCOL_VERSION & !0x3ff;
    client_version >= minimum && client_version >> 10 <= PROTOCOL_VERSION >> 10
}

/// The (max, min) window sent back with an IncompatibleProtocol eviction.
pub fn window() -> (u32, u32) {
    (PROTOCOL_VERSION, PROTOCOL_VERSION & !0x3ff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_accepts_only_0_11_x() {
        assert!(client_accepted(11264));
        assert!(client_accepted(11265));
        assert!(!client_accepted(10 << 10));
        assert!(!client_accepted(12 << 10));
        assert!(!client_accepted(1 << 20));
    }
}
