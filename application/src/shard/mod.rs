//! One shard of the server: request dispatch and routing, the bus, the connections it
//! serves, its lock-free view of the metadata, and the use cases it runs; its partitions
//! are its owner's (`crate::partitions`), which every partition operation reaches in one
//! call. Shard 0 also holds the authoritative metadata, the metadata journal and the
//! publisher that makes committed operations visible to every shard. A shard lives on one
//! thread and one event loop; no `RefCell` borrow is held across an `.await`.

mod changes;
pub mod deferred;
mod fetch;
mod group;
mod groups;
mod maintenance;
mod messages;
mod metadata_ops;
mod metadata_writer;
mod partitions;
mod queries;
mod replication;
mod routes;
mod routing;
mod snapshot;
mod users;

use std::cell::{OnceCell, RefCell};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use rill_domain::Namespace;
use rill_domain::answer::Answer;
use rill_domain::error::ErrorCode;
use rill_domain::metadata::Metadata;
use rill_domain::wire::command::MetadataOp;

pub use metadata_writer::MetadataWriter;

use crate::clients::Transport;
use crate::config::ServerConfig;
use crate::partition_group::PartitionGroup;
use crate::partitions::{Owner, PartitionStore};
use crate::ports::{BusReply, Clock, Env, MetadataRead, Reply, ShardBus, ShardRequest, Storage};
use crate::replication::{JournalError, Replication};
use crate::shared::Shared;

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

/// What shard 0 recovers from the data directory before any shard starts.
pub struct Recovered<S: Storage> {
    pub replication: Replication<S>,
    /// Effects of opening the replica (messages to peers), carried out once shard 0 serves.
    pub pending: Vec<rill_domain::vsr::Effect>,
    /// Whether the root account was created now (its generated password is shown once).
    pub root_created: bool,
    /// The previous run stopped gracefully, with every partition fsynced.
    pub clean_shutdown: bool,
}

impl<S: Storage> Recovered<S> {
    pub fn metadata(&self) -> Metadata {
        self.replication.metadata()
    }

    pub fn commit(&self) -> u64 {
        self.replication.commit()
    }
}

/// The client id the start-up path commits the root account with; every running node
/// uses a random one of its own.
const BOOTSTRAP_CLIENT: u128 = 1;

/// Opens the metadata replica from `metadata/` (journal, superblock, checkpoint). On a
/// single node whose metadata has no user, commits the root account (id 0) from the seed
/// as an `InsertUser` op carrying an Argon2id hash; a cluster's primary does it once the
/// cluster runs (`Shard::ensure_root_user`).
pub async fn recover<S: Storage>(
    storage: &S,
    config: &ServerConfig,
    now_us: u64,
    seed: u64,
) -> Result<Recovered<S>, StartError> {
    let clean_shutdown = take_clean_shutdown_marker(storage, &config.data_path).await;
    let metadata_dir = config.data_path.join("metadata");
    let (replication, opened) = Replication::open(storage, &metadata_dir, config.membership, seed).await?;
    // Ops committed while opening are already in the state every view starts from: only
    // what concerns peers is left for later.
    let pending = replication.without_commits(opened);
    // The decoy hash that unknown usernames are checked against is built now, before any
    // connection, so no login ever pays for it on an event loop.
    crate::credentials::decoy_hash();
    let no_user = replication.with_metadata(|m| m.users().next().is_none());
    let root_created = no_user && !config.membership.clustered();
    if root_created {
        let (operation, body) = root_user_op(config);
        let mut effects = Vec::new();
        replication.replica.borrow_mut().on_request(now_us, BOOTSTRAP_CLIENT, 1, operation, body, &mut effects);
        let effects = replication.settle(storage, effects).await.map_err(io_context("journaling the root user"))?;
        replication.without_commits(effects);
        if replication.with_metadata(|m| m.users().next().is_none()) {
            return Err(StartError::Replay { op: replication.commit(), code: ErrorCode::CannotDeleteUser });
        }
    }
    Ok(Recovered { replication, pending, root_created, clean_shutdown })
}

/// The file a graceful shutdown leaves once every partition is fsynced.
const CLEAN_SHUTDOWN_MARKER: &str = "clean_shutdown";

/// Whether the last run left the clean-shutdown marker; it is removed (durably) before any
/// partition opens, so a crash of this run is never taken for a clean stop.
async fn take_clean_shutdown_marker<S: Storage>(storage: &S, data_path: &Path) -> bool {
    let marker = data_path.join(CLEAN_SHUTDOWN_MARKER);
    if !storage.exists(&marker).await {
        return false;
    }
    let removed = storage.remove_file(&marker).await.is_ok() && storage.sync_dir(data_path).await.is_ok();
    if !removed {
        tracing::warn!(path = %marker.display(), "cannot remove the clean-shutdown marker; treating the last stop as a crash");
    }
    removed
}

/// The journal form of creating the root account from the seed.
pub(crate) fn root_user_op(config: &ServerConfig) -> (u8, Vec<u8>) {
    let op = MetadataOp::InsertUser {
        username: config.root.username.clone(),
        password_hash: crate::credentials::hash_password(&config.root.password),
        status: rill_domain::metadata::STATUS_ACTIVE,
        permissions: Some(rill_domain::permissions::Permissions::all()),
    };
    op.encode_internal().expect("a journal-only operation")
}

/// The ports and shared state a shard is built from.
pub struct ShardParts<E: Env> {
    pub storage: E::Storage,
    pub clock: E::Clock,
    pub shared: Arc<Shared>,
    pub metadata: E::MetadataReader,
    pub bus: E::Bus,
    pub offload: E::Offload,
    pub diagnostics: E::Diagnostics,
    pub host_metrics: E::HostMetrics,
    /// Present on shard 0 only.
    pub writer: Option<MetadataWriter<E>>,
}

pub struct Shard<E: Env> {
    shard_id: u16,
    storage: E::Storage,
    clock: E::Clock,
    pub(crate) shared: Arc<Shared>,
    metadata: E::MetadataReader,
    bus: E::Bus,
    offload: E::Offload,
    diagnostics: E::Diagnostics,
    host_metrics: E::HostMetrics,
    writer: Option<MetadataWriter<E>>,
    /// The partitions this shard has open.
    partitions: PartitionStore<E>,
    /// This shard's replica of its partition group, when partitions are replicated: set
    /// once, when the cluster opens it.
    group: OnceCell<PartitionGroup<E>>,
    /// Per-topic round-robin cursor for Balanced sends made through this shard.
    balanced: RefCell<BTreeMap<(u32, u32), u32>>,
    /// Deferred polls waiting on this shard (`deferred.rs`).
    waiting_polls: std::cell::Cell<u32>,
}

impl<E: Env> Shard<E> {
    pub fn new(parts: ShardParts<E>) -> Self {
        let shard_id = parts.bus.shard_id();
        let partitions = PartitionStore::new(
            parts.storage.clone(),
            parts.clock.clone(),
            parts.shared.clone(),
            shard_id,
            parts.metadata.clone(),
        );
        Self {
            shard_id,
            storage: parts.storage,
            clock: parts.clock,
            shared: parts.shared,
            metadata: parts.metadata,
            bus: parts.bus,
            offload: parts.offload,
            diagnostics: parts.diagnostics,
            host_metrics: parts.host_metrics,
            writer: parts.writer,
            partitions,
            group: OnceCell::new(),
            balanced: RefCell::new(BTreeMap::new()),
            waiting_polls: std::cell::Cell::new(0),
        }
    }

    /// The owner of this shard's partitions: through its group once one is open, on its
    /// own otherwise.
    pub(crate) fn owner(&self) -> Owner<'_, E> {
        match self.group.get() {
            Some(group) => Owner::Replicated(&self.partitions, group),
            None => Owner::Local(&self.partitions),
        }
    }

    pub fn shard_id(&self) -> u16 {
        self.shard_id
    }

    /// The state every shard shares: the composition root's and the tests' way in.
    /// Adapters never take it (the tidy test checks): transports use the methods below, and
    /// the HTTP thread a `GatewayContext`.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    // What transports need from a shard, so no adapter reaches into `Shared`.

    pub fn shard_count(&self) -> u16 {
        self.shared.shard_count
    }

    /// Registers a connection served on this shard; its client id, or `None` when
    /// `max_connections` are served already (the transport closes it).
    pub fn connect(&self, peer: String, transport: Transport) -> Option<u32> {
        let limit = self.shared.config.security.max_connections;
        let clients = &self.shared.sessions.clients;
        if limit != 0 && clients.count() >= limit {
            tracing::warn!(%peer, max_connections = limit, "connection refused: the connection limit is reached");
            return None;
        }
        Some(clients.connect(peer, transport, self.shard_id))
    }

    /// How long the next request's header may take to arrive, and why the connection is
    /// evicted when it does not (`None`: no limit). A logged-in connection has the idle
    /// limit; one without a session for `unbound_for_us` has the sooner of the idle limit
    /// and what is left of the login timeout (0 once it ran out). A data connection
    /// attached to a coordinator that is still logged in has none: the SDK never pings on
    /// it, and the coordinator's own pings say the client is alive.
    pub fn header_deadline(
        &self,
        connection: &crate::Connection,
        unbound_for_us: u64,
    ) -> Option<(u64, rill_domain::wire::header::EvictionReason)> {
        use rill_domain::wire::header::EvictionReason;
        let security = &self.shared.config.security;
        let idle = (security.session_idle_limit_us != 0)
            .then_some((security.session_idle_limit_us, EvictionReason::StaleClient));
        if let Some((client, session)) = connection.attachment()
            && self.shared.sessions.clients.session_user(client, session).is_some()
        {
            return None;
        }
        if connection.bound().is_some() || security.login_timeout_us == 0 {
            return idle;
        }
        let login = (security.login_timeout_us.saturating_sub(unbound_for_us), EvictionReason::NoSession);
        Some(match idle {
            Some(idle) if idle.0 < login.0 => idle,
            _ => login,
        })
    }

    /// How long a connection may stay without a session (`None`: no limit).
    pub fn login_timeout_us(&self) -> Option<u64> {
        let timeout = self.shared.config.security.login_timeout_us;
        (timeout != 0).then_some(timeout)
    }

    /// How long a frame's body may take once its header arrived (`None`: no limit).
    pub fn frame_timeout_us(&self) -> Option<u64> {
        let timeout = self.shared.config.security.frame_timeout_us;
        (timeout != 0).then_some(timeout)
    }

    /// The largest request frame a connection may send, header included.
    pub fn max_frame_bytes(&self) -> usize {
        self.shared.config.security.max_frame_bytes
    }

    /// Hands a connection, between requests, to the shard its traffic belongs on (`kind`
    /// says which transport resumes it there, with its session); on failure the descriptor
    /// comes back and this shard goes on serving it.
    pub async fn move_connection(
        &self,
        target: u16,
        fd: std::os::fd::OwnedFd,
        peer: std::net::SocketAddr,
        kind: crate::ports::bus::ConnectionKind,
    ) -> Result<(), std::os::fd::OwnedFd> {
        use crate::ports::ConnectionHandoff;
        self.bus.hand_off(target, fd, peer, kind).await
    }

    /// Takes over a connection another shard moved here.
    pub fn resume_connection(&self, state: crate::ConnectionState) -> crate::Connection {
        self.shared.sessions.clients.set_shard(state.client_id, self.shard_id);
        self.shared.telemetry.bus.connections_moved.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        crate::Connection::resume(state)
    }

    /// The pool request frames are read into.
    pub fn pool(&self) -> &'static crate::memory_pool::MemoryPool {
        self.shared.pool
    }

    /// Opens every partition this shard owns, as the committed metadata lists them. One that
    /// cannot be opened (a disk error) is logged and left to the failed-write retry; the
    /// others serve meanwhile.
    pub async fn open_owned_partitions(&self) {
        self.partitions.remove_legacy_spares().await;
        let owned = self.metadata.read(|metadata| {
            let mut owned = Vec::new();
            for stream in metadata.streams() {
                for topic in stream.topics.values() {
                    for partition_id in 0..topic.partitions.len() as u32 {
                        let namespace = Namespace::new(stream.id, topic.id, partition_id)
                            .expect("metadata keeps ids within limits");
                        if self.shared.partitions.owner(namespace) == self.shard_id {
                            let created_at = topic.partitions[partition_id as usize];
                            owned.push((namespace, self.partition_settings(&topic.settings), created_at));
                        }
                    }
                }
            }
            owned
        });
        let owner = self.owner();
        for (namespace, settings, created_at) in owned {
            // Logged and noted for the retry by `open_partition`.
            let _ = owner.open(namespace, settings, false, created_at).await;
        }
    }

    /// Writes a crossing send's reply frame to the client's socket; an error, or what the
    /// socket does not take at once, goes back to the connection's shard.
    fn reply_directly(&self, direct: crate::ports::DirectReply, result: BusReply) -> BusReply {
        let reply = result?;
        let frame = self.reply_frame(&direct.header, direct.dialect, Ok(reply), direct.replies.as_deref());
        let written = direct.socket.try_send(&frame).unwrap_or(0);
        if written == frame.len() {
            self.shared.telemetry.bus.direct_replies.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Ok(Reply::Sent(None));
        }
        let rest = frame[written..].to_vec();
        Ok(Reply::Sent(Some(crate::memory_pool::PoolSlice::plain(rest))))
    }

    /// Serves this shard's inbox until shutdown: calls from other shards run here, and each
    /// handed-off connection goes to `adopt`.
    pub async fn serve_inbox<I: crate::ports::Inbox>(
        &self,
        inbox: I,
        adopt: impl FnMut(std::os::fd::OwnedFd, std::net::SocketAddr, crate::ports::bus::ConnectionKind),
    ) {
        crate::inbox::serve(&inbox, |request| self.on_bus_request(request), adopt).await
    }

    /// Serves a request that arrived over the bus.
    pub async fn on_bus_request(&self, request: ShardRequest) -> BusReply {
        match request {
            ShardRequest::Partition { namespace, op } => self.execute_partition(namespace, op).await,
            ShardRequest::SendReplying { namespace, op, direct } => {
                let result = self.execute_partition(namespace, op).await;
                self.reply_directly(direct, result)
            }
            ShardRequest::Metadata { operation, body } => {
                self.commit_metadata(operation, &body).await.map(Reply::Answer)
            }
            ShardRequest::Execute { user_id, request } => self.execute_for_user(user_id, request).await,
            ShardRequest::MetadataChanges { query } => self.metadata_changes(query).await.map(Reply::Answer),
            ShardRequest::FlushAll => self.flush_owned().await.map(|()| Answer::Nothing.into()).map_err(|error| {
                tracing::error!(%error, "flushing partitions failed");
                ErrorCode::IoError
            }),
        }
    }

    pub fn data_path(&self) -> &Path {
        &self.shared.config.data_path
    }

    /// Runs this shard's deferred flushes, for as long as the shard runs.
    pub async fn run_flusher(&self) {
        self.partitions.run_flusher().await
    }

    /// Flushes, with fsync, every partition this shard owns and closes it
    /// (`PartitionStore::flush_owned`); used at shutdown.
    pub async fn flush_owned(&self) -> std::io::Result<()> {
        self.partitions.flush_owned().await
    }

    /// Leaves the clean-shutdown marker, after every partition was flushed and fsynced.
    pub async fn mark_clean_shutdown(&self) -> std::io::Result<()> {
        let marker = self.data_path().join(CLEAN_SHUTDOWN_MARKER);
        let file = self.storage.open(&marker).await?;
        crate::ports::StorageFile::sync(&file).await?;
        self.storage.sync_dir(self.data_path()).await
    }

    /// A topic's settings as its partitions run them, with the server's defaults.
    pub(crate) fn partition_settings(
        &self,
        topic: &rill_domain::topic_options::TopicSettings,
    ) -> crate::partition::PartitionSettings {
        crate::partition::PartitionSettings::new(topic, &self.shared.config.data.partition)
    }

    /// Flushes and closes every partition of every shard (shard 0 asks the others over
    /// the bus); used at shutdown. A shard that fails does not stop the others; the first
    /// failure is returned once every shard was asked.
    pub async fn flush_all(&self) -> std::io::Result<()> {
        let mut failure = None;
        for shard in 0..self.shared.shard_count {
            let result = if shard == self.shard_id {
                self.flush_owned().await.map(|()| Answer::Nothing.into()).map_err(|_| ErrorCode::IoError)
            } else {
                self.bus.call(shard, ShardRequest::FlushAll).await
            };
            if let Err(code) = result {
                failure.get_or_insert(std::io::Error::other(format!("shard {shard} could not flush: {code}")));
            }
        }
        failure.map_or(Ok(()), Err)
    }

    pub fn commit(&self) -> u64 {
        self.shared.replica.commit()
    }

    pub(crate) fn now_us(&self) -> u64 {
        self.clock.now_us()
    }

    pub(crate) fn monotonic_us(&self) -> u64 {
        self.clock.monotonic_us()
    }

    /// Reads the shard's view of the committed metadata.
    pub fn metadata_view<R>(&self, f: impl FnOnce(&Metadata) -> R) -> R {
        self.metadata.read(f)
    }

    pub(crate) fn next_session(&self) -> Option<u64> {
        self.shared.sessions.next_session()
    }
}
