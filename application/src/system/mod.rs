//! The single-node server state: metadata, partitions, clients and the root account, and
//! the use cases that act on them. One `System` runs on one event loop; it is shared by the
//! loop's connection tasks, and no borrow of its cells is ever held across an await.

mod clients;
mod messages;
mod metadata_ops;
mod queries;

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use rill_domain::Namespace;
use rill_domain::error::ErrorCode;
use rill_domain::metadata::Metadata;
use rill_domain::wire::command::{Command, TopicRef};
use rill_domain::wire::response::{NodePorts, Usage};

pub use clients::{ClientRegistry, Transport};

use crate::credentials::{RootSeed, RootUser};
use crate::journal::{JournalError, MetadataJournal};
use crate::partition::{PartitionLog, PartitionSettings};
use crate::ports::{Clock, Env, Storage};

/// What the server needs to know that is not in its data directory.
#[derive(Debug, Clone)]
pub struct SystemConfig {
    pub data_path: PathBuf,
    pub root: RootSeed,
    /// Address and ports cluster metadata advertises.
    pub advertised_ip: String,
    pub ports: NodePorts,
    pub host: HostInfo,
}

/// Static facts about the host, read once at start by the composition root.
#[derive(Debug, Clone, Default)]
pub struct HostInfo {
    pub hostname: String,
    pub os_name: String,
    pub os_version: String,
    pub kernel_version: String,
    pub total_memory: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error("replaying metadata journal op {op}: {code}")]
    Replay { op: u64, code: ErrorCode },
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
}

fn io_context(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> StartError {
    let context = context.into();
    move |source| StartError::Io { context, source }
}

/// One partition: its log behind an async lock (appends, flushes and reads of one partition
/// are serialised) and counters readable without taking the lock.
pub struct Partition<S: Storage> {
    pub log: async_lock::Mutex<PartitionLog<S>>,
    usage: Cell<Usage>,
    segments_count: Cell<u32>,
    current_offset: Cell<u64>,
    deleted: Cell<bool>,
}

impl<S: Storage> Partition<S> {
    fn new(log: PartitionLog<S>) -> Self {
        let partition = Self {
            usage: Cell::new(Usage::default()),
            segments_count: Cell::new(0),
            current_offset: Cell::new(0),
            deleted: Cell::new(false),
            log: async_lock::Mutex::new(log),
        };
        partition.refresh(&partition.log.try_lock().expect("a new partition is unlocked"));
        partition
    }

    /// Copies the log's counters into the lock-free cells.
    fn refresh(&self, log: &PartitionLog<S>) {
        self.usage.set(log.usage());
        self.segments_count.set(log.segments_count());
        self.current_offset.set(log.current_offset());
    }
}

/// `(stream_id, topic_id, handle)` of a resolved partition.
type ResolvedPartition<S> = (u32, u32, Rc<Partition<S>>);

pub struct System<E: Env> {
    storage: E::Storage,
    clock: E::Clock,
    config: SystemConfig,
    metadata: RefCell<Metadata>,
    journal: async_lock::Mutex<MetadataJournal<<E::Storage as Storage>::File>>,
    commit: Cell<u64>,
    partitions: RefCell<BTreeMap<Namespace, Rc<Partition<E::Storage>>>>,
    /// Per-topic round-robin cursor for Balanced sends.
    balanced: RefCell<BTreeMap<(u32, u32), u32>>,
    pub clients: ClientRegistry,
    root: RootUser,
    next_session: Cell<u64>,
    start_time_us: u64,
}

impl<E: Env> System<E> {
    /// Opens the data directory: replays the metadata journal, then opens every partition.
    /// Returns the system and, when the root account was created now, its seed.
    pub async fn open(storage: E::Storage, clock: E::Clock, config: SystemConfig) -> Result<(Self, bool), StartError> {
        let metadata_dir = config.data_path.join("metadata");
        let (journal, entries) = MetadataJournal::open(&storage, &metadata_dir).await?;
        let mut metadata = Metadata::default();
        for entry in &entries {
            let command = Command::decode(entry.operation, 0, &entry.body);
            let Ok(Command::Metadata(op)) = command else {
                return Err(StartError::Replay { op: entry.op, code: ErrorCode::InvalidFormat });
            };
            metadata.apply(&op, entry.timestamp).map_err(|code| StartError::Replay { op: entry.op, code })?;
        }
        let (root, created) = RootUser::load_or_create(&storage, &metadata_dir, &config.root)
            .await
            .map_err(io_context("loading the root user"))?;
        let start_time_us = clock.now_us();
        let system = Self {
            commit: Cell::new(journal.commit()),
            journal: async_lock::Mutex::new(journal),
            storage,
            clock,
            config,
            metadata: RefCell::new(metadata),
            partitions: RefCell::new(BTreeMap::new()),
            balanced: RefCell::new(BTreeMap::new()),
            clients: ClientRegistry::default(),
            root,
            next_session: Cell::new(1),
            start_time_us,
        };
        system.open_all_partitions().await?;
        Ok((system, created))
    }

    async fn open_all_partitions(&self) -> Result<(), StartError> {
        let mut wanted = Vec::new();
        for stream in self.metadata.borrow().streams() {
            for topic in stream.topics.values() {
                for partition_id in 0..topic.partitions.len() as u32 {
                    wanted.push((stream.id, topic.id, partition_id, PartitionSettings::from(&topic.settings)));
                }
            }
        }
        for (stream_id, topic_id, partition_id, settings) in wanted {
            self.open_partition(stream_id, topic_id, partition_id, settings)
                .await
                .map_err(io_context(format!("opening partition {stream_id}/{topic_id}/{partition_id}")))?;
        }
        Ok(())
    }

    async fn open_partition(
        &self,
        stream_id: u32,
        topic_id: u32,
        partition_id: u32,
        settings: PartitionSettings,
    ) -> std::io::Result<()> {
        let namespace =
            Namespace::new(stream_id, topic_id, partition_id).expect("metadata keeps ids within namespace limits");
        let dir = self.partition_dir(stream_id, topic_id, partition_id);
        let log = PartitionLog::open(&self.storage, &dir, partition_id, settings).await?;
        self.partitions.borrow_mut().insert(namespace, Rc::new(Partition::new(log)));
        Ok(())
    }

    pub fn data_path(&self) -> &Path {
        &self.config.data_path
    }

    fn stream_dir(&self, stream_id: u32) -> PathBuf {
        self.config.data_path.join("streams").join(stream_id.to_string())
    }

    fn topic_dir(&self, stream_id: u32, topic_id: u32) -> PathBuf {
        self.stream_dir(stream_id).join("topics").join(topic_id.to_string())
    }

    fn partition_dir(&self, stream_id: u32, topic_id: u32, partition_id: u32) -> PathBuf {
        self.topic_dir(stream_id, topic_id).join("partitions").join(partition_id.to_string())
    }

    /// Resolves a topic and partition to the partition's handle.
    fn partition(&self, topic: &TopicRef, partition_id: u32) -> Result<ResolvedPartition<E::Storage>, ErrorCode> {
        let (stream_id, topic_id) = self.metadata.borrow().topic_ids(topic)?;
        let namespace = Namespace::new(stream_id, topic_id, partition_id).ok_or(ErrorCode::PartitionNotFound)?;
        let partition = self.partitions.borrow().get(&namespace).cloned().ok_or(ErrorCode::PartitionNotFound)?;
        Ok((stream_id, topic_id, partition))
    }

    fn partition_usage(&self, stream_id: u32, topic_id: u32, partition_id: u32) -> Option<Rc<Partition<E::Storage>>> {
        let namespace = Namespace::new(stream_id, topic_id, partition_id)?;
        self.partitions.borrow().get(&namespace).cloned()
    }

    /// Handles of every partition in a key range, for stream- or topic-wide operations.
    fn partitions_where(&self, keep: impl Fn(Namespace) -> bool) -> Vec<(Namespace, Rc<Partition<E::Storage>>)> {
        self.partitions.borrow().iter().filter(|(ns, _)| keep(**ns)).map(|(ns, p)| (*ns, p.clone())).collect()
    }

    /// Flushes every partition's journal to disk, with fsync; used at shutdown.
    pub async fn flush_all(&self) -> std::io::Result<()> {
        for (_, partition) in self.partitions_where(|_| true) {
            let mut log = partition.log.lock().await;
            log.flush(&self.storage, true).await?;
            partition.refresh(&log);
        }
        Ok(())
    }

    pub fn commit(&self) -> u64 {
        self.commit.get()
    }

    fn now_us(&self) -> u64 {
        self.clock.now_us()
    }
}

/// Ends the process for an unrecoverable environment failure (the metadata journal or a
/// partition's disk is gone): continuing would answer clients with state that cannot be
/// made durable.
pub fn fatal(reason: &str) -> ! {
    tracing::error!("fatal: {reason}");
    eprintln!("rill-server: fatal: {reason}");
    std::process::exit(74);
}

impl<E: Env> System<E> {
    pub(crate) fn verify_root(&self, username: &str, password: &str) -> bool {
        self.root.verify(username, password)
    }

    /// Sessions are strictly increasing and never zero.
    pub(crate) fn next_session(&self) -> u64 {
        let session = self.next_session.get();
        self.next_session.set(session + 1);
        session
    }
}
