//! The replica's durable state in `<data>/metadata/`: `journal.wal` (prepared entries, each
//! a checksummed, hash-chained frame, appended and fsynced), `superblock` (the view the
//! replica promised, the log view and head that name its durable log, a commit lower bound
//! and whether the journal is damaged) and `checkpoint` (the applied state at an
//! op). The last two are replaced atomically (write a temporary file, fsync, rename, fsync
//! the directory). After a checkpoint is durable the journal is rewritten without the
//! entries it covers, so the log stays bounded.
//!
//! Opening reads all three back. A torn last entry (a crash mid-append) is cut. A corrupt
//! entry with more bytes after it is an error on a single node, where nothing could repair
//! it; in a cluster it is reported, the superblock declares the journal damaged (before the
//! cut, so that no later start trusts the shorter journal), the journal is cut there, and the
//! replica learns what follows from its peers instead of offering its own log.

use std::io;
use std::path::{Path, PathBuf};

use rill_domain::checksum::xxh3_64;
use rill_domain::vsr::{Checkpoint, Durable, Entry, EntryError, Superblock};

use crate::memory_pool::PoolSlice;
use crate::ports::{Storage, StorageFile};

const SUPERBLOCK_MAGIC: &[u8; 8] = b"RILLSB02";
/// Magic, view, log view, commit, head op, head checksum, damaged flag, xxh3-64 of the rest.
const SUPERBLOCK_SIZE: usize = 8 + 4 + 4 + 8 + 8 + 16 + 1 + 8;
/// The first format (magic, view, commit, xxh3-64): it named no log, so a start from it
/// treats the journal as damaged and learns the log from its peers.
const SUPERBLOCK_V1_MAGIC: &[u8; 8] = b"RILLSB01";
const SUPERBLOCK_V1_SIZE: usize = 8 + 4 + 8 + 8;

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("metadata journal {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error(
        "metadata journal {path} has a corrupt entry at byte {position} followed by {trailing} more bytes; \
         refusing to skip it (on a single node nothing can repair it: restore the data directory from a backup)"
    )]
    Corrupt { path: PathBuf, position: u64, trailing: u64 },
    #[error("{path} is damaged ({reason}); refusing to start from a guess")]
    Damaged { path: PathBuf, reason: String },
}

/// The open journal of one replica.
pub struct VsrJournal<S: Storage> {
    dir: PathBuf,
    file: S::File,
    len: u64,
}

fn encode_superblock(superblock: &Superblock) -> Vec<u8> {
    let mut out = Vec::with_capacity(SUPERBLOCK_SIZE);
    out.extend_from_slice(SUPERBLOCK_MAGIC);
    out.extend_from_slice(&superblock.view.to_le_bytes());
    out.extend_from_slice(&superblock.log_view.to_le_bytes());
    out.extend_from_slice(&superblock.commit.to_le_bytes());
    out.extend_from_slice(&superblock.head_op.to_le_bytes());
    out.extend_from_slice(&superblock.head_checksum.to_le_bytes());
    out.push(u8::from(superblock.damaged));
    let checksum = xxh3_64(&out);
    out.extend_from_slice(&checksum.to_le_bytes());
    out
}

fn decode_superblock(bytes: &[u8]) -> Option<Superblock> {
    let (magic, body) = (bytes.get(..8)?, bytes.len().checked_sub(8)?);
    let checksum = u64::from_le_bytes(bytes[body..].try_into().ok()?);
    if xxh3_64(&bytes[..body]) != checksum {
        return None;
    }
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default());
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or_default());
    match (magic, bytes.len()) {
        (m, SUPERBLOCK_SIZE) if m == SUPERBLOCK_MAGIC && bytes[48] <= 1 => Some(Superblock {
            view: u32_at(8),
            log_view: u32_at(12),
            commit: u64_at(16),
            head_op: u64_at(24),
            head_checksum: u128::from_le_bytes(bytes[32..48].try_into().unwrap_or_default()),
            damaged: bytes[48] == 1,
        }),
        (m, SUPERBLOCK_V1_SIZE) if m == SUPERBLOCK_V1_MAGIC => {
            Some(Superblock { view: u32_at(8), commit: u64_at(12), damaged: true, ..Superblock::default() })
        }
        _ => None,
    }
}

/// The entries of a journal image, and where the last intact one ends.
struct Scan {
    entries: Vec<Entry>,
    intact_len: usize,
    /// A corrupt entry with bytes after it: `(position, trailing bytes)`.
    corrupt: Option<(usize, usize)>,
}

fn scan(bytes: &[u8]) -> Scan {
    let mut entries = Vec::new();
    let mut position = 0;
    while position < bytes.len() {
        match Entry::decode_prefix(&bytes[position..]) {
            Ok((entry, consumed)) => {
                entries.push(entry);
                position += consumed;
            }
            // The frame claims more bytes than the file has: a torn append.
            Err(EntryError::Truncated) => break,
            Err(_) => {
                let frame_len = bytes
                    .get(position..position + 4)
                    .map_or(usize::MAX, |b| 4 + u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
                // The last frame reaching exactly to the end is a torn append too (its length
                // landed, its bytes did not); anything followed by more data is corruption.
                if position.saturating_add(frame_len) < bytes.len() {
                    return Scan { entries, intact_len: position, corrupt: Some((position, bytes.len() - position)) };
                }
                break;
            }
        }
    }
    Scan { entries, intact_len: position, corrupt: None }
}

async fn read_all<S: Storage>(storage: &S, path: &Path) -> io::Result<Option<Vec<u8>>> {
    if !storage.exists(path).await {
        return Ok(None);
    }
    let file = storage.open(path).await?;
    let len = file.len().await?;
    let (result, bytes) = file.read_exact_at(PoolSlice::plain(vec![0u8; len as usize]), 0).await;
    result.map(|()| Some(bytes.into_inner().to_vec()))
}

/// Replaces `name` in `dir` with `bytes` so that a crash leaves the old or the new file.
async fn replace_file<S: Storage>(storage: &S, dir: &Path, name: &str, bytes: Vec<u8>) -> io::Result<()> {
    let temporary = dir.join(format!("{name}.tmp"));
    if storage.exists(&temporary).await {
        storage.remove_file(&temporary).await?;
    }
    let file = storage.open(&temporary).await?;
    let (result, _) = file.write_at(vec![PoolSlice::plain(bytes)], 0).await;
    result?;
    file.sync().await?;
    drop(file);
    storage.rename(&temporary, &dir.join(name)).await?;
    storage.sync_dir(dir).await
}

impl<S: Storage> VsrJournal<S> {
    /// Opens (or creates) the replica's files and returns what they hold.
    pub async fn open(storage: &S, dir: &Path, clustered: bool) -> Result<(Self, Durable), JournalError> {
        let io_error = |path: &Path| {
            let path = path.to_path_buf();
            move |source| JournalError::Io { path, source }
        };
        storage.create_dir_all(dir).await.map_err(io_error(dir))?;
        let superblock_path = dir.join("superblock");
        let mut superblock = match read_all(storage, &superblock_path).await.map_err(io_error(&superblock_path))? {
            None => Superblock::default(),
            Some(bytes) => decode_superblock(&bytes).ok_or_else(|| JournalError::Damaged {
                path: superblock_path.clone(),
                reason: "bad magic, size or checksum".into(),
            })?,
        };
        let checkpoint_path = dir.join("checkpoint");
        let checkpoint = match read_all(storage, &checkpoint_path).await.map_err(io_error(&checkpoint_path))? {
            None => None,
            Some(bytes) => Some(Checkpoint::decode(&bytes).map_err(|error| JournalError::Damaged {
                path: checkpoint_path.clone(),
                reason: format!("{error:?}"),
            })?),
        };
        let path = dir.join("journal.wal");
        let file = storage.open(&path).await.map_err(io_error(&path))?;
        let len = file.len().await.map_err(io_error(&path))?;
        let (result, bytes) = file.read_exact_at(PoolSlice::plain(vec![0u8; len as usize]), 0).await;
        result.map_err(io_error(&path))?;
        let scan = scan(&bytes);
        if let Some((position, trailing)) = scan.corrupt {
            let error =
                JournalError::Corrupt { path: path.clone(), position: position as u64, trailing: trailing as u64 };
            if !clustered {
                return Err(error);
            }
            tracing::error!(%error, "cutting the journal at the corrupt entry; peers supply what follows");
            // Before the cut: once it is done, nothing else would tell a later start that the
            // journal may lack entries this replica acknowledged.
            if !superblock.damaged {
                superblock.damaged = true;
                let bytes = encode_superblock(&superblock);
                replace_file(storage, dir, "superblock", bytes).await.map_err(io_error(&superblock_path))?;
            }
        }
        if scan.intact_len < bytes.len() {
            let cut = bytes.len() - scan.intact_len;
            tracing::warn!(path = %path.display(), bytes = cut, "cutting a torn metadata journal tail");
            file.truncate(scan.intact_len as u64).await.map_err(io_error(&path))?;
            file.sync().await.map_err(io_error(&path))?;
        }
        let journal = Self { dir: dir.to_path_buf(), file, len: scan.intact_len as u64 };
        Ok((journal, Durable { superblock, checkpoint, entries: scan.entries }))
    }

    /// Appends one prepared entry and fsyncs it.
    pub async fn append(&mut self, entry: &Entry) -> io::Result<()> {
        let bytes = entry.encode();
        let len = bytes.len() as u64;
        let (result, _) = self.file.write_at(vec![PoolSlice::plain(bytes)], self.len).await;
        result?;
        self.file.sync().await?;
        self.len += len;
        Ok(())
    }

    pub async fn write_superblock(&self, storage: &S, superblock: &Superblock) -> io::Result<()> {
        replace_file(storage, &self.dir, "superblock", encode_superblock(superblock)).await
    }

    /// Makes the checkpoint durable, then rewrites the journal without the entries it
    /// covers. A crash in between leaves extra entries, which opening skips.
    pub async fn write_checkpoint(&mut self, storage: &S, checkpoint: &Checkpoint) -> io::Result<()> {
        replace_file(storage, &self.dir, "checkpoint", checkpoint.encode()).await?;
        let (result, bytes) = self.file.read_exact_at(PoolSlice::plain(vec![0u8; self.len as usize]), 0).await;
        result?;
        let mut kept = Vec::new();
        for entry in scan(&bytes).entries.iter().filter(|entry| entry.op > checkpoint.op) {
            kept.extend_from_slice(&entry.encode());
        }
        let kept_len = kept.len() as u64;
        replace_file(storage, &self.dir, "journal.wal", kept).await?;
        self.file = storage.open(&self.dir.join("journal.wal")).await?;
        self.len = kept_len;
        Ok(())
    }

    /// Bytes in `journal.wal` (bounded by the checkpoint interval).
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(op: u64, parent: u128) -> Entry {
        Entry {
            op,
            view: 0,
            timestamp: op,
            client_id: 1,
            request_number: op,
            operation: 128,
            parent,
            body: vec![op as u8; 10],
            checksum: 0,
        }
        .seal()
    }

    fn image(count: u64) -> Vec<u8> {
        let mut parent = rill_domain::vsr::ROOT_CHECKSUM;
        let mut out = Vec::new();
        for op in 1..=count {
            let entry = entry(op, parent);
            parent = entry.checksum;
            out.extend_from_slice(&entry.encode());
        }
        out
    }

    #[test]
    fn a_torn_tail_is_cut_and_corruption_in_the_middle_is_reported() {
        let bytes = image(3);
        let whole = scan(&bytes);
        assert_eq!((whole.entries.len(), whole.intact_len, whole.corrupt), (3, bytes.len(), None));
        let torn = scan(&bytes[..bytes.len() - 5]);
        assert_eq!(torn.entries.len(), 2);
        assert!(torn.corrupt.is_none(), "a short last frame is a torn append");
        let mut flipped_last = bytes.clone();
        let last = bytes.len() - 3;
        flipped_last[last] ^= 1;
        assert!(scan(&flipped_last).corrupt.is_none(), "a damaged last frame is a torn append");
        let mut flipped_middle = bytes.clone();
        flipped_middle[30] ^= 1;
        let middle = scan(&flipped_middle);
        assert_eq!(middle.entries.len(), 0);
        assert_eq!(middle.corrupt.map(|(position, _)| position), Some(0));
    }

    #[test]
    fn superblocks_round_trip_and_damage_is_detected() {
        let superblock =
            Superblock { view: 7, log_view: 6, commit: 42, head_op: 40, head_checksum: u128::MAX - 3, damaged: true };
        let bytes = encode_superblock(&superblock);
        assert_eq!(bytes.len(), SUPERBLOCK_SIZE);
        assert_eq!(decode_superblock(&bytes), Some(superblock));
        for position in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[position] ^= 0x10;
            assert_eq!(decode_superblock(&damaged), None, "byte {position}");
        }
        // The first format named no log: its journal is not trusted in a cluster.
        let mut v1 = SUPERBLOCK_V1_MAGIC.to_vec();
        v1.extend_from_slice(&7u32.to_le_bytes());
        v1.extend_from_slice(&42u64.to_le_bytes());
        v1.extend_from_slice(&xxh3_64(&v1).to_le_bytes());
        let expected = Superblock { view: 7, commit: 42, damaged: true, ..Superblock::default() };
        assert_eq!(decode_superblock(&v1), Some(expected));
    }
}
