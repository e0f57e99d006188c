//! GET_METADATA_CHANGES (17) requests as protocol 0.12 lays them out, and the two positions
//! a reader hands back: the 44-byte cursor after a record and the current-state page token.

use crate::error::ErrorCode;
use crate::reader::{Put, Reader};

/// Bytes of a cursor: `[log_id u128][op u64][checksum u128][ordinal u32]`.
pub const CURSOR_SIZE: usize = 44;
/// The most records or items one page may ask for (the clients' own bound).
pub const LIMIT_MAX: u32 = 1000;
/// Group codes 1..=8; bit `code - 1` of a group mask.
pub const GROUPS: std::ops::RangeInclusive<u8> = 1..=8;

/// A position in the change log: after record `ordinal` of op `op`. Op 0 is before every op.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cursor {
    pub log_id: u128,
    pub op: u64,
    pub checksum: u128,
    pub ordinal: u32,
}

impl Cursor {
    pub(crate) fn decode(reader: &mut Reader<'_>) -> Result<Self, ErrorCode> {
        let cursor =
            Self { log_id: reader.u128()?, op: reader.u64()?, checksum: reader.u128()?, ordinal: reader.u32()? };
        if cursor.op == 0 && (cursor.checksum != 0 || cursor.ordinal != 0) {
            return Err(ErrorCode::InvalidFormat);
        }
        Ok(cursor)
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_u128(self.log_id);
        out.put_u64(self.op);
        out.put_u128(self.checksum);
        out.put_u32(self.ordinal);
    }
}

/// Where a current-state scan goes on: after item `last_key` of group `group`, within the
/// groups of `groups_mask`, anchored at the change-log position the scan began at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageToken {
    pub anchor: Cursor,
    pub required_head: u64,
    pub groups_mask: u8,
    pub group: u8,
    pub last_key: Vec<u8>,
}

impl PageToken {
    pub(crate) fn decode(reader: &mut Reader<'_>) -> Result<Self, ErrorCode> {
        let anchor = Cursor::decode(reader)?;
        let required_head = reader.u64()?;
        let groups_mask = reader.u8()?;
        let group = reader.u8()?;
        let key_len = u16::from_le_bytes([reader.u8()?, reader.u8()?]) as usize;
        let last_key = reader.bytes(key_len)?.to_vec();
        if !GROUPS.contains(&group) || groups_mask & mask_bit(group) == 0 || required_head < anchor.op {
            return Err(ErrorCode::InvalidFormat);
        }
        Ok(Self { anchor, required_head, groups_mask, group, last_key })
    }

    pub(crate) fn encoded_len(&self) -> usize {
        CURSOR_SIZE + 8 + 1 + 1 + 2 + self.last_key.len()
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        self.anchor.encode(out);
        out.put_u64(self.required_head);
        out.put_u8(self.groups_mask);
        out.put_u8(self.group);
        out.put_u16(self.last_key.len() as u16);
        out.extend_from_slice(&self.last_key);
    }
}

/// Where a query starts reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// The oldest retained record.
    Earliest,
    /// No records: a cursor at the newest one.
    Latest,
    /// The records after a cursor.
    After(Cursor),
    /// Pages of the current state instead of records; the first page has no token.
    Current(Option<PageToken>),
}

/// A decoded GET_METADATA_CHANGES request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangesQuery {
    pub start: Start,
    /// Records timestamped within `since..=until` (microseconds), when given.
    pub since: Option<u64>,
    pub until: Option<u64>,
    pub limit: u32,
    /// Bit `code - 1` for each requested group; every group when the request names none.
    pub groups_mask: u8,
}

pub(crate) const fn mask_bit(group: u8) -> u8 {
    1 << (group - 1)
}

fn optional_u64(reader: &mut Reader<'_>) -> Result<Option<u64>, ErrorCode> {
    match reader.u8()? {
        0 => Ok(None),
        1 => Ok(Some(reader.u64()?)),
        _ => Err(ErrorCode::InvalidFormat),
    }
}

impl ChangesQuery {
    /// `[start u8][cursor 44][since opt u64][until opt u64][limit u32][count u8][group u8]*
    /// [token_len u16][token]`, checked as the clients check it before sending.
    pub fn decode(reader: &mut Reader<'_>) -> Result<Self, ErrorCode> {
        let mode = reader.u8()?;
        let cursor_bytes = reader.bytes(CURSOR_SIZE)?;
        let since = optional_u64(reader)?;
        let until = optional_u64(reader)?;
        let limit = reader.u32()?;
        let count = reader.u8()? as usize;
        let mut groups_mask = 0;
        for &group in reader.bytes(count)? {
            if !GROUPS.contains(&group) {
                return Err(ErrorCode::InvalidFormat);
            }
            groups_mask |= mask_bit(group);
        }
        let token_len = u16::from_le_bytes([reader.u8()?, reader.u8()?]) as usize;
        let token_bytes = reader.bytes(token_len)?;
        reader.finish()?;
        let bounded = since.is_some() || until.is_some();
        if !(1..=LIMIT_MAX).contains(&limit) || since.zip(until).is_some_and(|(s, u)| s > u) {
            return Err(ErrorCode::InvalidFormat);
        }
        if (mode != 2 && cursor_bytes.iter().any(|b| *b != 0)) || (mode != 3 && token_len != 0) {
            return Err(ErrorCode::InvalidFormat);
        }
        let start = match mode {
            0 => Start::Earliest,
            1 if !bounded => Start::Latest,
            2 => Start::After(Cursor::decode(&mut Reader::new(cursor_bytes))?),
            3 if !bounded && token_len == 0 => Start::Current(None),
            3 if !bounded => {
                let mut token_reader = Reader::new(token_bytes);
                let token = PageToken::decode(&mut token_reader)?;
                token_reader.finish()?;
                Start::Current(Some(token))
            }
            _ => return Err(ErrorCode::InvalidFormat),
        };
        Ok(Self { start, since, until, limit, groups_mask: if groups_mask == 0 { u8::MAX } else { groups_mask } })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(mode: u8, cursor: Cursor, limit: u32, groups: &[u8], token: Option<&PageToken>) -> Vec<u8> {
        let mut out = vec![mode];
        cursor.encode(&mut out);
        out.extend_from_slice(&[0, 1]);
        out.put_u64(50);
        out.put_u32(limit);
        out.put_u8(groups.len() as u8);
        out.extend_from_slice(groups);
        match token {
            Some(token) => {
                out.put_u16(token.encoded_len() as u16);
                token.encode(&mut out);
            }
            None => out.put_u16(0),
        }
        out
    }

    #[test]
    fn decodes_each_start_and_refuses_what_the_clients_refuse() {
        let cursor = Cursor { log_id: 7, op: 9, checksum: 3, ordinal: 1 };
        let after = ChangesQuery::decode(&mut Reader::new(&request(2, cursor, 10, &[1, 2], None))).unwrap();
        assert_eq!(after.start, Start::After(cursor));
        assert_eq!((after.since, after.until, after.limit, after.groups_mask), (None, Some(50), 10, 0b11));
        let all = ChangesQuery::decode(&mut Reader::new(&request(0, Cursor::default(), 1, &[], None))).unwrap();
        assert_eq!((all.start, all.groups_mask), (Start::Earliest, u8::MAX));

        let refused = [
            request(0, cursor, 10, &[], None),           // a cursor outside After
            request(0, Cursor::default(), 0, &[], None), // limit 0
            request(0, Cursor::default(), LIMIT_MAX + 1, &[], None),
            request(0, Cursor::default(), 10, &[9], None), // no group 9
            request(1, Cursor::default(), 10, &[], None),  // Latest with a time bound
            request(4, Cursor::default(), 10, &[], None),  // no mode 4
            request(2, Cursor { log_id: 7, op: 0, checksum: 1, ordinal: 0 }, 10, &[], None),
        ];
        for bytes in refused {
            assert_eq!(ChangesQuery::decode(&mut Reader::new(&bytes)), Err(ErrorCode::InvalidFormat), "{bytes:?}");
        }
        let mut trailing = request(0, Cursor::default(), 10, &[], None);
        trailing.push(0);
        assert!(ChangesQuery::decode(&mut Reader::new(&trailing)).is_err());
    }

    #[test]
    fn a_page_token_round_trips_and_must_name_a_group_of_its_mask() {
        let token = PageToken {
            anchor: Cursor::default(),
            required_head: 4,
            groups_mask: 0b10,
            group: 2,
            last_key: vec![1; 8],
        };
        let mut bytes = Vec::new();
        token.encode(&mut bytes);
        assert_eq!(bytes.len(), token.encoded_len());
        assert_eq!(PageToken::decode(&mut Reader::new(&bytes)), Ok(token.clone()));
        let outside = PageToken { group: 1, ..token };
        let mut bytes = Vec::new();
        outside.encode(&mut bytes);
        assert_eq!(PageToken::decode(&mut Reader::new(&bytes)), Err(ErrorCode::InvalidFormat));
    }
}
