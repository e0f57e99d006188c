//! The five polling strategies and where each one starts reading.

use crate::error::ErrorCode;
use crate::reader::Reader;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollingStrategy {
    Offset(u64),
    /// Microseconds since the Unix epoch; starts at the first batch stamped at or after it.
    Timestamp(u64),
    First,
    Last,
    Next,
}

impl PollingStrategy {
    /// `[kind u8][value u64]`.
    pub fn decode(reader: &mut Reader<'_>) -> Result<Self, ErrorCode> {
        let kind = reader.u8()?;
        let value = reader.u64()?;
        Ok(match kind {
            1 => Self::Offset(value),
            2 => Self::Timestamp(value),
            3 => Self::First,
            4 => Self::Last,
            5 => Self::Next,
            _ => return Err(ErrorCode::InvalidFormat),
        })
    }
}

/// What a partition knows when a poll asks where to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionCursor {
    /// Lowest offset still stored (segments before it were deleted).
    pub first_offset: u64,
    /// Next offset to be assigned; the partition is empty when it equals `first_offset`.
    pub next_offset: u64,
    /// The consumer's stored offset, if any.
    pub stored_offset: Option<u64>,
}

/// The first offset to read for a non-timestamp strategy, or `None` when nothing is there.
/// Timestamp polls need the index, so the partition resolves those itself.
pub fn start_offset(strategy: PollingStrategy, count: u32, cursor: PartitionCursor) -> Option<u64> {
    if count == 0 || cursor.next_offset == cursor.first_offset {
        return None;
    }
    let last = cursor.next_offset - 1;
    let start = match strategy {
        PollingStrategy::Offset(offset) => offset.max(cursor.first_offset),
        PollingStrategy::First | PollingStrategy::Timestamp(_) => cursor.first_offset,
        PollingStrategy::Last => last.saturating_sub(count as u64 - 1).max(cursor.first_offset),
        PollingStrategy::Next => match cursor.stored_offset {
            Some(stored) => stored.checked_add(1)?.max(cursor.first_offset),
            None => cursor.first_offset,
        },
    };
    (start <= last).then_some(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CURSOR: PartitionCursor = PartitionCursor { first_offset: 0, next_offset: 10, stored_offset: None };

    #[test]
    fn each_strategy_starts_where_iggy_does() {
        assert_eq!(start_offset(PollingStrategy::Offset(3), 5, CURSOR), Some(3));
        assert_eq!(start_offset(PollingStrategy::First, 5, CURSOR), Some(0));
        assert_eq!(start_offset(PollingStrategy::Last, 3, CURSOR), Some(7));
        assert_eq!(start_offset(PollingStrategy::Last, 30, CURSOR), Some(0));
        assert_eq!(start_offset(PollingStrategy::Next, 5, CURSOR), Some(0));
        let stored = PartitionCursor { stored_offset: Some(4), ..CURSOR };
        assert_eq!(start_offset(PollingStrategy::Next, 5, stored), Some(5));
    }

    #[test]
    fn nothing_to_read() {
        assert_eq!(start_offset(PollingStrategy::Offset(10), 5, CURSOR), None);
        assert_eq!(start_offset(PollingStrategy::First, 0, CURSOR), None);
        let empty = PartitionCursor { first_offset: 4, next_offset: 4, stored_offset: None };
        assert_eq!(start_offset(PollingStrategy::First, 5, empty), None);
        let done = PartitionCursor { stored_offset: Some(9), ..CURSOR };
        assert_eq!(start_offset(PollingStrategy::Next, 5, done), None);
    }

    #[test]
    fn decodes_strategies() {
        let bytes = [4u8, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(PollingStrategy::decode(&mut Reader::new(&bytes)), Ok(PollingStrategy::Last));
        assert!(PollingStrategy::decode(&mut Reader::new(&[9u8; 9])).is_err());
    }
}
