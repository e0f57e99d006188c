//! Small files a partition writes whole and makes durable before it relies on them: the
//! shard's incarnation markers (`created_at`, `purged_at`, ...).

use std::io;
use std::path::Path;

use crate::memory_pool::PoolSlice;
use crate::ports::{Storage, StorageFile};

/// Writes `bytes` at the start of `path`, then syncs the file and its directory `dir`: once
/// this returns, the file and its name survive a power loss.
pub async fn write_synced<S: Storage>(storage: &S, dir: &Path, path: &Path, bytes: Vec<u8>) -> io::Result<()> {
    let file = storage.open(path).await?;
    file.write_at(vec![PoolSlice::plain(bytes)], 0).await.0?;
    file.sync().await?;
    storage.sync_dir(dir).await
}
