//! The replica's in-memory log. The *run* is a contiguous, hash-chained sequence of entries that
//! ends at the head `(op, op_checksum)`; below it may lie a *hole* down to the applied prefix,
//! which repair or state transfer fills. Beside the run sit the *stash* (unverified candidates:
//! entries read back from disk, superseded or early repairs) and *future* prepares of the current
//! view that arrived ahead of a gap. An entry only joins the run when its checksum is the one the
//! chain above it (or the primary) vouches for, so the run is canonical by construction.

use std::collections::{BTreeMap, VecDeque};

use super::entry::Entry;
use super::message::LogSuffix;

/// How far a slot is on its way to disk; ordered so that "more durable" compares greater.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Durability {
    /// Not yet handed to the caller as a `Persist` effect.
    Pending,
    /// `Persist` emitted, completion not yet reported.
    Writing,
    /// `on_prepare_persisted` reported it.
    Durable,
}

#[derive(Debug, Clone)]
pub(super) struct Slot {
    pub(super) entry: Entry,
    pub(super) durability: Durability,
}

impl Slot {
    fn pending(entry: Entry) -> Self {
        Self { entry, durability: Durability::Pending }
    }
}

#[derive(Debug)]
pub(super) struct Log {
    run: VecDeque<Slot>,
    op: u64,
    op_checksum: u128,
    stash: BTreeMap<(u64, u128), Slot>,
    future: BTreeMap<u64, Entry>,
    capacity: usize,
    future_max: usize,
}

impl Log {
    pub(super) fn new(op: u64, op_checksum: u128, capacity: usize, future_max: usize) -> Self {
        Self {
            run: VecDeque::new(),
            op,
            op_checksum,
            stash: BTreeMap::new(),
            future: BTreeMap::new(),
            capacity,
            future_max,
        }
    }

    pub(super) fn op(&self) -> u64 {
        self.op
    }

    pub(super) fn op_checksum(&self) -> u128 {
        self.op_checksum
    }

    /// The first op of the run (`op + 1` when the run is empty).
    pub(super) fn start(&self) -> u64 {
        self.op + 1 - self.run.len() as u64
    }

    pub(super) fn has_room(&self) -> bool {
        self.run.len() < self.capacity
    }

    pub(super) fn entry(&self, op: u64) -> Option<&Entry> {
        let start = self.start();
        (op >= start && op <= self.op).then(|| &self.run[(op - start) as usize].entry)
    }

    pub(super) fn head(&self) -> Option<&Entry> {
        self.run.back().map(|slot| &slot.entry)
    }

    /// Run entries from `op_min` up, at most `count` of them.
    pub(super) fn entries_from(&self, op_min: u64, count: usize) -> Vec<Entry> {
        let skip = op_min.saturating_sub(self.start()) as usize;
        self.run.iter().skip(skip).take(count).map(|slot| slot.entry.clone()).collect()
    }

    /// The entry with exactly this op and checksum, from the run or the stash.
    pub(super) fn get(&self, op: u64, checksum: u128) -> Option<&Entry> {
        match self.entry(op) {
            Some(entry) if entry.checksum == checksum => Some(entry),
            _ => self.stash.get(&(op, checksum)).map(|slot| &slot.entry),
        }
    }

    /// The entry `(op, checksum)` followed by as many of its ancestors as this log holds.
    pub(super) fn chain_below(&self, op: u64, checksum: u128, count: usize) -> Vec<Entry> {
        let mut chain = Vec::new();
        let mut want = (op, checksum);
        while chain.len() < count {
            let Some(entry) = self.get(want.0, want.1) else { break };
            chain.push(entry.clone());
            if entry.op <= 1 {
                break;
            }
            want = (entry.op - 1, entry.parent);
        }
        chain
    }

    /// Whether an uncommitted entry of this client is in the run above `commit_min`.
    pub(super) fn in_flight(&self, client_id: u128, commit_min: u64) -> bool {
        self.run.iter().any(|slot| slot.entry.op > commit_min && slot.entry.client_id == client_id)
    }

    /// Extends the head by one entry; false (nothing changed) when the run is full or the
    /// entry does not extend the chain.
    pub(super) fn append(&mut self, entry: Entry) -> bool {
        if entry.op != self.op + 1 || entry.parent != self.op_checksum || !self.has_room() {
            return false;
        }
        self.op = entry.op;
        self.op_checksum = entry.checksum;
        let slot = self.take_stashed(entry);
        self.run.push_back(slot);
        true
    }

    /// The entry below the run that the chain vouches for, while it lies above `commit_min`.
    pub(super) fn hole_target(&self, commit_min: u64) -> Option<(u64, u128)> {
        let start = self.start();
        if start <= commit_min + 1 {
            return None;
        }
        Some((start - 1, self.run.front().map_or(self.op_checksum, |slot| slot.entry.parent)))
    }

    /// The entry just below the lowest future prepare, while a gap separates it from the head.
    pub(super) fn future_target(&self) -> Option<(u64, u128)> {
        let (&op, entry) = self.future.first_key_value()?;
        (op > self.op + 1).then_some((op - 1, entry.parent))
    }

    /// Keeps a prepare of the current view that arrived ahead of the head. When full, the
    /// highest prepare gives way to a lower one: the lower ones are the next to join the run.
    pub(super) fn insert_future(&mut self, entry: Entry) {
        if entry.op <= self.op || entry.op > self.op + self.capacity as u64 {
            return;
        }
        if self.future.len() >= self.future_max && !self.future.contains_key(&entry.op) {
            match self.future.last_key_value() {
                Some((&highest, _)) if highest > entry.op => self.future.pop_last(),
                _ => return,
            };
        }
        self.future.insert(entry.op, entry);
    }

    pub(super) fn clear_future(&mut self) {
        self.future.clear();
    }

    /// Places an entry that arrived by repair or state transfer: into the hole or the future
    /// gap when the chain vouches for it, otherwise into the stash as a candidate.
    pub(super) fn offer(&mut self, entry: Entry, commit_min: u64) {
        if entry.op <= commit_min {
            return;
        }
        let key = Some((entry.op, entry.checksum));
        if self.hole_target(commit_min) == key && self.has_room() {
            let slot = self.take_stashed(entry);
            self.run.push_front(slot);
        } else if self.future_target() == key {
            self.insert_future(entry);
        } else {
            self.stash(Slot::pending(entry));
        }
    }

    /// Moves into the run whatever now fits: stashed entries that fill the hole, stashed entries
    /// that close the future gap, and future prepares that extend the head.
    pub(super) fn settle(&mut self, commit_min: u64) {
        loop {
            if let Some(key) = self.hole_target(commit_min)
                && self.has_room()
                && let Some(slot) = self.stash.remove(&key)
            {
                self.run.push_front(slot);
                continue;
            }
            if let Some(key) = self.future_target()
                && let Some(slot) = self.stash.get(&key)
            {
                self.insert_future(slot.entry.clone());
                continue;
            }
            if let Some(entry) = self.future.remove(&(self.op + 1))
                && entry.parent == self.op_checksum
                && self.append(entry)
            {
                continue;
            }
            break;
        }
        let head = self.op;
        self.future.retain(|&op, _| op > head);
    }

    /// Rebuilds the run below a canonical head `(op, checksum)`: walking down, each op takes the
    /// copy whose checksum the entry above names, from the run, the stash or `entries`, until a
    /// copy is missing (a hole) or the walk meets the applied prefix `anchor`. Returns false and
    /// changes nothing if the chain contradicts the applied prefix.
    pub(super) fn adopt(&mut self, anchor: (u64, u128), head: (u64, u128), entries: &[Entry]) -> bool {
        let (commit_min, commit_checksum) = anchor;
        if head.0 < commit_min || (head.0 == commit_min && head.1 != commit_checksum) {
            return false;
        }
        let mut chain = Vec::new();
        let mut want = head;
        while want.0 > commit_min && chain.len() < self.capacity {
            let Some(slot) = self.candidate(want, entries) else { break };
            want = (want.0 - 1, slot.entry.parent);
            chain.push(slot);
        }
        if want.0 == commit_min && want.1 != commit_checksum {
            return false;
        }
        // The old run becomes candidates, so no durable copy is forgotten.
        for slot in std::mem::take(&mut self.run) {
            self.stash(slot);
        }
        for slot in &chain {
            self.stash.remove(&(slot.entry.op, slot.entry.checksum));
        }
        chain.reverse();
        self.run = chain.into();
        (self.op, self.op_checksum) = head;
        self.future.clear();
        true
    }

    fn candidate(&self, (op, checksum): (u64, u128), entries: &[Entry]) -> Option<Slot> {
        let start = self.start();
        if op >= start && op <= self.op && self.run[(op - start) as usize].entry.checksum == checksum {
            return Some(self.run[(op - start) as usize].clone());
        }
        if let Some(slot) = self.stash.get(&(op, checksum)) {
            return Some(slot.clone());
        }
        let first = entries.first()?.op;
        let entry = entries.get(op.checked_sub(first)? as usize)?;
        (entry.checksum == checksum).then(|| Slot::pending(entry.clone()))
    }

    /// Whether a committed checkpoint at `(op, checksum)` agrees with the run.
    pub(super) fn can_rebase(&self, op: u64, checksum: u128) -> bool {
        if self.op <= op {
            return self.op < op || self.op_checksum == checksum;
        }
        match (self.entry(op), self.entry(op + 1)) {
            (Some(entry), _) => entry.checksum == checksum,
            (None, Some(next)) => next.parent == checksum,
            (None, None) => true,
        }
    }

    /// Continues the log from an installed checkpoint: a head below it moves up to it.
    pub(super) fn rebase(&mut self, op: u64, checksum: u128) {
        if self.op < op {
            self.run.clear();
            (self.op, self.op_checksum) = (op, checksum);
        }
        self.trim(op);
        self.future.retain(|&future_op, _| future_op > op);
    }

    /// Drops entries at or below `op` (all applied and covered by a checkpoint).
    pub(super) fn trim(&mut self, op: u64) {
        while self.run.front().is_some_and(|slot| slot.entry.op <= op) {
            self.run.pop_front();
        }
        self.stash = self.stash.split_off(&(op + 1, 0));
    }

    /// Keeps a candidate entry: a copy already held wins unless the new one is more durable.
    pub(super) fn stash(&mut self, slot: Slot) {
        let key = (slot.entry.op, slot.entry.checksum);
        if self.entry(key.0).is_some_and(|entry| entry.checksum == key.1) {
            return;
        }
        if self.stash.get(&key).is_some_and(|held| held.durability >= slot.durability) {
            return;
        }
        if !self.stash.contains_key(&key) && self.stash.len() >= self.capacity {
            self.stash.pop_first();
        }
        self.stash.insert(key, slot);
    }

    /// A run slot for `entry`, keeping the durability of a stashed copy of it.
    fn take_stashed(&mut self, entry: Entry) -> Slot {
        self.stash.remove(&(entry.op, entry.checksum)).unwrap_or(Slot::pending(entry))
    }

    /// Marks every pending run slot as being written and returns the entries to persist.
    pub(super) fn take_unwritten(&mut self) -> Vec<Entry> {
        let mut unwritten = Vec::new();
        for slot in self.run.iter_mut().filter(|slot| slot.durability == Durability::Pending) {
            slot.durability = Durability::Writing;
            unwritten.push(slot.entry.clone());
        }
        unwritten
    }

    /// Records a finished journal write; true if the entry is in the run.
    pub(super) fn mark_durable(&mut self, op: u64, checksum: u128) -> bool {
        let start = self.start();
        if op >= start && op <= self.op {
            let slot = &mut self.run[(op - start) as usize];
            if slot.entry.checksum == checksum {
                slot.durability = Durability::Durable;
                return true;
            }
        }
        if let Some(slot) = self.stash.get_mut(&(op, checksum)) {
            slot.durability = Durability::Durable;
        }
        false
    }

    /// The highest op such that every run slot up to it is durable, applied ones included (`None`
    /// while a hole separates the run from the applied prefix). Counting from the start of the
    /// run, not from `commit_min`, is what lets a restart rebuild, from the journal alone, the
    /// whole log below any op this replica acknowledged.
    pub(super) fn durable_prefix(&self, commit_min: u64) -> Option<u64> {
        let start = self.start();
        if start > commit_min + 1 {
            return None;
        }
        let durable = self.run.iter().take_while(|slot| slot.durability == Durability::Durable);
        Some(durable.last().map_or(start - 1, |slot| slot.entry.op))
    }

    /// The highest op this replica may vouch for: its durable prefix, or `commit_min` (nothing
    /// new) while the run has a hole.
    pub(super) fn durable_through(&self, commit_min: u64) -> u64 {
        self.durable_prefix(commit_min).unwrap_or(commit_min)
    }

    pub(super) fn suffix(&self, commit: u64) -> LogSuffix {
        let entries = self.run.iter().map(|slot| slot.entry.clone()).collect();
        LogSuffix { op: self.op, op_checksum: self.op_checksum, commit, entries }
    }

    /// The log's structural invariants, relative to the applied prefix: the first that does
    /// not hold.
    pub(super) fn check(&self, commit_min: u64, commit_checksum: u128) -> Result<(), &'static str> {
        ensure(self.op >= commit_min, "head below the applied prefix")?;
        ensure(self.run.len() <= self.capacity && self.stash.len() <= self.capacity, "log over its capacity")?;
        ensure(self.future.len() <= self.future_max, "more future prepares than kept")?;
        for pair in self.run.iter().zip(self.run.iter().skip(1)) {
            ensure(pair.1.entry.op == pair.0.entry.op + 1, "run not contiguous")?;
            ensure(pair.1.entry.parent == pair.0.entry.checksum, "run not hash-chained")?;
        }
        if let Some(back) = self.run.back() {
            ensure(
                back.entry.op == self.op && back.entry.checksum == self.op_checksum,
                "run does not end at the head",
            )?;
        }
        if self.op == commit_min {
            ensure(self.op_checksum == commit_checksum, "head contradicts the applied prefix")?;
        }
        if let Some(entry) = self.entry(commit_min) {
            ensure(entry.checksum == commit_checksum, "run contradicts the applied prefix")?;
        }
        if let Some(entry) = self.entry(commit_min + 1) {
            ensure(entry.parent == commit_checksum, "run does not continue the applied prefix")?;
        }
        ensure(self.future.keys().all(|&op| op > self.op), "future prepare at or below the head")
    }
}

/// `Err(broken)` unless `holds`.
pub(super) fn ensure(holds: bool, broken: &'static str) -> Result<(), &'static str> {
    if holds { Ok(()) } else { Err(broken) }
}
