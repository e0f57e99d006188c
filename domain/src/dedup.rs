//! Message-id deduplication: the window of ids a partition stored recently, bounded in
//! count and in age. A producer that retries a send after a timeout gets its duplicates
//! dropped instead of written twice. Id 0 means "no id" and is never deduplicated.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::error::ErrorCode;
use crate::reader::Reader;

/// Ids stored in one partition within the window, with the time each was stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DedupWindow {
    max_entries: usize,
    expiry_us: u64,
    stored_at: BTreeMap<u128, u64>,
    /// Ids in the order they were stored, for eviction by count and age.
    order: VecDeque<(u128, u64)>,
}

impl DedupWindow {
    /// A window of at most `max_entries` ids (at least one), each kept `expiry_us`.
    pub fn new(max_entries: usize, expiry_us: u64) -> Self {
        Self { max_entries: max_entries.max(1), expiry_us, stored_at: BTreeMap::new(), order: VecDeque::new() }
    }

    pub fn len(&self) -> usize {
        self.stored_at.len()
    }

    /// Takes new bounds (a partition group's op carries the topic's), dropping the oldest
    /// ids past a smaller count at once and the expired ones at the next lookup.
    pub fn set_bounds(&mut self, max_entries: usize, expiry_us: u64) {
        (self.max_entries, self.expiry_us) = (max_entries.max(1), expiry_us);
        while self.stored_at.len() > self.max_entries
            && let Some(&(oldest, at)) = self.order.front()
        {
            self.pop_oldest(oldest, at);
        }
    }

    /// `[max u32][expiry_us u64][ids u32]`, then `[id u128][stored_at u64]` each, oldest
    /// first: the window as a partition group's snapshot holds it.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.max_entries as u32).to_le_bytes());
        out.extend_from_slice(&self.expiry_us.to_le_bytes());
        out.extend_from_slice(&(self.order.len() as u32).to_le_bytes());
        for (id, at) in &self.order {
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&at.to_le_bytes());
        }
    }

    /// A window `encode` wrote; a repeated id or more ids than the bound is malformed.
    pub fn decode(reader: &mut Reader<'_>) -> Result<Self, ErrorCode> {
        let mut window = Self::new(reader.u32()? as usize, reader.u64()?);
        let count = reader.u32()? as usize;
        if count > window.max_entries {
            return Err(ErrorCode::InvalidFormat);
        }
        for _ in 0..count {
            let (id, at) = (reader.u128()?, reader.u64()?);
            if window.stored_at.insert(id, at).is_some() {
                return Err(ErrorCode::InvalidFormat);
            }
            window.order.push_back((id, at));
        }
        Ok(window)
    }

    pub fn is_empty(&self) -> bool {
        self.stored_at.is_empty()
    }

    /// Forgets ids stored longer than the expiry ago.
    pub fn evict_expired(&mut self, now_us: u64) {
        while let Some(&(id, at)) = self.order.front() {
            if at.saturating_add(self.expiry_us) > now_us {
                break;
            }
            self.pop_oldest(id, at);
        }
    }

    fn pop_oldest(&mut self, id: u128, at: u64) {
        self.order.pop_front();
        debug_assert_eq!(self.stored_at.get(&id), Some(&at), "each id is queued once");
        self.stored_at.remove(&id);
    }

    pub fn contains(&self, id: u128) -> bool {
        self.stored_at.contains_key(&id)
    }

    /// Which of `ids` (in batch order) are duplicates: of an id still in the window, or of
    /// an earlier message of the same batch. `None` when none is, the common case, which
    /// costs one lookup per id and one sort of the batch's ids.
    pub fn duplicates(&mut self, ids: &[u128], now_us: u64) -> Option<Vec<bool>> {
        self.evict_expired(now_us);
        let in_window = ids.iter().any(|&id| id != 0 && self.contains(id));
        let mut sorted: Vec<u128> = ids.iter().copied().filter(|&id| id != 0).collect();
        sorted.sort_unstable();
        let repeated = sorted.windows(2).any(|pair| pair[0] == pair[1]);
        if !in_window && !repeated {
            return None;
        }
        let mut seen = BTreeSet::new();
        Some(ids.iter().map(|&id| id != 0 && (self.contains(id) || !seen.insert(id))).collect())
    }

    /// Remembers ids that were stored at `now_us` (call only once they are stored). An id
    /// already in the window keeps its first time: the window measures from the original.
    pub fn record(&mut self, ids: &[u128], now_us: u64) {
        for &id in ids.iter().filter(|&&id| id != 0) {
            if self.stored_at.contains_key(&id) {
                continue;
            }
            self.stored_at.insert(id, now_us);
            self.order.push_back((id, now_us));
            if self.stored_at.len() > self.max_entries
                && let Some(&(oldest, at)) = self.order.front()
            {
                self.pop_oldest(oldest, at);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_id_is_a_duplicate_until_it_expires() {
        let mut window = DedupWindow::new(10, 100);
        assert_eq!(window.duplicates(&[1, 2], 0), None);
        window.record(&[1, 2], 0);
        assert_eq!(window.duplicates(&[2, 3], 50), Some(vec![true, false]));
        assert_eq!(window.duplicates(&[1, 2], 100), None, "expired at 100");
        assert!(window.is_empty());
    }

    #[test]
    fn a_window_decodes_to_itself_and_takes_smaller_bounds() {
        let mut window = DedupWindow::new(4, 100);
        window.record(&[9, 3, 5], 7);
        window.record(&[1], 8);
        let mut bytes = Vec::new();
        window.encode(&mut bytes);
        let decoded = DedupWindow::decode(&mut Reader::new(&bytes)).unwrap();
        assert_eq!(decoded, window);
        for cut in 0..bytes.len() {
            assert!(DedupWindow::decode(&mut Reader::new(&bytes[..cut])).is_err(), "cut at {cut}");
        }
        window.set_bounds(2, 100);
        assert_eq!((window.len(), window.contains(5), window.contains(1)), (2, true, true), "the oldest went");
    }

    #[test]
    fn id_zero_is_never_a_duplicate_and_never_stored() {
        let mut window = DedupWindow::new(10, 100);
        window.record(&[0, 0, 5], 0);
        assert_eq!(window.len(), 1);
        assert_eq!(window.duplicates(&[0, 0, 0], 1), None);
    }

    #[test]
    fn repeats_inside_one_batch_are_duplicates() {
        let mut window = DedupWindow::new(10, 100);
        assert_eq!(window.duplicates(&[7, 8, 7, 7, 0, 0], 0), Some(vec![false, false, true, true, false, false]));
    }

    #[test]
    fn the_oldest_ids_go_past_the_bound() {
        let mut window = DedupWindow::new(3, u64::MAX);
        window.record(&[1, 2, 3, 4], 0);
        assert_eq!(window.len(), 3);
        assert!(!window.contains(1));
        assert!(window.contains(4));
        window.record(&[4], 50);
        assert_eq!(window.order.len(), 3, "a known id is not queued twice");
        assert!(window.contains(4) && window.contains(3));
    }
}
