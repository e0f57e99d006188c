//! The blocks a shard wrote direct most recently, kept in the pool buffers they were
//! written from, so that polls of fresh data on a direct log read memory rather than the
//! device (the page cache holds nothing of a direct log). One per shard, bounded by a byte
//! budget (buffer capacities counted), oldest write evicted first.
//!
//! A log's chunks only grow at its end: each append's chunk starts at or before the end of
//! the one before (it rewrites the last partial block) and ends after it, so the chunk with
//! the greatest start at or below a position is the one that holds it, if any does.

use std::collections::{BTreeMap, HashMap, VecDeque};

use rill_application::memory_pool::PoolBuf;

#[derive(Debug)]
struct Chunk {
    buf: PoolBuf,
    /// Where the chunk's bytes start in `buf`.
    offset: usize,
    len: usize,
    seq: u64,
}

#[derive(Debug)]
pub(crate) struct RecentWrites {
    budget: usize,
    bytes: usize,
    next_file: u64,
    next_seq: u64,
    /// Per file, chunks by their start position in it.
    files: HashMap<u64, BTreeMap<u64, Chunk>>,
    /// (file, start, seq) in write order; entries whose chunk was replaced are skipped.
    order: VecDeque<(u64, u64, u64)>,
    live: usize,
}

impl RecentWrites {
    pub(crate) fn new(budget: usize) -> Self {
        Self { budget, bytes: 0, next_file: 0, next_seq: 0, files: HashMap::new(), order: VecDeque::new(), live: 0 }
    }

    /// A name for a newly opened file.
    pub(crate) fn register(&mut self) -> u64 {
        self.next_file += 1;
        self.next_file
    }

    /// Keeps `buf[offset..offset + len]`, the bytes at `start` of `file`.
    pub(crate) fn insert(&mut self, file: u64, start: u64, buf: PoolBuf, offset: usize, len: usize) {
        if buf.capacity() > self.budget {
            return;
        }
        self.next_seq += 1;
        let seq = self.next_seq;
        self.bytes += buf.capacity();
        let chunk = Chunk { buf, offset, len, seq };
        match self.files.entry(file).or_default().insert(start, chunk) {
            Some(replaced) => self.bytes -= replaced.buf.capacity(),
            None => self.live += 1,
        }
        self.order.push_back((file, start, seq));
        while self.bytes > self.budget {
            let Some((file, start, seq)) = self.order.pop_front() else { break };
            self.remove_if(file, start, |chunk| chunk.seq == seq);
        }
        // Replaced chunks leave stale entries behind: drop them before they pile up.
        if self.order.len() > 2 * self.live + 64 {
            let files = &self.files;
            self.order.retain(|(file, start, seq)| {
                files.get(file).and_then(|chunks| chunks.get(start)).is_some_and(|chunk| chunk.seq == *seq)
            });
        }
    }

    fn remove_if(&mut self, file: u64, start: u64, matches: impl Fn(&Chunk) -> bool) {
        let Some(chunks) = self.files.get_mut(&file) else { return };
        if chunks.get(&start).is_some_and(matches) {
            let chunk = chunks.remove(&start).expect("just found");
            self.bytes -= chunk.buf.capacity();
            self.live -= 1;
        }
        if chunks.is_empty() {
            self.files.remove(&file);
        }
    }

    /// Fills `out` with the bytes at `position` of `file` when chunks hold all of them.
    pub(crate) fn read(&self, file: u64, position: u64, out: &mut [u8]) -> bool {
        let Some(chunks) = self.files.get(&file) else { return false };
        let end = position + out.len() as u64;
        let mut at = position;
        while at < end {
            let Some((&start, chunk)) = chunks.range(..=at).next_back() else { return false };
            let chunk_end = start + chunk.len as u64;
            if chunk_end <= at {
                return false;
            }
            let n = (chunk_end.min(end) - at) as usize;
            let from = chunk.offset + (at - start) as usize;
            let to = (at - position) as usize;
            out[to..to + n].copy_from_slice(&chunk.buf[from..from + n]);
            at += n as u64;
        }
        true
    }

    /// Forgets every chunk of `file` holding bytes at or past `from` (a truncation, or a
    /// write that was not an append).
    pub(crate) fn forget_from(&mut self, file: u64, from: u64) {
        let Some(chunks) = self.files.get(&file) else { return };
        let stale: Vec<u64> =
            chunks.iter().filter(|(start, c)| **start + c.len as u64 > from).map(|(s, _)| *s).collect();
        for start in stale {
            self.remove_if(file, start, |_| true);
        }
    }

    /// Forgets the file altogether (it was closed).
    pub(crate) fn forget(&mut self, file: u64) {
        self.forget_from(file, 0);
    }

    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(len: usize, fill: u8) -> PoolBuf {
        PoolBuf::plain(vec![fill; len])
    }

    #[test]
    fn reads_span_overlapping_chunks_and_miss_what_is_not_held() {
        let mut recent = RecentWrites::new(1 << 20);
        let file = recent.register();
        // Two appends: the second rewrote the first's last block from 4096.
        let mut first = chunk(6000, 1);
        first[4096..].fill(2);
        recent.insert(file, 0, first, 0, 6000);
        let mut second = chunk(8192, 2);
        second[6000 - 4096..].fill(3);
        recent.insert(file, 4096, second, 0, 8000);
        let mut out = vec![0; 12_000 - 100];
        assert!(recent.read(file, 100, &mut out));
        assert!(out[..4096 - 100].iter().all(|&b| b == 1));
        assert!(out[4096 - 100..6000 - 100].iter().all(|&b| b == 2));
        assert!(out[6000 - 100..].iter().all(|&b| b == 3));
        assert!(!recent.read(file, 11_000, &mut [0; 2000]), "past the end");
        assert!(!recent.read(file + 1, 0, &mut [0; 10]), "another file");
    }

    #[test]
    fn the_oldest_writes_go_first_and_truncation_forgets_what_it_cut() {
        let mut recent = RecentWrites::new(10_000);
        let file = recent.register();
        recent.insert(file, 0, chunk(4096, 1), 0, 4096);
        recent.insert(file, 4096, chunk(4096, 2), 0, 4096);
        recent.insert(file, 8192, chunk(4096, 3), 0, 4096);
        assert_eq!(recent.bytes(), 8192, "the first was evicted");
        assert!(!recent.read(file, 0, &mut [0; 10]));
        assert!(recent.read(file, 4096, &mut [0; 8192]));
        recent.forget_from(file, 9000);
        assert!(recent.read(file, 4096, &mut [0; 4096]));
        assert!(!recent.read(file, 8192, &mut [0; 10]));
        recent.forget(file);
        assert_eq!(recent.bytes(), 0);
        assert!(recent.files.is_empty());
    }

    #[test]
    fn replacing_a_chunk_in_place_keeps_the_stale_order_bounded() {
        let mut recent = RecentWrites::new(1 << 20);
        let file = recent.register();
        for i in 0..10_000 {
            // Small appends inside one block: each rewrites the chunk at 0.
            recent.insert(file, 0, chunk(4096, 0), 0, 1 + i % 4000);
        }
        assert_eq!(recent.bytes(), 4096);
        assert!(recent.order.len() <= 2 * recent.live + 64);
    }
}
