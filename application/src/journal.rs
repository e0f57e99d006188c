//! The metadata journal, `metadata/journal.wal`: every committed metadata operation as
//! `[checksum u64][len u32][op u64][timestamp u64][operation u8][body]`, fsynced before the
//! client is answered. Replay feeds the same bodies back through the same decoder.
//!
//! A torn last entry (a crash mid-append) is cut; a corrupt entry followed by more data
//! is an error, because skipping it would silently change history.

use std::io;
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::xxh3_64;

use crate::ports::{Storage, StorageFile};

const ENTRY_HEADER_SIZE: usize = 8 + 4 + 8 + 8 + 1;
/// Bounds one entry: a metadata body is a request body, itself bounded by the frame size.
const MAX_ENTRY_BODY: usize = rill_domain::constants::MAX_FRAME_SIZE;

/// One journaled operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntry {
    pub op: u64,
    pub timestamp: u64,
    pub operation: u8,
    pub body: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("metadata journal {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error(
        "metadata journal {path} has a corrupt entry at byte {position} followed by {trailing} more bytes; refusing to skip it"
    )]
    Corrupt { path: PathBuf, position: u64, trailing: u64 },
}

pub struct MetadataJournal<F> {
    file: F,
    len: u64,
    next_op: u64,
}

fn encode(entry: &JournalEntry) -> Vec<u8> {
    let mut out = Vec::with_capacity(ENTRY_HEADER_SIZE + entry.body.len());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&(entry.body.len() as u32).to_le_bytes());
    out.extend_from_slice(&entry.op.to_le_bytes());
    out.extend_from_slice(&entry.timestamp.to_le_bytes());
    out.push(entry.operation);
    out.extend_from_slice(&entry.body);
    let checksum = xxh3_64(&out[8..]);
    out[..8].copy_from_slice(&checksum.to_le_bytes());
    out
}

/// Parses the entry at `position`; `None` when it is incomplete or fails its checksum.
fn decode_at(bytes: &[u8], position: usize) -> Option<(JournalEntry, usize)> {
    let rest = &bytes[position..];
    if rest.len() < ENTRY_HEADER_SIZE {
        return None;
    }
    let body_len = u32::from_le_bytes(rest[8..12].try_into().unwrap()) as usize;
    if body_len > MAX_ENTRY_BODY || rest.len() < ENTRY_HEADER_SIZE + body_len {
        return None;
    }
    let end = ENTRY_HEADER_SIZE + body_len;
    if xxh3_64(&rest[8..end]) != u64::from_le_bytes(rest[..8].try_into().unwrap()) {
        return None;
    }
    let entry = JournalEntry {
        op: u64::from_le_bytes(rest[12..20].try_into().unwrap()),
        timestamp: u64::from_le_bytes(rest[20..28].try_into().unwrap()),
        operation: rest[28],
        body: rest[ENTRY_HEADER_SIZE..end].to_vec(),
    };
    Some((entry, end))
}

impl<F: StorageFile> MetadataJournal<F> {
    /// Opens the journal and returns it with every committed entry, in order.
    pub async fn open<S: Storage<File = F>>(
        storage: &S,
        dir: &Path,
    ) -> Result<(Self, Vec<JournalEntry>), JournalError> {
        let path = dir.join("journal.wal");
        let io_error = |source| JournalError::Io { path: path.clone(), source };
        storage.create_dir_all(dir).await.map_err(io_error)?;
        let file = storage.open(&path).await.map_err(io_error)?;
        let len = file.len().await.map_err(io_error)?;
        let (result, bytes) = file.read_exact_at(vec![0u8; len as usize], 0).await;
        result.map_err(io_error)?;
        let mut entries = Vec::new();
        let mut position = 0usize;
        while position < bytes.len() {
            match decode_at(&bytes, position) {
                Some((entry, consumed)) => {
                    entries.push(entry);
                    position += consumed;
                }
                None => break,
            }
        }
        let torn = bytes.len() - position;
        if torn > 0 && !is_torn_tail(&bytes, position) {
            return Err(JournalError::Corrupt { path, position: position as u64, trailing: torn as u64 });
        }
        if torn > 0 {
            tracing::warn!(path = %path.display(), bytes = torn, "cutting a torn metadata journal tail");
            file.truncate(position as u64).await.map_err(io_error)?;
            file.sync().await.map_err(io_error)?;
        }
        let next_op = entries.last().map_or(1, |e| e.op + 1);
        Ok((Self { file, len: position as u64, next_op }, entries))
    }

    /// Appends and fsyncs one entry; returns its op number.
    pub async fn append(&mut self, timestamp: u64, operation: u8, body: &[u8]) -> io::Result<u64> {
        let op = self.next_op;
        let bytes = encode(&JournalEntry { op, timestamp, operation, body: body.to_vec() });
        let len = bytes.len() as u64;
        let (result, _) = self.file.write_at(vec![bytes], self.len).await;
        result?;
        self.file.sync().await?;
        self.len += len;
        self.next_op += 1;
        Ok(op)
    }

    /// The op number of the last committed entry (0 when none).
    pub fn commit(&self) -> u64 {
        self.next_op - 1
    }
}

/// A failed entry is a torn tail when its declared length reaches to (or past) the end of
/// the file: nothing complete follows it. Anything else is corruption in the middle.
fn is_torn_tail(bytes: &[u8], position: usize) -> bool {
    let rest = &bytes[position..];
    if rest.len() < ENTRY_HEADER_SIZE {
        return true;
    }
    let body_len = u32::from_le_bytes(rest[8..12].try_into().unwrap()) as usize;
    ENTRY_HEADER_SIZE + body_len >= rest.len()
}
