//! Command codes and operation bytes of both protocol generations (0.12's additions marked),
//! and the mapping between them.

pub mod code {
    pub const PING: u32 = 1;
    pub const GET_STATS: u32 = 10;
    pub const GET_SNAPSHOT_FILE: u32 = 11;
    pub const GET_CLUSTER_METADATA: u32 = 12;
    pub const DESCRIBE_OPTIONS: u32 = 13;
    /// Protocol 0.12: a reconnecting client goes on with its session.
    pub const BIND_SESSION: u32 = 15;
    /// Protocol 0.12: the metadata change feed and pages of the current state.
    pub const GET_METADATA_CHANGES: u32 = 17;
    /// Multi-node routing (0.11): a data connection takes on its coordinator's identity.
    pub const ATTACH_CONSUMER_SESSION: u32 = 14;
    pub const GET_ME: u32 = 20;
    pub const GET_CLIENT: u32 = 21;
    pub const GET_CLIENTS: u32 = 22;
    pub const POLL_MESSAGES: u32 = 100;
    /// Multi-node routing: which node serves an auto-commit poll, and the poll run there.
    pub const GET_POLL_ROUTING: u32 = 103;
    pub const POLL_MESSAGES_ON_PRIMARY: u32 = 104;
    pub const FLUSH_UNSAVED_BUFFER: u32 = 102;
    /// Protocol 0.12: a partition's route, a poll that may wait, and its cancellation.
    pub const GET_PARTITION_ROUTE: u32 = 105;
    pub const POLL_MESSAGES_DEFERRED: u32 = 106;
    pub const CANCEL_DEFERRED_REQUEST: u32 = 108;
    /// Protocol 0.12: a read of up to 1,000 partitions of a topic at once, which may wait.
    pub const FETCH_MESSAGES: u32 = 109;
    pub const GET_CONSUMER_OFFSET: u32 = 120;
    /// Multi-node routing: which node takes a store or delete of a consumer offset.
    pub const GET_CONSUMER_OFFSET_ROUTING: u32 = 123;
    pub const GET_STREAM: u32 = 200;
    pub const GET_STREAMS: u32 = 201;
    pub const GET_TOPIC: u32 = 300;
    pub const GET_TOPICS: u32 = 301;
    pub const GET_USER: u32 = 31;
    pub const GET_USERS: u32 = 32;
    pub const GET_PERSONAL_ACCESS_TOKENS: u32 = 41;
    pub const GET_CONSUMER_GROUP: u32 = 600;
    pub const GET_CONSUMER_GROUPS: u32 = 601;
    pub const SYNC_CONSUMER_GROUP: u32 = 606;
}

/// The operation byte (request offset 176, echoed at reply offset 208).
pub mod operation {
    pub const REGISTER: u8 = 1;
    pub const NON_REPLICATED: u8 = 2;
    pub const LOGOUT: u8 = 3;
    pub const CREATE_STREAM: u8 = 128;
    pub const UPDATE_STREAM: u8 = 129;
    pub const DELETE_STREAM: u8 = 130;
    pub const PURGE_STREAM: u8 = 131;
    pub const CREATE_TOPIC: u8 = 132;
    pub const UPDATE_TOPIC: u8 = 133;
    pub const DELETE_TOPIC: u8 = 134;
    pub const PURGE_TOPIC: u8 = 135;
    pub const CREATE_PARTITIONS: u8 = 136;
    pub const DELETE_PARTITIONS: u8 = 137;
    pub const DELETE_SEGMENTS: u8 = 138;
    pub const CREATE_CONSUMER_GROUP: u8 = 139;
    pub const DELETE_CONSUMER_GROUP: u8 = 140;
    pub const CREATE_USER: u8 = 141;
    pub const UPDATE_USER: u8 = 142;
    pub const DELETE_USER: u8 = 143;
    pub const CHANGE_PASSWORD: u8 = 144;
    pub const UPDATE_PERMISSIONS: u8 = 145;
    pub const CREATE_PERSONAL_ACCESS_TOKEN: u8 = 146;
    pub const DELETE_PERSONAL_ACCESS_TOKEN: u8 = 147;
    pub const JOIN_CONSUMER_GROUP: u8 = 148;
    pub const LEAVE_CONSUMER_GROUP: u8 = 149;
    /// Protocol 0.12: patches a stream, topic or user (`MetadataOp::UpdateResource`).
    pub const UPDATE_RESOURCE: u8 = 150;
    /// Journal-only operations, outside the protocol's range so no client can send them.
    pub const INSERT_USER: u8 = 200;
    pub const SET_PASSWORD: u8 = 201;
    pub const INSERT_TOKEN: u8 = 202;
    pub const REMOVE_TOKEN: u8 = 203;
    /// Journal-only consumer-group membership (`wire::membership`).
    pub const JOIN_MEMBER: u8 = 204;
    pub const LEAVE_MEMBER: u8 = 205;
    pub const DROP_MEMBERS: u8 = 206;
    pub const SETTLE_GROUP: u8 = 207;
    pub const SEND_MESSAGES: u8 = 160;
    pub const STORE_CONSUMER_OFFSET: u8 = 161;
    pub const DELETE_CONSUMER_OFFSET: u8 = 162;
    /// A partition group's own op: the partition starts again empty (creation, purge).
    pub const RESET_PARTITION: u8 = 163;

    /// Metadata operations: 64..=68 (internal) and 128..=150.
    pub fn is_metadata(op: u8) -> bool {
        (64..=68).contains(&op) || (128..=150).contains(&op) && op != DELETE_SEGMENTS
    }

    /// Whether the byte names any operation a client's decoder accepts (0.12's included).
    /// Whether a request of operation `op` changes state the server keeps (everything but
    /// reads, logins and logouts): a 0.12 client may send it again after losing its reply.
    pub fn is_replicated(op: u8) -> bool {
        !matches!(op, REGISTER | NON_REPLICATED | LOGOUT)
    }

    pub fn is_known(op: u8) -> bool {
        matches!(op, 1..=3 | 64..=68 | 128..=150 | 160..=162)
    }
}

/// A stable, lower-case name for a request, for metrics and logs: the NonReplicated code
/// decides for operation 2, the operation byte for the others.
pub fn command_name(op: u8, nr_code: u32) -> &'static str {
    use operation as o;
    match (op, nr_code) {
        (o::NON_REPLICATED, code::PING) => "ping",
        (o::NON_REPLICATED, code::GET_STATS) => "get_stats",
        (o::NON_REPLICATED, code::GET_CLUSTER_METADATA) => "get_cluster_metadata",
        (o::NON_REPLICATED, code::DESCRIBE_OPTIONS) => "describe_options",
        (o::NON_REPLICATED, code::GET_SNAPSHOT_FILE) => "get_snapshot_file",
        (o::NON_REPLICATED, code::GET_ME) => "get_me",
        (o::NON_REPLICATED, code::GET_CLIENT) => "get_client",
        (o::NON_REPLICATED, code::GET_CLIENTS) => "get_clients",
        (o::NON_REPLICATED, code::POLL_MESSAGES) => "poll_messages",
        (o::NON_REPLICATED, code::FLUSH_UNSAVED_BUFFER) => "flush_unsaved_buffer",
        (o::NON_REPLICATED, code::GET_CONSUMER_OFFSET) => "get_consumer_offset",
        (o::NON_REPLICATED, code::GET_STREAM) => "get_stream",
        (o::NON_REPLICATED, code::GET_STREAMS) => "get_streams",
        (o::NON_REPLICATED, code::GET_TOPIC) => "get_topic",
        (o::NON_REPLICATED, code::GET_TOPICS) => "get_topics",
        (o::NON_REPLICATED, code::GET_USER) => "get_user",
        (o::NON_REPLICATED, code::GET_USERS) => "get_users",
        (o::NON_REPLICATED, code::GET_PERSONAL_ACCESS_TOKENS) => "get_personal_access_tokens",
        (o::NON_REPLICATED, code::GET_CONSUMER_GROUP) => "get_consumer_group",
        (o::NON_REPLICATED, code::GET_CONSUMER_GROUPS) => "get_consumer_groups",
        (o::NON_REPLICATED, code::SYNC_CONSUMER_GROUP) => "sync_consumer_group",
        (o::NON_REPLICATED, code::ATTACH_CONSUMER_SESSION) => "attach_consumer_session",
        (o::NON_REPLICATED, code::GET_POLL_ROUTING) => "get_poll_routing",
        (o::NON_REPLICATED, code::POLL_MESSAGES_ON_PRIMARY) => "poll_messages_on_primary",
        (o::NON_REPLICATED, code::GET_CONSUMER_OFFSET_ROUTING) => "get_consumer_offset_routing",
        (o::NON_REPLICATED, code::BIND_SESSION) => "bind_session",
        (o::NON_REPLICATED, code::GET_METADATA_CHANGES) => "get_metadata_changes",
        (o::NON_REPLICATED, code::GET_PARTITION_ROUTE) => "get_partition_route",
        (o::NON_REPLICATED, code::POLL_MESSAGES_DEFERRED) => "poll_messages_deferred",
        (o::NON_REPLICATED, code::CANCEL_DEFERRED_REQUEST) => "cancel_deferred_request",
        (o::NON_REPLICATED, _) => "other_query",
        (o::REGISTER, _) => "login",
        (o::LOGOUT, _) => "logout",
        (o::CREATE_STREAM, _) => "create_stream",
        (o::UPDATE_STREAM, _) => "update_stream",
        (o::DELETE_STREAM, _) => "delete_stream",
        (o::PURGE_STREAM, _) => "purge_stream",
        (o::CREATE_TOPIC, _) => "create_topic",
        (o::UPDATE_TOPIC, _) => "update_topic",
        (o::DELETE_TOPIC, _) => "delete_topic",
        (o::PURGE_TOPIC, _) => "purge_topic",
        (o::CREATE_PARTITIONS, _) => "create_partitions",
        (o::DELETE_PARTITIONS, _) => "delete_partitions",
        (o::DELETE_SEGMENTS, _) => "delete_segments",
        (o::CREATE_CONSUMER_GROUP, _) => "create_consumer_group",
        (o::DELETE_CONSUMER_GROUP, _) => "delete_consumer_group",
        (o::CREATE_USER, _) => "create_user",
        (o::UPDATE_USER, _) => "update_user",
        (o::DELETE_USER, _) => "delete_user",
        (o::CHANGE_PASSWORD, _) => "change_password",
        (o::UPDATE_PERMISSIONS, _) => "update_permissions",
        (o::CREATE_PERSONAL_ACCESS_TOKEN, _) => "create_personal_access_token",
        (o::DELETE_PERSONAL_ACCESS_TOKEN, _) => "delete_personal_access_token",
        (o::JOIN_CONSUMER_GROUP, _) => "join_consumer_group",
        (o::LEAVE_CONSUMER_GROUP, _) => "leave_consumer_group",
        (o::UPDATE_RESOURCE, _) => "update_resource",
        (o::SEND_MESSAGES, _) => "send_messages",
        (o::STORE_CONSUMER_OFFSET, _) => "store_consumer_offset",
        (o::DELETE_CONSUMER_OFFSET, _) => "delete_consumer_offset",
        _ => "other",
    }
}
