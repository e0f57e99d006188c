//! In-memory storage with pending (written) and durable (synced) bytes per file, and the
//! blocks reserved past a file's end (counted as used until a truncation).
//! `crash` keeps only durable bytes, optionally with a torn prefix of the unsynced tail,
//! which is what a power loss can leave behind. Faults can be injected: every mutating call
//! from a given one on fails (ENOSPC or EIO) until healed, and a capacity makes writes past
//! it fail the way a full disk does, after writing what fits. Files opened direct pad each
//! append with zeros to the next 4 KiB boundary, as the io_uring adapter's `O_DIRECT`
//! files do on disk, so recovery meets that padding after a crash.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::future::poll_fn;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::task::{Poll, Waker};

use rill_application::memory_pool::PoolSlice;
use rill_application::ports::storage::REUSE_GUARD_BYTES;
use rill_application::ports::{Space, Storage, StorageFile};

use crate::Jitter;

#[derive(Debug, Default, Clone)]
struct FileState {
    written: Vec<u8>,
    durable: Vec<u8>,
    /// What a direct file's open descriptor knows it wrote (`written` may run on with
    /// padding); `None` once it is reopened or the disk crashed.
    logical: Option<u64>,
    /// Where the blocks a reservation took end (they count as used until a truncation).
    reserved_to: u64,
}

impl FileState {
    /// The length a descriptor reports: what a direct one wrote, else the bytes on disk.
    fn length(&self) -> u64 {
        self.logical.unwrap_or(self.written.len() as u64)
    }

    /// The room the file takes: its length, or its reservation's end past it.
    fn footprint(&self) -> u64 {
        self.length().max(self.reserved_to)
    }
}

/// The block a direct file's appends are padded to.
const DIRECT_BLOCK: usize = 4096;

/// Injected failures of mutating calls (writes, syncs, truncations, creations, renames,
/// removals, directory syncs).
#[derive(Debug, Default)]
struct Faults {
    /// Mutating calls made so far, failed ones included.
    calls: u64,
    /// Mutating calls numbered in this range fail with this kind (until healed).
    failing: Option<(std::ops::Range<u64>, io::ErrorKind)>,
    /// Mutating calls on paths at or under this one fail with this kind (until healed): a
    /// part of the disk gone bad while the rest works.
    failing_under: Option<(PathBuf, io::ErrorKind)>,
    /// Mutating calls failed so far.
    failed: u64,
    /// Bytes all files may hold together; a write past it fails with `StorageFull`.
    capacity: Option<u64>,
}

#[derive(Debug, Default)]
struct Disk {
    files: BTreeMap<PathBuf, FileState>,
    dirs: BTreeSet<PathBuf>,
    faults: Faults,
    /// The buffers reads and writes were handed, in order, for tests that prove no copy.
    transfers: Vec<Transfer>,
    /// Pauses before a file's reads, writes, syncs and truncations take effect.
    jitter: Jitter,
    /// While set, writes wait before they take effect (the tasks to wake on release).
    held: Option<Vec<Waker>>,
}

/// One buffer a read or a write was handed: which file, whose buffer (its address) and
/// which range of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    pub path: PathBuf,
    pub write: bool,
    pub buffer: usize,
    pub range: std::ops::Range<usize>,
}

impl Transfer {
    fn of(path: &Path, write: bool, slice: &PoolSlice) -> Self {
        Self { path: path.to_path_buf(), write, buffer: slice.buffer().as_ptr() as usize, range: slice.range() }
    }
}

/// Capacity reported when none is set: a roomy disk.
const UNLIMITED_CAPACITY: u64 = 1 << 40;

impl Disk {
    /// Counts a mutating call on `path` and fails it when a fault covers it.
    fn mutate(&mut self, path: &Path) -> io::Result<()> {
        let call = self.faults.calls;
        self.faults.calls += 1;
        let kind = match (&self.faults.failing, &self.faults.failing_under) {
            (Some((calls, kind)), _) if calls.contains(&call) => *kind,
            (_, Some((dir, kind))) if path.starts_with(dir) => *kind,
            _ => return Ok(()),
        };
        self.faults.failed += 1;
        Err(io::Error::new(kind, format!("injected fault at call {call} ({})", path.display())))
    }

    fn used_bytes(&self) -> u64 {
        self.files.values().map(FileState::footprint).sum()
    }

    /// How many bytes a file may grow by before the capacity is reached.
    fn room(&self) -> u64 {
        self.faults.capacity.map_or(u64::MAX, |capacity| capacity.saturating_sub(self.used_bytes()))
    }
}

#[derive(Debug, Clone, Default)]
pub struct SimStorage {
    disk: Rc<RefCell<Disk>>,
}

#[derive(Debug, Clone)]
pub struct SimFile {
    disk: Rc<RefCell<Disk>>,
    path: PathBuf,
    direct: bool,
    /// A reused file's descriptor: its appends leave `REUSE_GUARD_BYTES` zeros after them.
    guarded: bool,
}

impl SimStorage {
    pub fn new() -> Self {
        Self::default()
    }

    /// An independent copy of the disk's files and directories, as written (faults,
    /// transfers and jitter are not copied): a prepared disk that many runs start from.
    pub fn duplicate(&self) -> Self {
        let disk = self.disk.borrow();
        let copy = Disk { files: disk.files.clone(), dirs: disk.dirs.clone(), ..Disk::default() };
        Self { disk: Rc::new(RefCell::new(copy)) }
    }

    /// Drops every unsynced byte. With `torn_tail_bytes`, each file that had unsynced bytes
    /// past its durable length keeps that many of them, as a torn last write.
    pub fn crash(&self, torn_tail_bytes: usize) {
        let mut disk = self.disk.borrow_mut();
        for state in disk.files.values_mut() {
            let mut survived = state.durable.clone();
            if state.written.len() > survived.len() && state.written.starts_with(&survived) {
                let keep = (state.written.len() - survived.len()).min(torn_tail_bytes);
                survived.extend_from_slice(&state.written[state.durable.len()..state.durable.len() + keep]);
            }
            state.written = survived.clone();
            state.durable = survived;
            state.logical = None;
            // Reserved blocks stay: as on a disk, a crash may keep an allocation whose
            // data it lost.
        }
    }

    /// Flips one bit of a file's bytes, written and durable alike.
    pub fn flip_bit(&self, path: &Path, byte: usize) {
        let mut disk = self.disk.borrow_mut();
        let state = disk.files.get_mut(path).expect("no such file");
        state.written[byte] ^= 1;
        if byte < state.durable.len() {
            state.durable[byte] ^= 1;
        }
    }

    /// Makes every mutating call from the `call`-th (counted from 0 since the storage was
    /// made) fail with `kind`, until `heal`.
    pub fn fail_from(&self, call: u64, kind: io::ErrorKind) {
        self.fail_calls(call..u64::MAX, kind);
    }

    /// Makes the mutating calls numbered in `calls` fail with `kind`: one bad write, say.
    pub fn fail_calls(&self, calls: std::ops::Range<u64>, kind: io::ErrorKind) {
        self.disk.borrow_mut().faults.failing = Some((calls, kind));
    }

    /// Makes every mutating call on a path at or under `dir` fail with `kind`, until `heal`.
    pub fn fail_under(&self, dir: &Path, kind: io::ErrorKind) {
        self.disk.borrow_mut().faults.failing_under = Some((dir.to_path_buf(), kind));
    }

    /// Ends injected failures (the capacity stays).
    pub fn heal(&self) {
        let mut disk = self.disk.borrow_mut();
        disk.faults.failing = None;
        disk.faults.failing_under = None;
    }

    /// Mutating calls an injected fault failed so far.
    pub fn failed_calls(&self) -> u64 {
        self.disk.borrow().faults.failed
    }

    /// Bytes all files may hold together (`None`: no limit).
    pub fn set_capacity(&self, capacity: Option<u64>) {
        self.disk.borrow_mut().faults.capacity = capacity;
    }

    /// Lets file calls pause a seeded while before they take effect, so concurrent
    /// requests interleave at the disk as they would on io_uring.
    pub fn set_jitter(&self, jitter: Jitter) {
        self.disk.borrow_mut().jitter = jitter;
    }

    /// Holds every write from now on before it takes effect, until `release_writes`: a
    /// test's way to keep a write in flight while other requests run.
    pub fn hold_writes(&self) {
        self.disk.borrow_mut().held.get_or_insert_with(Vec::new);
    }

    pub fn release_writes(&self) {
        let held = self.disk.borrow_mut().held.take();
        held.into_iter().flatten().for_each(Waker::wake);
    }

    /// Mutating calls made so far.
    pub fn mutating_calls(&self) -> u64 {
        self.disk.borrow().faults.calls
    }

    pub fn file_len(&self, path: &Path) -> Option<usize> {
        self.disk.borrow().files.get(path).map(|s| s.written.len())
    }

    /// A file's bytes as written (synced or not).
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        self.disk.borrow().files.get(path).map(|s| s.written.clone())
    }

    pub fn paths(&self) -> Vec<PathBuf> {
        self.disk.borrow().files.keys().cloned().collect()
    }

    /// Every buffer reads and writes were handed so far.
    pub fn transfers(&self) -> Vec<Transfer> {
        self.disk.borrow().transfers.clone()
    }
}

impl SimStorage {
    fn open_file(&self, path: &Path, direct: bool) -> io::Result<SimFile> {
        let mut disk = self.disk.borrow_mut();
        match disk.files.get_mut(path) {
            // A new descriptor knows the file's length, padding and all.
            Some(state) => state.logical = None,
            None => {
                disk.mutate(path)?;
                disk.files.insert(path.to_path_buf(), FileState::default());
            }
        }
        drop(disk);
        Ok(SimFile { disk: self.disk.clone(), path: path.to_path_buf(), direct, guarded: false })
    }
}

fn missing(path: &Path) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("{} does not exist", path.display()))
}

impl SimFile {
    async fn pause(&self) {
        let jitter = self.disk.borrow().jitter.clone();
        jitter.pause().await;
    }

    /// Waits while writes are held.
    async fn held(&self) {
        poll_fn(|cx| match &mut self.disk.borrow_mut().held {
            Some(waiting) => {
                waiting.push(cx.waker().clone());
                Poll::Pending
            }
            None => Poll::Ready(()),
        })
        .await;
    }
}

impl StorageFile for SimFile {
    async fn len(&self) -> io::Result<u64> {
        let disk = self.disk.borrow();
        Ok(disk.files.get(&self.path).ok_or_else(|| missing(&self.path))?.length())
    }

    async fn read_exact_at(&self, mut buf: PoolSlice, position: u64) -> (io::Result<()>, PoolSlice) {
        self.pause().await;
        let mut disk = self.disk.borrow_mut();
        disk.transfers.push(Transfer::of(&self.path, false, &buf));
        let Some(state) = disk.files.get(&self.path) else { return (Err(missing(&self.path)), buf) };
        let start = position as usize;
        if start + buf.len() > state.written.len() {
            return (Err(io::ErrorKind::UnexpectedEof.into()), buf);
        }
        let len = buf.len();
        buf.copy_from_slice(&state.written[start..start + len]);
        (Ok(()), buf)
    }

    async fn write_at(&self, bufs: Vec<PoolSlice>, position: u64) -> (io::Result<()>, Vec<PoolSlice>) {
        self.held().await;
        self.pause().await;
        let mut disk = self.disk.borrow_mut();
        let transfers: Vec<Transfer> = bufs.iter().map(|buf| Transfer::of(&self.path, true, buf)).collect();
        disk.transfers.extend(transfers);
        if let Err(error) = disk.mutate(&self.path) {
            return (Err(error), bufs);
        }
        let mut room = disk.room();
        let Some(state) = disk.files.get_mut(&self.path) else { return (Err(missing(&self.path)), bufs) };
        let before = state.length();
        let mut len = before;
        let mut held = state.footprint();
        let mut at = position as usize;
        for buf in &bufs {
            let growth = (at as u64 + buf.len() as u64).saturating_sub(held);
            // A full disk takes what fits, then refuses the rest, as a short write would.
            let fits = if growth > room { buf.len() - (growth - room) as usize } else { buf.len() };
            if state.written.len() < at + fits {
                state.written.resize(at + fits, 0);
            }
            state.written[at..at + fits].copy_from_slice(&buf[..fits]);
            len = len.max((at + fits) as u64);
            held = held.max(len);
            if fits < buf.len() {
                if self.direct {
                    // A failed direct write leaves the descriptor's length as it was.
                    state.logical = Some(before);
                }
                return (Err(io::Error::new(io::ErrorKind::StorageFull, "simulated disk is full")), bufs);
            }
            room -= growth;
            at += buf.len();
        }
        if self.direct {
            state.logical = Some(len);
            // An append rewrites its last block whole, zeros after the data (the block is
            // allocated either way, so the padding takes no room), a reused file's on to
            // its guard.
            if position == before {
                let guard = if self.guarded { REUSE_GUARD_BYTES } else { 0 };
                let padded = (at + guard).div_ceil(DIRECT_BLOCK) * DIRECT_BLOCK;
                if state.written.len() < padded {
                    state.written.resize(padded, 0);
                }
                state.written[at..padded].fill(0);
            }
        }
        (Ok(()), bufs)
    }

    async fn sync(&self) -> io::Result<()> {
        self.pause().await;
        let mut disk = self.disk.borrow_mut();
        disk.mutate(&self.path)?;
        let state = disk.files.get_mut(&self.path).ok_or_else(|| missing(&self.path))?;
        state.durable = state.written.clone();
        Ok(())
    }

    async fn truncate(&self, len: u64) -> io::Result<()> {
        self.pause().await;
        let mut disk = self.disk.borrow_mut();
        disk.mutate(&self.path)?;
        let state = disk.files.get_mut(&self.path).ok_or_else(|| missing(&self.path))?;
        state.written.resize(len as usize, 0);
        state.logical = None;
        state.reserved_to = 0;
        Ok(())
    }

    async fn reserve(&self, position: u64, len: u64) -> io::Result<()> {
        let mut disk = self.disk.borrow_mut();
        disk.mutate(&self.path)?;
        let room = disk.room();
        let state = disk.files.get_mut(&self.path).ok_or_else(|| missing(&self.path))?;
        let end = position + len;
        // All or nothing, which is what matters here: a full disk refuses the reservation.
        if end.saturating_sub(state.footprint()) > room {
            return Err(io::Error::new(io::ErrorKind::StorageFull, "simulated disk is full"));
        }
        state.reserved_to = state.reserved_to.max(end);
        Ok(())
    }
}

impl Storage for SimStorage {
    type File = SimFile;

    async fn open(&self, path: &Path) -> io::Result<SimFile> {
        self.open_file(path, false)
    }

    async fn open_direct(&self, path: &Path) -> io::Result<SimFile> {
        self.open_file(path, true)
    }

    async fn reuse_direct(&self, spare: &Path, path: &Path) -> io::Result<SimFile> {
        self.rename(spare, path).await?;
        let mut file = self.open_file(path, true)?;
        let mut disk = self.disk.borrow_mut();
        let state = disk.files.get_mut(path).ok_or_else(|| missing(path))?;
        // Appends start over the old bytes, which keep their room until a truncation.
        state.logical = Some(0);
        state.reserved_to = state.reserved_to.max(state.written.len() as u64);
        file.guarded = true;
        Ok(file)
    }

    async fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut disk = self.disk.borrow_mut();
        if !disk.dirs.contains(path) {
            disk.mutate(path)?;
            disk.dirs.insert(path.to_path_buf());
        }
        Ok(())
    }

    async fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut disk = self.disk.borrow_mut();
        disk.mutate(path)?;
        disk.files.retain(|p, _| !p.starts_with(path));
        disk.dirs.retain(|p| !p.starts_with(path));
        Ok(())
    }

    async fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut disk = self.disk.borrow_mut();
        disk.mutate(path)?;
        disk.files.remove(path).map(|_| ()).ok_or_else(|| missing(path))
    }

    async fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let disk = self.disk.borrow();
        let children = disk.files.keys().chain(disk.dirs.iter()).filter(|p| p.parent() == Some(path));
        let mut names: Vec<String> = children.filter_map(|p| p.file_name()?.to_str().map(str::to_owned)).collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    async fn exists(&self, path: &Path) -> bool {
        let disk = self.disk.borrow();
        disk.files.contains_key(path) || disk.dirs.contains(path)
    }

    async fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut disk = self.disk.borrow_mut();
        disk.mutate(from)?;
        let state = disk.files.remove(from).ok_or_else(|| missing(from))?;
        disk.files.insert(to.to_path_buf(), state);
        Ok(())
    }

    async fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.disk.borrow_mut().mutate(path)
    }

    async fn space(&self, _path: &Path) -> io::Result<Space> {
        let disk = self.disk.borrow();
        let total = disk.faults.capacity.unwrap_or(UNLIMITED_CAPACITY);
        Ok(Space { total_bytes: total, available_bytes: total.saturating_sub(disk.used_bytes()) })
    }
}
