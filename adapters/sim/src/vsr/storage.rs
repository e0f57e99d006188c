//! Simulated storage for one replica: journal and superblock writes complete after a seeded
//! delay (journal writes in any order), a crash loses the writes still in flight and may leave a
//! torn frame behind, a journal write may be misdirected (its frame overwrites an earlier frame
//! while the write completes as if nothing happened), and reading the journal back after a
//! restart may flip a bit in a frame (the codec must reject it, and the read reports the journal
//! as damaged).

use std::collections::BTreeSet;

use rill_domain::vsr::{Checkpoint, Durable, Entry, Superblock};

use super::Prng;

#[derive(Debug, Clone)]
pub enum StorageWrite {
    Entry(Entry),
    View(Superblock),
}

/// Whether a misdirected write destroyed a frame the replica may still rely on: from the write
/// until a restart has read the journal back and the replica has since named a log durably
/// without declaring it damaged (it learned what it lacked, or lacked nothing that mattered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Misdirected {
    No,
    Unread,
    ReadBack,
}

#[derive(Debug)]
pub struct ReplicaStorage {
    /// Durable journal frames in write order (`metadata/journal.wal`).
    journal: Vec<Vec<u8>>,
    durable: BTreeSet<(u64, u128)>,
    pending: Vec<(u64, StorageWrite)>,
    superblock: Superblock,
    /// Written synchronously: the simulator keeps the whole journal, so a lost checkpoint would
    /// only mean a longer replay, and the replica does not wait for it.
    pub checkpoint: Option<Checkpoint>,
    prng: Prng,
    pub delay_max_ticks: u64,
    misdirected: Misdirected,
}

impl ReplicaStorage {
    pub fn new(seed: u64, replica: u8, delay_max_ticks: u64) -> Self {
        let prng = Prng::stream(seed, &format!("storage-{replica}"));
        Self {
            journal: Vec::new(),
            durable: BTreeSet::new(),
            pending: Vec::new(),
            superblock: Superblock::default(),
            checkpoint: None,
            prng,
            delay_max_ticks,
            misdirected: Misdirected::No,
        }
    }

    pub fn submit(&mut self, tick: u64, write: StorageWrite) {
        let done = tick + self.prng.range(1, self.delay_max_ticks);
        self.pending.push((done, write));
    }

    /// Whether a journal write completes by `tick`.
    pub fn entry_write_due(&self, tick: u64) -> bool {
        self.pending.iter().any(|(at, write)| *at <= tick && matches!(write, StorageWrite::Entry(_)))
    }

    /// With probability `misdirect_ppm`, when a journal write completes by `tick`, the earlier
    /// frame it would land on if misdirected: its index and, if it decodes, its entry's
    /// `(op, checksum)`. The caller decides whether the fault budget allows it.
    pub fn draw_misdirect(&mut self, tick: u64, misdirect_ppm: u64) -> Option<(usize, Option<(u64, u128)>)> {
        // No draw at all without the fault, so that seeds without it replay as before.
        if misdirect_ppm == 0
            || !self.entry_write_due(tick)
            || self.journal.is_empty()
            || !self.prng.chance(misdirect_ppm)
        {
            return None;
        }
        let victim = self.prng.below(self.journal.len() as u64) as usize;
        let key = Entry::decode(&self.journal[victim]).ok().map(|entry| (entry.op, entry.checksum));
        Some((victim, key))
    }

    /// Writes that completed by `tick`, now durable, in submission order. The first journal write
    /// among them lands on frame `misdirect` instead of being appended, if that is given: the
    /// frame there is gone, the place it was meant for holds nothing, and the write completes.
    pub fn complete(&mut self, tick: u64, mut misdirect: Option<usize>) -> Vec<StorageWrite> {
        let (done, pending): (Vec<_>, Vec<_>) = self.pending.drain(..).partition(|(at, _)| *at <= tick);
        self.pending = pending;
        for (_, write) in &done {
            match write {
                StorageWrite::Entry(entry) => match misdirect.take() {
                    Some(victim) => self.misdirect(victim, entry),
                    None => {
                        self.journal.push(entry.encode());
                        self.durable.insert((entry.op, entry.checksum));
                    }
                },
                StorageWrite::View(superblock) => {
                    self.superblock = *superblock;
                    if self.misdirected == Misdirected::ReadBack && !superblock.damaged {
                        self.misdirected = Misdirected::No;
                    }
                }
            }
        }
        done.into_iter().map(|(_, write)| write).collect()
    }

    fn misdirect(&mut self, victim: usize, entry: &Entry) {
        let lost = Entry::decode(&self.journal[victim]).ok().map(|lost| (lost.op, lost.checksum));
        self.journal[victim] = entry.encode();
        self.durable.insert((entry.op, entry.checksum));
        // The lost entry may have another frame (a rewrite by repair); then it is still durable.
        if let Some(key) = lost
            && !self.keys().contains(&key)
        {
            self.durable.remove(&key);
        }
        self.misdirected = Misdirected::Unread;
    }

    /// Whether the journal may lack an entry the replica relies on: declared damaged in the
    /// superblock, or a misdirected write destroyed a frame and the replica has not yet named a
    /// log since reading the journal back.
    pub fn damaged(&self) -> bool {
        self.superblock.damaged || self.misdirected != Misdirected::No
    }

    /// The index of the journal frame that holds this exact entry, for scripted faults.
    pub fn frame_of(&self, op: u64, checksum: u128) -> Option<usize> {
        let decoded = |frame: &Vec<u8>| Entry::decode(frame).ok().map(|entry| (entry.op, entry.checksum));
        self.journal.iter().position(|frame| decoded(frame) == Some((op, checksum)))
    }

    /// Whether this exact entry is durable here.
    pub fn holds(&self, op: u64, checksum: u128) -> bool {
        self.durable.contains(&(op, checksum))
    }

    /// The entries of the journal frames that decode.
    pub fn keys(&self) -> Vec<(u64, u128)> {
        let entries = self.journal.iter().filter_map(|frame| Entry::decode(frame).ok());
        entries.map(|entry| (entry.op, entry.checksum)).collect()
    }

    /// Drops the writes in flight; the last journal write may land half-written.
    pub fn crash(&mut self, torn_ppm: u64) -> bool {
        let pending = std::mem::take(&mut self.pending);
        let last = pending.iter().rev().find_map(|(_, write)| match write {
            StorageWrite::Entry(entry) => Some(entry.encode()),
            StorageWrite::View(_) => None,
        });
        if let Some(frame) = last
            && self.prng.chance(torn_ppm)
        {
            let keep = self.prng.range(1, frame.len() as u64 - 1) as usize;
            self.journal.push(frame[..keep].to_vec());
            return true;
        }
        false
    }

    /// Reads everything back for `Replica::open`. A frame for which `may_corrupt` allows it
    /// gets a bit flipped with probability `corrupt_ppm`, and must then fail to decode; the
    /// journal is then declared damaged. Returns how many frames were corrupted.
    pub fn read(&mut self, corrupt_ppm: u64, may_corrupt: impl Fn(u64, u128) -> bool) -> (Durable, usize) {
        if self.misdirected == Misdirected::Unread {
            self.misdirected = Misdirected::ReadBack;
        }
        let mut entries = Vec::new();
        let mut corrupted = 0;
        for frame in &self.journal {
            let Ok(entry) = Entry::decode(frame) else { continue };
            if may_corrupt(entry.op, entry.checksum) && self.prng.chance(corrupt_ppm) {
                let mut flipped = frame.clone();
                let bit = self.prng.below(8 * flipped.len() as u64) as usize;
                flipped[bit / 8] ^= 1 << (bit % 8);
                assert!(Entry::decode(&flipped).is_err(), "a bit flip went unnoticed");
                corrupted += 1;
                continue;
            }
            entries.push(entry);
        }
        // As an adapter does before it cuts a corrupt entry, declare the journal damaged in the
        // superblock, durably: it may lack entries the replica acknowledged, now and at every
        // later restart, until the replica names a log it adopted from a peer.
        if corrupted > 0 {
            self.superblock.damaged = true;
        }
        let durable = Durable { superblock: self.superblock, checkpoint: self.checkpoint.clone(), entries };
        (durable, corrupted)
    }

    /// The superblock as durable now.
    pub fn superblock(&self) -> Superblock {
        self.superblock
    }
}
