//! Segment files and their index: naming, the 24-byte index entry, and lookups by offset
//! and by timestamp that never scan a whole log.

use crate::constants::INDEX_ENTRY_SIZE;

/// `<20-digit start offset>.log`.
pub fn log_file_name(start_offset: u64) -> String {
    format!("{start_offset:020}.log")
}

/// `<20-digit start offset>.index`.
pub fn index_file_name(start_offset: u64) -> String {
    format!("{start_offset:020}.index")
}

/// Parses a segment's start offset from a `.log` file name.
pub fn parse_log_file_name(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".log")?;
    (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit())).then(|| stem.parse().ok())?
}

/// One entry per stored batch: where it starts and what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    /// Base offset of the batch, relative to the segment's start offset.
    pub relative_offset: u32,
    /// Byte position of the batch in the `.log` file.
    pub position: u32,
    /// The batch's `base_timestamp` (µs).
    pub timestamp: u64,
    pub message_count: u32,
    pub length: u32,
}

impl IndexEntry {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.relative_offset.to_le_bytes());
        out.extend_from_slice(&self.position.to_le_bytes());
        out.extend_from_slice(&self.timestamp.to_le_bytes());
        out.extend_from_slice(&self.message_count.to_le_bytes());
        out.extend_from_slice(&self.length.to_le_bytes());
    }

    pub fn decode(bytes: &[u8; INDEX_ENTRY_SIZE]) -> Self {
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        Self {
            relative_offset: u32_at(0),
            position: u32_at(4),
            timestamp: u64::from_le_bytes(bytes[8..16].try_into().unwrap()),
            message_count: u32_at(16),
            length: u32_at(20),
        }
    }

    /// Relative offset one past the batch's last message.
    pub fn end_relative_offset(&self) -> u64 {
        self.relative_offset as u64 + self.message_count as u64
    }
}

/// The entry of the batch that holds `relative_offset`, or the first batch after it.
pub fn find_by_offset(entries: &[IndexEntry], relative_offset: u64) -> Option<usize> {
    let index = entries.partition_point(|e| e.end_relative_offset() <= relative_offset);
    (index < entries.len()).then_some(index)
}

/// The first batch stamped at or after `timestamp`. Stamps only grow within a partition.
pub fn find_by_timestamp(entries: &[IndexEntry], timestamp: u64) -> Option<usize> {
    let index = entries.partition_point(|e| e.timestamp < timestamp);
    (index < entries.len()).then_some(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries() -> Vec<IndexEntry> {
        (0..4)
            .map(|i| IndexEntry {
                relative_offset: i * 10,
                position: i * 1000,
                timestamp: 100 + i as u64 * 10,
                message_count: 10,
                length: 1000,
            })
            .collect()
    }

    #[test]
    fn names_round_trip() {
        assert_eq!(log_file_name(42), "00000000000000000042.log");
        assert_eq!(index_file_name(0), "00000000000000000000.index");
        assert_eq!(parse_log_file_name(&log_file_name(123456)), Some(123456));
        assert_eq!(parse_log_file_name("123.log"), None);
        assert_eq!(parse_log_file_name("00000000000000000042.index"), None);
    }

    #[test]
    fn entry_round_trips() {
        let entry = entries()[2];
        let mut bytes = Vec::new();
        entry.encode(&mut bytes);
        assert_eq!(IndexEntry::decode(bytes.as_slice().try_into().unwrap()), entry);
    }

    #[test]
    fn finds_batches() {
        let entries = entries();
        assert_eq!(find_by_offset(&entries, 0), Some(0));
        assert_eq!(find_by_offset(&entries, 9), Some(0));
        assert_eq!(find_by_offset(&entries, 10), Some(1));
        assert_eq!(find_by_offset(&entries, 39), Some(3));
        assert_eq!(find_by_offset(&entries, 40), None);
        assert_eq!(find_by_timestamp(&entries, 0), Some(0));
        assert_eq!(find_by_timestamp(&entries, 111), Some(2));
        assert_eq!(find_by_timestamp(&entries, 131), None);
    }
}
