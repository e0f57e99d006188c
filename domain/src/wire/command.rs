//! The command model: every request Rill serves, as the codec decodes it (`decode.rs`)
//! from the operation byte, the NonReplicated code and the body.

use crate::consumer_group::{GroupKey, MemberId};
use crate::error::ErrorCode;
use crate::identifier::Identifier;
use crate::permissions::Permissions;
use crate::polling::PollingStrategy;
use crate::snapshot::{SnapshotCompression, SnapshotType};

/// Who a consumer offset belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Consumer {
    Single(Identifier),
    Group(Identifier),
}

/// How a send picks its partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Partitioning {
    Balanced,
    PartitionId(u32),
    MessagesKey(Vec<u8>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credentials {
    Password { username: String, password: String },
    Token(String),
}

/// Stream and topic addressed together, as most commands do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicRef {
    pub stream: Identifier,
    pub topic: Identifier,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command<'a> {
    Ping,
    GetStats,
    GetClusterMetadata,
    /// The option catalog of one scope's create command (1 topic, 2 stream, 3 user).
    DescribeOptions {
        scope: u8,
    },
    /// A zip of troubleshooting files (GET_SNAPSHOT_FILE).
    GetSnapshot {
        compression: SnapshotCompression,
        types: Vec<SnapshotType>,
    },
    GetMe,
    GetClient {
        client_id: u32,
    },
    GetClients,
    Register {
        protocol_version: u32,
        credentials: Credentials,
        /// Protocol 0.12: the secret a reconnecting client proves its session with.
        bind_secret: Option<[u8; 32]>,
    },
    /// Protocol 0.12: a reconnecting client asks to go on with its session (`session` 0:
    /// its Register reply was lost).
    BindSession {
        protocol_version: u32,
        client: u128,
        session: u64,
        metadata_watermark: u64,
        bind_secret: [u8; 32],
    },
    Logout,
    GetStream {
        stream: Identifier,
    },
    GetStreams,
    GetTopic(TopicRef),
    GetTopics {
        stream: Identifier,
    },
    /// A metadata mutation, decoded separately so the WAL can replay it.
    Metadata(MetadataOp<'a>),
    DeleteSegments {
        topic: TopicRef,
        partition_id: u32,
        segments_count: u32,
    },
    SendMessages {
        topic: TopicRef,
        partitioning: Partitioning,
        messages_count: u32,
        batch: &'a [u8],
    },
    PollMessages(PollRequest),
    /// Protocol 0.12: a read of many partitions of one topic, which may wait.
    FetchMessages(FetchRequest),
    /// Protocol 0.12: where a partition's history lives (its incarnation, the primary).
    GetPartitionRoute {
        topic: TopicRef,
        partition_id: u32,
    },
    /// Protocol 0.12: a page of the metadata change feed or of the current state.
    GetMetadataChanges(crate::change_feed::ChangesQuery),
    /// Protocol 0.12: give up the deferred poll the header's request number names.
    CancelDeferred,
    /// Which node serves this auto-commit poll (multi-node routing).
    GetPollRouting(PollRequest),
    /// The poll itself, on a data connection attached to its coordinator.
    PollMessagesOnPrimary(PollRequest),
    /// Which node takes a store or delete of this consumer offset.
    GetConsumerOffsetRouting {
        consumer: Consumer,
        topic: TopicRef,
        partition_id: Option<u32>,
    },
    /// Binds this (data) connection to the group identity of `client`'s session.
    AttachConsumerSession {
        client: u128,
        session: u64,
        metadata_watermark: u64,
    },
    FlushUnsavedBuffer {
        topic: TopicRef,
        partition_id: u32,
        fsync: bool,
    },
    GetConsumerOffset {
        consumer: Consumer,
        topic: TopicRef,
        partition_id: Option<u32>,
    },
    StoreConsumerOffset {
        consumer: Consumer,
        topic: TopicRef,
        partition_id: Option<u32>,
        offset: u64,
    },
    DeleteConsumerOffset {
        consumer: Consumer,
        topic: TopicRef,
        partition_id: Option<u32>,
    },
    GetUser {
        user: Identifier,
    },
    GetUsers,
    /// Carries the cleartext password: it is hashed before anything is journaled.
    CreateUser {
        username: String,
        password: String,
        status: u8,
        permissions: Option<Permissions>,
    },
    ChangePassword {
        user: Identifier,
        current: String,
        new: String,
    },
    GetTokens,
    CreateToken {
        name: String,
        expiry_us: u64,
    },
    DeleteToken {
        name: String,
    },
    GetConsumerGroup {
        topic: TopicRef,
        group: Identifier,
    },
    GetConsumerGroups {
        topic: TopicRef,
    },
    JoinConsumerGroup {
        topic: TopicRef,
        group: Identifier,
    },
    LeaveConsumerGroup {
        topic: TopicRef,
        group: Identifier,
    },
    SyncConsumerGroup {
        topic: TopicRef,
        group: Identifier,
    },
    /// A code the protocol defines that this server does not serve yet.
    Unsupported {
        code: u32,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollRequest {
    pub consumer: Consumer,
    pub topic: TopicRef,
    pub partition_id: Option<u32>,
    pub strategy: PollingStrategy,
    pub count: u32,
    pub auto_commit: bool,
    /// Protocol 0.12's POLL_MESSAGES_DEFERRED: how long to wait for messages, and the byte
    /// budget of the reply. `None` for a plain poll.
    pub deferred: Option<DeferredPoll>,
}

/// The waiting terms of a deferred poll, as the client bounded them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeferredPoll {
    pub wait_us: u64,
    pub min_count: u32,
    pub max_bytes: u32,
    pub request_timeout_us: u64,
}

/// One partition of a fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchTarget {
    pub partition_id: u32,
    /// An offset, or the one after the consumer's stored offset.
    pub strategy: PollingStrategy,
    /// Caps this partition's batches, at most the request's `max_bytes`.
    pub max_bytes: u32,
    /// The history the client read the partition in (0: any).
    pub incarnation: u64,
    pub owner_generation: u64,
}

/// `[consumer][stream][topic][wait_us u64][request_timeout_us u64][min_count u32][count u32]
/// [max_bytes u32][auto_commit u8][targets_count u32]` then per target `[partition_id u32]
/// [strategy 9][max_bytes u32][incarnation u64][owner_generation u64]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    pub consumer: Consumer,
    pub topic: TopicRef,
    pub wait_us: u64,
    pub request_timeout_us: u64,
    /// The wait ends once the targets hold this many messages (1 to `count`).
    pub min_count: u32,
    /// Caps the messages of the whole reply.
    pub count: u32,
    /// Caps the batches of all sections together.
    pub max_bytes: u32,
    pub auto_commit: bool,
    pub targets: Vec<FetchTarget>,
}

/// Metadata mutations. They are applied by the metadata state machine and journaled as
/// `(operation, timestamp, body)`, so replay decodes them with this same code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetadataOp<'a> {
    /// `options` as committed: empty, or the stream key's envelope (`stream_options`);
    /// from a client, its own block, which the server rewrites before committing.
    CreateStream {
        name: String,
        options: &'a [u8],
    },
    UpdateStream {
        stream: Identifier,
        name: String,
    },
    DeleteStream {
        stream: Identifier,
    },
    PurgeStream {
        stream: Identifier,
    },
    CreateTopic {
        stream: Identifier,
        partitions_count: u32,
        name: String,
        options: &'a [u8],
    },
    UpdateTopic {
        topic: TopicRef,
        name: String,
        options: &'a [u8],
    },
    DeleteTopic(TopicRef),
    PurgeTopic(TopicRef),
    CreatePartitions {
        topic: TopicRef,
        count: u32,
    },
    DeletePartitions {
        topic: TopicRef,
        count: u32,
    },
    CreateConsumerGroup {
        topic: TopicRef,
        name: String,
    },
    DeleteConsumerGroup {
        topic: TopicRef,
        group: Identifier,
    },
    UpdateUser {
        user: Identifier,
        username: Option<String>,
        status: Option<u8>,
    },
    DeleteUser {
        user: Identifier,
    },
    /// Protocol 0.12's patch of a stream, topic or user: keys set from `options` (a TLV
    /// block), keys in `reset` back to their defaults, every other key kept.
    UpdateResource {
        target: ResourceTarget,
        reset: Vec<String>,
        options: &'a [u8],
    },
    UpdatePermissions {
        user: Identifier,
        permissions: Option<Permissions>,
    },
    /// Journal-only operations: they carry hashes, never secrets, and are never accepted
    /// from the wire (their operation bytes are outside the protocol's range).
    InsertUser {
        username: String,
        password_hash: String,
        status: u8,
        permissions: Option<Permissions>,
    },
    SetPassword {
        user_id: u32,
        password_hash: String,
    },
    InsertToken {
        user_id: u32,
        name: String,
        token_hash: String,
        expiry_at: u64,
    },
    RemoveToken {
        user_id: u32,
        name: String,
    },
    /// Journal-only consumer-group membership (`wire::membership`): a member joins, or
    /// leaves by its own request.
    JoinGroup {
        group: GroupKey,
        member: MemberId,
    },
    LeaveGroup {
        group: GroupKey,
        client: u128,
    },
    /// The members of `node` that came on its connection `connection` of process start
    /// `boot`; without a connection, every member of `node` from another process start
    /// than `boot` (0: every member of `node`).
    DropMembers {
        node: u8,
        boot: u64,
        connection: Option<u32>,
    },
    /// Hands over the partitions `synced` (0: nobody) lets go, and those whose old owner's
    /// grace of `timeout_us` ended by the op's timestamp.
    SettleGroup {
        group: GroupKey,
        synced: u128,
        timeout_us: u64,
    },
}

/// What an UPDATE_RESOURCE patches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourceTarget {
    Stream(Identifier),
    Topic(TopicRef),
    User(Identifier),
}

/// Why a request cannot be decoded; the transport maps these to a status or an eviction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// The operation byte is not one the protocol defines.
    UnknownOperation(u8),
    /// A NonReplicated code the protocol does not define.
    UnknownCode(u32),
    /// The body does not match the command's layout.
    Body(ErrorCode),
}

impl From<ErrorCode> for DecodeError {
    fn from(code: ErrorCode) -> Self {
        Self::Body(code)
    }
}
