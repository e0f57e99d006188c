//! Stored consumer and consumer-group offsets of one partition, one small file each:
//! `offsets/consumers/<id>` and `offsets/groups/<id>`, holding `[offset u64][XXH3-64 of it]`.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

use rill_domain::checksum::xxh3_64;

use crate::memory_pool::PoolSlice;
use crate::ports::{Storage, StorageFile};

/// Whose offset: a single consumer or a consumer group, by numeric id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConsumerKey {
    Consumer(u32),
    Group(u32),
}

/// How a file name's id becomes a key.
type MakeKey = fn(u32) -> ConsumerKey;

/// The directory under `offsets/` that holds each kind of key, and its keys.
const KINDS: [(&str, MakeKey); 2] = [("consumers", ConsumerKey::Consumer), ("groups", ConsumerKey::Group)];

impl ConsumerKey {
    fn relative_path(self) -> PathBuf {
        let (kind, id) = match self {
            Self::Consumer(id) => (KINDS[0].0, id),
            Self::Group(id) => (KINDS[1].0, id),
        };
        Path::new(kind).join(id.to_string())
    }
}

pub struct ConsumerOffsets<F> {
    dir: PathBuf,
    stored: BTreeMap<ConsumerKey, u64>,
    files: BTreeMap<ConsumerKey, F>,
    /// Files written since their last successful fsync (a store without fsync, or one
    /// whose fsync failed): a restart reads what they hold, so a shutdown syncs them.
    unsynced: BTreeSet<ConsumerKey>,
}

fn encode(offset: u64) -> Vec<u8> {
    let mut out = offset.to_le_bytes().to_vec();
    out.extend_from_slice(&xxh3_64(&offset.to_le_bytes()).to_le_bytes());
    out
}

impl<F: StorageFile> ConsumerOffsets<F> {
    /// Loads every stored offset; a file whose checksum fails is reported and skipped.
    pub async fn load<S: Storage<File = F>>(storage: &S, partition_dir: &Path) -> io::Result<Self> {
        let dir = partition_dir.join("offsets");
        let mut offsets =
            Self { dir: dir.clone(), stored: BTreeMap::new(), files: BTreeMap::new(), unsynced: BTreeSet::new() };
        for (kind, make) in KINDS {
            storage.create_dir_all(&dir.join(kind)).await?;
            for name in storage.list_dir(&dir.join(kind)).await? {
                let Ok(id) = name.parse::<u32>() else { continue };
                let file = storage.open(&dir.join(kind).join(&name)).await?;
                if file.len().await? < 16 {
                    continue;
                }
                let (result, buf) = file.read_exact_at(PoolSlice::plain(vec![0u8; 16]), 0).await;
                result?;
                let offset = u64::from_le_bytes(buf[..8].try_into().unwrap());
                if xxh3_64(&buf[..8]) != u64::from_le_bytes(buf[8..].try_into().unwrap()) {
                    tracing::warn!(path = %dir.join(kind).join(&name).display(), "stored offset fails its checksum; ignored");
                    continue;
                }
                offsets.stored.insert(make(id), offset);
                offsets.files.insert(make(id), file);
            }
        }
        Ok(offsets)
    }

    /// Every stored offset, consumers then groups, by id.
    pub fn all(&self) -> Vec<(ConsumerKey, u64)> {
        self.stored.iter().map(|(key, offset)| (*key, *offset)).collect()
    }

    pub fn get(&self, key: ConsumerKey) -> Option<u64> {
        self.stored.get(&key).copied()
    }

    pub async fn store<S: Storage<File = F>>(
        &mut self,
        storage: &S,
        key: ConsumerKey,
        offset: u64,
        fsync: bool,
    ) -> io::Result<()> {
        if !self.files.contains_key(&key) {
            let file = storage.open(&self.dir.join(key.relative_path())).await?;
            self.files.insert(key, file);
        }
        let file = &self.files[&key];
        self.unsynced.insert(key);
        let (result, _) = file.write_at(vec![PoolSlice::plain(encode(offset))], 0).await;
        result?;
        if fsync {
            file.sync().await?;
            self.unsynced.remove(&key);
        }
        self.stored.insert(key, offset);
        Ok(())
    }

    /// Fsyncs every file written since its last fsync, so that what a restart reads is
    /// also what a later power loss keeps: a value the server reports once never goes
    /// back. Used at shutdown.
    pub async fn sync(&mut self) -> io::Result<()> {
        let keys: Vec<ConsumerKey> = self.unsynced.iter().copied().collect();
        for key in keys {
            if let Some(file) = self.files.get(&key) {
                file.sync().await?;
            }
            self.unsynced.remove(&key);
        }
        Ok(())
    }

    /// Makes every store and deletion so far durable: each file written since its last
    /// fsync, and the directories naming the files created or removed. A partition group's
    /// checkpoint needs it: below the checkpoint these files are the only copy.
    pub async fn sync_durably<S: Storage<File = F>>(&mut self, storage: &S) -> io::Result<()> {
        self.sync().await?;
        for (kind, _) in KINDS {
            let dir = self.dir.join(kind);
            if storage.exists(&dir).await {
                storage.sync_dir(&dir).await?;
            }
        }
        Ok(())
    }

    /// Removes a stored offset; `false` when there was none.
    pub async fn delete<S: Storage<File = F>>(&mut self, storage: &S, key: ConsumerKey) -> io::Result<bool> {
        if self.stored.remove(&key).is_none() {
            return Ok(false);
        }
        self.files.remove(&key);
        self.unsynced.remove(&key);
        storage.remove_file(&self.dir.join(key.relative_path())).await?;
        Ok(true)
    }

    pub async fn clear<S: Storage<File = F>>(&mut self, storage: &S) -> io::Result<()> {
        let keys: Vec<ConsumerKey> = self.stored.keys().copied().collect();
        for key in keys {
            self.delete(storage, key).await?;
        }
        Ok(())
    }
}
