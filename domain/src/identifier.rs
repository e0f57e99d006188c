//! Stream, topic, user and group identifiers: numeric ids or exact names.

use crate::error::ErrorCode;
use crate::reader::Reader;

/// An Identifier on the wire: `[kind u8][len u8][value]`; kind 1 is a u32 (len 4), kind 2 a name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Identifier {
    Numeric(u32),
    Name(String),
}

impl Identifier {
    pub fn decode(reader: &mut Reader<'_>) -> Result<Self, ErrorCode> {
        let kind = reader.u8()?;
        let len = reader.u8()? as usize;
        match (kind, len) {
            (1, 4) => Ok(Self::Numeric(reader.u32()?)),
            (2, 1..) => {
                let bytes = reader.bytes(len)?;
                let name = std::str::from_utf8(bytes).map_err(|_| ErrorCode::InvalidIdentifier)?;
                Ok(Self::Name(name.to_owned()))
            }
            _ => Err(ErrorCode::InvalidIdentifier),
        }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Numeric(id) => {
                out.extend_from_slice(&[1, 4]);
                out.extend_from_slice(&id.to_le_bytes());
            }
            Self::Name(name) => {
                out.extend_from_slice(&[2, name.len() as u8]);
                out.extend_from_slice(name.as_bytes());
            }
        }
    }
}

impl std::fmt::Display for Identifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Numeric(id) => write!(f, "{id}"),
            Self::Name(name) => write!(f, "{name}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_both_kinds() {
        for id in [Identifier::Numeric(7), Identifier::Name("orders".into())] {
            let mut out = Vec::new();
            id.encode(&mut out);
            assert_eq!(Identifier::decode(&mut Reader::new(&out)).unwrap(), id);
        }
    }

    #[test]
    fn rejects_numeric_with_wrong_length_and_empty_names() {
        for bad in [&[1u8, 3, 0, 0, 0][..], &[2, 0], &[3, 1, b'a'], &[2, 5, b'a']] {
            assert!(Identifier::decode(&mut Reader::new(bad)).is_err());
        }
    }
}
