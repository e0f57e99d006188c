//! The protocol generations Rill serves, and the gate applied at login: a client's announced
//! version picks the dialect its connection speaks from then on.
//!
//! Versions are packed `major << 20 | minor << 10 | patch`. Each row of [`SERVED`] maps a
//! range of client versions to one wire layout; a future 0.12.x that keeps the 0.12.2
//! layout is one more row, and one that changes it is a row and a new [`Dialect`] variant.

/// A wire generation: the frame rules, command set and reply layouts of one protocol line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Dialect {
    /// Protocol 0.11 (Iggy server 0.9, `iggy` crate 0.11.0, PyPI `apache-iggy` 0.9.0).
    #[default]
    V11,
    /// Protocol 0.12 as the 0.12.2 clients speak it (Iggy server 0.10, `iggy` 0.11.1-edge.9).
    V12,
}

/// Packs a version as the protocol writes it.
pub const fn pack(major: u32, minor: u32, patch: u32) -> u32 {
    major << 20 | minor << 10 | patch
}

/// Every client version served, inclusive ranges, lowest first.
pub const SERVED: &[(u32, u32, Dialect)] = &[
    // Every 0.11.x: the 0.11 line never changed its layout within the minor.
    (pack(0, 11, 0), pack(0, 11, 1023), Dialect::V11),
    // The 0.12 line changed layouts between patches before 0.12.2; only 0.12.2 is known.
    (pack(0, 12, 2), pack(0, 12, 2), Dialect::V12),
];

/// The dialect a client announcing `client_version` speaks, if it is served.
pub fn dialect_of(client_version: u32) -> Option<Dialect> {
    SERVED.iter().find(|(low, high, _)| (*low..=*high).contains(&client_version)).map(|(_, _, dialect)| *dialect)
}

/// The (max, min) window sent back with an IncompatibleProtocol eviction.
pub fn window() -> (u32, u32) {
    let low = SERVED.iter().map(|(low, _, _)| *low).min().unwrap_or(0);
    let high = SERVED.iter().map(|(_, high, _)| *high).max().unwrap_or(0);
    (high, low)
}

impl Dialect {
    /// The protocol version the server announces to this dialect's clients at login.
    pub fn server_version(self) -> u32 {
        match self {
            Dialect::V11 => pack(0, 11, 0),
            Dialect::V12 => pack(0, 12, 2),
        }
    }

    /// A short label for the console, metrics and logs.
    pub fn label(self) -> &'static str {
        match self {
            Dialect::V11 => "0.11",
            Dialect::V12 => "0.12",
        }
    }

    /// Whether request frames carry a random request identifier in `request_checksum`
    /// rather than an XXH3 of their body.
    pub fn random_request_checksum(self) -> bool {
        self == Dialect::V12
    }
}

/// The dialect a login or session-binding body announces: its first four bytes are the
/// client's protocol version in both generations.
pub fn announced(body: &[u8]) -> Option<Dialect> {
    let version = u32::from_le_bytes(body.get(..4)?.try_into().ok()?);
    dialect_of(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_0_11_patch_and_0_12_2_are_served() {
        assert_eq!(dialect_of(11264), Some(Dialect::V11));
        assert_eq!(dialect_of(11265), Some(Dialect::V11));
        assert_eq!(dialect_of(0x3002), Some(Dialect::V12));
        assert_eq!(dialect_of(10 << 10), None);
        assert_eq!(dialect_of(pack(0, 12, 0)), None);
        assert_eq!(dialect_of(pack(0, 12, 3)), None);
        assert_eq!(dialect_of(pack(0, 13, 0)), None);
        assert_eq!(dialect_of(1 << 20), None);
    }

    #[test]
    fn the_eviction_window_spans_every_row() {
        assert_eq!(window(), (pack(0, 12, 2), pack(0, 11, 0)));
    }

    #[test]
    fn a_body_announces_its_version_in_its_first_bytes() {
        assert_eq!(announced(&[0x02, 0x30, 0, 0, 1]), Some(Dialect::V12));
        assert_eq!(announced(&[0x00, 0x2c, 0, 0]), Some(Dialect::V11));
        assert_eq!(announced(&[0x00, 0x2c]), None);
    }
}
