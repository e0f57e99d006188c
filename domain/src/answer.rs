//! What a use case answers, before any encoding: the reply model one protocol's binary
//! codec (`wire::response`) and the HTTP API's JSON both render from. Owned values, so an
//! answer crosses shards and threads as it is.

use crate::consumer_group::GroupKey;
use crate::permissions::Permissions;
use crate::topic_options::OptionSpec;

/// Size and message counters of a partition, topic or stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub size_bytes: u64,
    pub messages_count: u64,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Self) {
        self.size_bytes += other.size_bytes;
        self.messages_count += other.messages_count;
    }
}

/// What a PartitionResponse reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionInfo {
    pub id: u32,
    pub created_at: u64,
    pub segments_count: u32,
    pub current_offset: u64,
    pub usage: Usage,
    /// The history the partition serves (protocol 0.12 reports it).
    pub context: PartitionContext,
    /// The replica serving it, its one member in sync (protocol 0.12).
    pub replica_id: u8,
}

/// Which history of a partition a reply speaks for (protocol 0.12): the incarnation of its
/// log (a new one whenever the log starts again from nothing), the consumer-group owner
/// generation, and the metadata op the answer is at least as new as.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionContext {
    pub incarnation: u64,
    pub owner_generation: u64,
    pub metadata_op: u64,
}

/// Where a partition is served (protocol 0.12's GET_PARTITION_ROUTE).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionRoute {
    pub incarnation: u64,
    pub metadata_op: u64,
    pub view: u32,
    pub partitions_count: u32,
    /// The replica id (as cluster metadata lists it) of the partition's primary.
    pub primary_replica: u8,
}

/// What a poll reply says before its batches: the partition, where it stands, how many
/// messages follow, and the context it was served under.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PollHead {
    pub partition_id: u32,
    pub current_offset: u64,
    pub messages_count: u32,
    pub context: PartitionContext,
}

/// The listener ports cluster metadata advertises.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodePorts {
    pub tcp: u16,
    pub quic: u16,
    pub http: u16,
    pub websocket: u16,
}

/// The one node of a single-node server: a healthy leader.
pub fn single_node(ip: &str, ports: NodePorts) -> ClusterNode {
    ClusterNode { replica_id: 0, name: "rill-node".into(), ip: ip.into(), ports, role: 0, status: 0 }
}

/// One node of cluster metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNode {
    /// The node's replica id (protocol 0.12 lists it; routes name primaries by it).
    pub replica_id: u8,
    pub name: String,
    pub ip: String,
    pub ports: NodePorts,
    /// 0 leader, 1 follower.
    pub role: u8,
    /// 0 healthy, 1 starting, 3 unreachable.
    pub status: u8,
}

/// One connected client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientInfo {
    pub client_id: u32,
    pub user_id: Option<u32>,
    pub transport: u8,
    pub address: String,
    /// The protocol generation its login chose (0.11 before one).
    pub protocol: crate::version::Dialect,
}

/// The numeric part of GET_STATS plus its strings and trailers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    pub process_id: u32,
    /// Percent of one core the process used lately, and of the whole host.
    pub cpu_usage: f32,
    pub total_cpu_usage: f32,
    pub memory_usage: u64,
    pub total_memory: u64,
    pub available_memory: u64,
    pub run_time_us: u64,
    pub start_time_us: u64,
    pub read_bytes: u64,
    pub written_bytes: u64,
    pub messages_size_bytes: u64,
    pub streams_count: u32,
    pub topics_count: u32,
    pub partitions_count: u32,
    pub segments_count: u32,
    pub messages_count: u64,
    pub clients_count: u32,
    pub consumer_groups_count: u32,
    pub hostname: String,
    pub os_name: String,
    pub os_version: String,
    pub kernel_version: String,
    pub threads_count: u32,
    pub free_disk_space: u64,
    pub total_disk_space: u64,
}

/// A stream as lists show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamInfo {
    pub id: u32,
    pub created_at: u64,
    pub topics_count: u32,
    pub usage: Usage,
    pub name: String,
    /// The derived options 0.12 reads report (`stream_options::derived_options`).
    pub derived_options: Vec<u8>,
}

/// A stream with its topics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamDetails {
    pub stream: StreamInfo,
    pub topics: Vec<TopicInfo>,
}

/// A topic as lists show it, with its option blocks (what the creator set, and every
/// effective setting).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    pub id: u32,
    pub created_at: u64,
    pub partitions_count: u32,
    pub message_expiry_us: u64,
    /// 1 none, 2 gzip.
    pub compression: u8,
    pub max_topic_size_bytes: u64,
    pub usage: Usage,
    pub name: String,
    pub explicit_options: Vec<u8>,
    pub derived_options: Vec<u8>,
}

impl TopicInfo {
    /// A topic of the metadata as lists show it, with its usage.
    pub fn of(topic: &crate::metadata::Topic, usage: Usage) -> Self {
        Self {
            id: topic.id,
            created_at: topic.created_at,
            partitions_count: topic.partitions.len() as u32,
            message_expiry_us: topic.settings.message_expiry_us,
            compression: topic.settings.compression as u8,
            max_topic_size_bytes: topic.settings.max_topic_size_bytes,
            usage,
            name: topic.name.clone(),
            explicit_options: topic.settings.explicit.clone(),
            derived_options: topic.settings.derived_options(),
        }
    }
}

/// A topic with its partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDetails {
    pub topic: TopicInfo,
    pub partitions: Vec<PartitionInfo>,
}

/// A consumer group as lists show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupInfo {
    pub id: u32,
    pub partitions_count: u32,
    pub members_count: u32,
    pub name: String,
}

/// A consumer group with each member and the partitions it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDetails {
    pub group: GroupInfo,
    pub members: Vec<(u32, Vec<u32>)>,
}

/// A user as lists show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    pub id: u32,
    pub created_at: u64,
    pub status: u8,
    pub username: String,
}

impl UserInfo {
    pub fn of(user: &crate::metadata::User) -> Self {
        Self { id: user.id, created_at: user.created_at, status: user.status, username: user.username.clone() }
    }
}

/// A user with its permissions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserDetails {
    pub user: UserInfo,
    pub permissions: Option<Permissions>,
}

impl UserDetails {
    pub fn of(user: &crate::metadata::User) -> Self {
        Self { user: UserInfo::of(user), permissions: user.permissions.clone() }
    }
}

/// A personal access token's name and expiry (µs since the epoch; 0 never expires).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    pub name: String,
    pub expiry_at: u64,
}

/// A connected client and the consumer groups it is a member of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientDetails {
    pub client: ClientInfo,
    pub groups: Vec<GroupKey>,
}

/// A stored consumer offset with where its partition stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerOffset {
    pub partition_id: u32,
    pub current_offset: u64,
    pub stored_offset: u64,
}

/// Where a send's messages went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendConfirmation {
    pub stream_id: u32,
    pub topic_id: u32,
    pub partition_id: u32,
    pub base_offset: u64,
}

/// The node to run a partition request on, with the caller's identity to attach to there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routing {
    pub client: u128,
    pub session: u64,
    pub metadata_watermark: u64,
    pub node: ClusterNode,
}

/// What a created resource's reply carries after its result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    Stream(StreamDetails),
    Topic(TopicDetails),
    Group(GroupDetails),
    User(UserDetails),
}

/// What a use case answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Success, and nothing to say (a flush, a purge, a deletion of segments).
    Nothing,
    /// Success of an operation whose reply opens with a result (a metadata change, an
    /// offset stored or deleted), and nothing after it.
    Done,
    /// A resource created, with its details.
    Created(Created),
    /// A personal access token created: its raw value, shown once.
    RawToken(String),
    Stream(Option<StreamDetails>),
    Streams(Vec<StreamInfo>),
    Topic(Option<TopicDetails>),
    Topics(Vec<TopicInfo>),
    Group(Option<GroupDetails>),
    Groups(Vec<GroupInfo>),
    User(Option<UserDetails>),
    Users(Vec<UserInfo>),
    Tokens(Vec<TokenInfo>),
    Client(Option<ClientDetails>),
    /// Every connected client with how many consumer groups it is a member of.
    Clients(Vec<(ClientInfo, u32)>),
    Stats(Box<Stats>),
    Cluster {
        name: String,
        nodes: Vec<ClusterNode>,
    },
    Options(Vec<OptionSpec>),
    Offset(Option<ConsumerOffset>),
    Sent(SendConfirmation),
    /// A poll that returns no messages: the partition it answers for (`u32::MAX` asks a
    /// consumer-group member to sync first) and where it stands.
    EmptyPoll(PollHead),
    Routing(Box<Routing>),
    Route(PartitionRoute),
    /// A consumer group member's generation and the partitions it holds (none when it is
    /// not a member).
    Synced(Option<(u64, Vec<u32>)>),
    /// A snapshot archive (zip).
    Snapshot(Vec<u8>),
    /// A GET_METADATA_CHANGES page, laid out by the change feed.
    MetadataChanges(Vec<u8>),
}
