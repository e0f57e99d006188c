//! The small files in a partition's directory that say which incarnation of its ids the
//! files hold: its creation (`created_at`), the purge or group reset that last emptied it
//! (`reset_incarnation`), and a purge a replicated copy has not been emptied into yet
//! (`purged_at`). A metadata operation committed again after a restart (a clustered node's
//! recovery, a group's journal) reads them so it never undoes what came after it.

use std::path::Path;

use crate::memory_pool::PoolSlice;
use crate::ports::{Storage, StorageFile};

/// The file in a partition's directory that names the incarnation it holds.
pub const CREATED_AT_MARKER: &str = "created_at";
/// The file naming the incarnation a purge (or a partition group's reset) started it in,
/// when that is newer than its creation: a purge or reset committed again after a restart
/// (a clustered node's metadata recovery, a group's journal) must not empty it again.
pub const RESET_MARKER: &str = "reset_incarnation";
/// The file naming the newest purge this node's metadata applied to a replicated partition:
/// until its group's reset empties this copy, the copy lags and must serve nothing, a
/// restart in between included.
pub const PURGED_MARKER: &str = "purged_at";

/// Whether a partition directory at or under `dir` (a stream's, a topic's or a partition's
/// directory) was created after `timestamp`. A clustered node's metadata recovery commits
/// again the ops since its last checkpoint, and a deletion replayed so must not remove the
/// files of a partition created since with the same ids.
pub async fn created_after<S: Storage>(storage: &S, dir: &Path, timestamp: u64) -> bool {
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        if let Some(created_at) = read_marker(storage, &dir.join(CREATED_AT_MARKER)).await {
            if created_at > timestamp {
                return true;
            }
            continue;
        }
        for level in ["topics", "partitions"] {
            let below = dir.join(level);
            for name in storage.list_dir(&below).await.unwrap_or_default() {
                pending.push(below.join(name));
            }
        }
    }
    false
}

/// The incarnation a marker file names, if it exists and reads.
pub async fn read_marker<S: Storage>(storage: &S, path: &Path) -> Option<u64> {
    if !storage.exists(path).await {
        return None;
    }
    let file = storage.open(path).await.ok()?;
    let (result, bytes) = file.read_exact_at(PoolSlice::plain(vec![0; 8]), 0).await;
    result.ok()?;
    Some(u64::from_le_bytes(bytes[..8].try_into().ok()?))
}

/// Records an incarnation durably, before any batch of it is acknowledged.
pub async fn write_marker<S: Storage>(storage: &S, dir: &Path, path: &Path, incarnation: u64) -> std::io::Result<()> {
    crate::partition::markers::write_synced(storage, dir, path, incarnation.to_le_bytes().to_vec()).await
}

/// What a partition's markers say: its creation, the incarnation a purge or reset last
/// started it in, and the newest purge its node's metadata applied (0 where none is).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Incarnations {
    pub created_at: u64,
    pub reset: u64,
    pub purged: u64,
}

/// Reads a partition directory's markers.
pub async fn read_incarnations<S: Storage>(storage: &S, dir: &Path) -> Incarnations {
    Incarnations {
        created_at: read_marker(storage, &dir.join(CREATED_AT_MARKER)).await.unwrap_or(0),
        reset: read_marker(storage, &dir.join(RESET_MARKER)).await.unwrap_or(0),
        purged: read_marker(storage, &dir.join(PURGED_MARKER)).await.unwrap_or(0),
    }
}
