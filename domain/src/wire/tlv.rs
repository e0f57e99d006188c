//! The key/value TLV blocks shared by message user headers and resource options:
//! `[key_kind u8][key_len u32][key][value_kind u8][value_len u32][value]`, repeated.

use crate::constants::MAX_USER_HEADERS_SIZE;
use crate::error::ErrorCode;
use crate::reader::Reader;

pub const KIND_RAW: u8 = 1;
pub const KIND_STRING: u8 = 2;
pub const KIND_BOOL: u8 = 3;
pub const KIND_UINT32: u8 = 11;
pub const KIND_UINT64: u8 = 12;
const KIND_MAX: u8 = 15;
const MAX_OPTIONS: usize = 1024;

/// One decoded entry, borrowing from the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry<'a> {
    pub key_kind: u8,
    pub key: &'a [u8],
    pub value_kind: u8,
    pub value: &'a [u8],
}

fn field<'a>(reader: &mut Reader<'a>) -> Result<(u8, &'a [u8]), ErrorCode> {
    let kind = reader.u8()?;
    if kind == 0 || kind > KIND_MAX {
        return Err(ErrorCode::InvalidHeaderKind);
    }
    let len = reader.u32()? as usize;
    if !(1..=255).contains(&len) {
        return Err(ErrorCode::InvalidFormat);
    }
    Ok((kind, reader.bytes(len)?))
}

/// Decodes and validates a whole block; an empty block has no entries.
pub fn decode(block: &[u8]) -> Result<Vec<Entry<'_>>, ErrorCode> {
    if block.len() > MAX_USER_HEADERS_SIZE {
        return Err(ErrorCode::TooBigUserHeaders);
    }
    let mut reader = Reader::new(block);
    let mut entries = Vec::new();
    while reader.remaining() > 0 {
        let (key_kind, key) = field(&mut reader)?;
        let (value_kind, value) = field(&mut reader)?;
        entries.push(Entry { key_kind, key, value_kind, value });
    }
    Ok(entries)
}

/// Validates an options block: string keys, unique, bounded in count.
pub fn decode_options(block: &[u8]) -> Result<Vec<Entry<'_>>, ErrorCode> {
    let entries = decode(block).map_err(|_| ErrorCode::InvalidFormat)?;
    if entries.len() > MAX_OPTIONS {
        return Err(ErrorCode::OptionsBlockTooLarge);
    }
    let mut keys = Vec::with_capacity(entries.len());
    for entry in &entries {
        if entry.key_kind != KIND_STRING || std::str::from_utf8(entry.key).is_err() {
            return Err(ErrorCode::InvalidFormat);
        }
        keys.push(entry.key);
    }
    keys.sort_unstable();
    if keys.windows(2).any(|pair| pair[0] == pair[1]) {
        return Err(ErrorCode::InvalidFormat);
    }
    Ok(entries)
}

/// Appends one entry with a string key.
pub fn put(out: &mut Vec<u8>, key: &str, value_kind: u8, value: &[u8]) {
    out.push(KIND_STRING);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key.as_bytes());
    out.push(value_kind);
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(value);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_entries() {
        let mut block = Vec::new();
        put(&mut block, "durability", KIND_STRING, b"replicated");
        put(&mut block, "segment_size", KIND_UINT64, &7u64.to_le_bytes());
        let entries = decode_options(&block).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].key, b"durability");
        assert_eq!(entries[1].value, 7u64.to_le_bytes());
    }

    #[test]
    fn rejects_zero_kind_empty_values_truncation_and_duplicates() {
        assert!(decode(&[0, 1, 0, 0, 0, b'a']).is_err());
        assert!(decode(&[2, 0, 0, 0, 0]).is_err());
        assert!(decode(&[2, 9, 0, 0, 0, b'a']).is_err());
        let mut dup = Vec::new();
        put(&mut dup, "a", KIND_STRING, b"x");
        put(&mut dup, "a", KIND_STRING, b"y");
        assert!(decode_options(&dup).is_err());
    }
}
