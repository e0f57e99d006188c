//! Reply bodies, byte by byte as the 0.11 client decodes them (reference section 4).

use crate::constants::{PROTOCOL_VERSION, SERVER_VERSION};
use crate::metadata::Topic;
use crate::reader::Put;

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

/// A successful result section: `count = 0`.
pub fn result_ok(out: &mut Vec<u8>) {
    out.put_u32(0);
}

/// StreamResponse: 33 fixed bytes, the name, an empty options block.
pub fn stream(out: &mut Vec<u8>, id: u32, created_at: u64, topics_count: u32, usage: Usage, name: &str) {
    out.put_u32(id);
    out.put_u64(created_at);
    out.put_u32(topics_count);
    out.put_u64(usage.size_bytes);
    out.put_u64(usage.messages_count);
    out.put_name(name);
    out.put_u32(0);
}

/// TopicHeader: 50 fixed bytes, the name, the explicit and derived option blocks.
pub fn topic_header(out: &mut Vec<u8>, topic: &Topic, usage: Usage) {
    out.put_u32(topic.id);
    out.put_u64(topic.created_at);
    out.put_u32(topic.partitions.len() as u32);
    out.put_u64(topic.settings.message_expiry_us);
    out.put_u8(topic.settings.compression as u8);
    out.put_u64(topic.settings.max_topic_size_bytes);
    out.put_u64(usage.size_bytes);
    out.put_u64(usage.messages_count);
    out.put_name(&topic.name);
    out.put_u32(topic.settings.explicit.len() as u32);
    out.extend_from_slice(&topic.settings.explicit);
    let derived = topic.settings.derived_options();
    out.put_u32(derived.len() as u32);
    out.extend_from_slice(&derived);
}

/// What a PartitionResponse reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionInfo {
    pub id: u32,
    pub created_at: u64,
    pub segments_count: u32,
    pub current_offset: u64,
    pub usage: Usage,
}

/// PartitionResponse: 40 bytes.
pub fn partition(out: &mut Vec<u8>, info: &PartitionInfo) {
    out.put_u32(info.id);
    out.put_u64(info.created_at);
    out.put_u32(info.segments_count);
    out.put_u64(info.current_offset);
    out.put_u64(info.usage.size_bytes);
    out.put_u64(info.usage.messages_count);
}

/// The login reply after its result section.
pub fn login(out: &mut Vec<u8>, user_id: u32, session: u64) {
    result_ok(out);
    out.put_u32(user_id);
    out.put_u64(session);
    out.put_u32(PROTOCOL_VERSION);
    out.put_name(SERVER_VERSION);
}

/// The 16-byte prefix of a poll reply; batch records follow it.
pub fn poll_prefix(out: &mut Vec<u8>, partition_id: u32, current_offset: u64, messages_count: u32) {
    out.put_u32(partition_id);
    out.put_u64(current_offset);
    out.put_u32(messages_count);
}

/// The body of a send confirmation: one `[stream][topic][partition][base_offset]` entry.
pub fn send_confirmation(out: &mut Vec<u8>, stream_id: u32, topic_id: u32, partition_id: u32, base_offset: u64) {
    out.put_u32(1);
    out.put_u32(stream_id);
    out.put_u32(topic_id);
    out.put_u32(partition_id);
    out.put_u64(base_offset);
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
    ClusterNode { name: "rill-node".into(), ip: ip.into(), ports, role: 0, status: 0 }
}

/// One node of cluster metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNode {
    pub name: String,
    pub ip: String,
    pub ports: NodePorts,
    /// 0 leader, 1 follower.
    pub role: u8,
    /// 0 healthy, 1 starting, 3 unreachable.
    pub status: u8,
}

/// DESCRIBE_OPTIONS: `[count u32]`, then per key `[key WireName][kind u8][default_len u32]
/// [default][description_len u32][description UTF-8]`.
pub fn option_catalog(out: &mut Vec<u8>, catalog: &[crate::topic_options::OptionSpec]) {
    out.put_u32(catalog.len() as u32);
    for spec in catalog {
        out.put_name(spec.key);
        out.put_u8(spec.kind);
        out.put_u32(spec.default.len() as u32);
        out.extend_from_slice(&spec.default);
        out.put_long_string(spec.description);
    }
}

/// Cluster metadata: the cluster's name and every node with its role.
pub fn cluster(out: &mut Vec<u8>, name: &str, nodes: &[ClusterNode]) {
    out.put_long_string(name);
    out.put_u32(nodes.len() as u32);
    for node in nodes {
        cluster_node(out, node);
    }
}

/// One node entry: `[name][ip]` as long strings, four u16 ports (tcp, quic, http,
/// websocket), role, status.
fn cluster_node(out: &mut Vec<u8>, node: &ClusterNode) {
    out.put_long_string(&node.name);
    out.put_long_string(&node.ip);
    for port in [node.ports.tcp, node.ports.quic, node.ports.http, node.ports.websocket] {
        out.put_u16(port);
    }
    out.put_u8(node.role);
    out.put_u8(node.status);
}

/// GET_POLL_ROUTING and GET_CONSUMER_OFFSET_ROUTING: the coordinator's identity the client
/// echoes back in ATTACH_CONSUMER_SESSION (`[client u128][session u64][watermark u64]`),
/// then the node entry of the node to run the request on.
pub fn routing(out: &mut Vec<u8>, client: u128, session: u64, metadata_watermark: u64, node: &ClusterNode) {
    out.extend_from_slice(&client.to_le_bytes());
    out.put_u64(session);
    out.put_u64(metadata_watermark);
    cluster_node(out, node);
}

/// One connected client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientInfo {
    pub client_id: u32,
    pub user_id: Option<u32>,
    pub transport: u8,
    pub address: String,
}

/// ClientResponse: the client and how many consumer groups it is a member of.
pub fn client(out: &mut Vec<u8>, info: &ClientInfo, groups_count: u32) {
    out.put_u32(info.client_id);
    out.put_u32(info.user_id.unwrap_or(u32::MAX));
    out.put_u8(info.transport);
    out.put_long_string(&info.address);
    out.put_u32(groups_count);
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

pub fn stats(out: &mut Vec<u8>, stats: &Stats) {
    out.put_u32(stats.process_id);
    out.extend_from_slice(&stats.cpu_usage.to_le_bytes());
    out.extend_from_slice(&stats.total_cpu_usage.to_le_bytes());
    for value in [
        stats.memory_usage,
        stats.total_memory,
        stats.available_memory,
        stats.run_time_us,
        stats.start_time_us,
        stats.read_bytes,
        stats.written_bytes,
        stats.messages_size_bytes,
    ] {
        out.put_u64(value);
    }
    for value in [stats.streams_count, stats.topics_count, stats.partitions_count, stats.segments_count] {
        out.put_u32(value);
    }
    out.put_u64(stats.messages_count);
    out.put_u32(stats.clients_count);
    out.put_u32(stats.consumer_groups_count);
    for text in [&stats.hostname, &stats.os_name, &stats.os_version, &stats.kernel_version] {
        out.put_long_string(text);
    }
    out.put_long_string(SERVER_VERSION);
    out.put_u32(9 << 10);
    out.put_u32(0);
    out.put_u32(stats.threads_count);
    out.put_u64(stats.free_disk_space);
    out.put_u64(stats.total_disk_space);
}

/// UserResponse: `[id][created_at][status][username][options_len = 0]`.
pub fn user(out: &mut Vec<u8>, user: &crate::metadata::User) {
    out.put_u32(user.id);
    out.put_u64(user.created_at);
    out.put_u8(user.status);
    out.put_name(&user.username);
    out.put_u32(0);
}

/// UserDetails: the UserResponse, then the permissions (`00 00 00 00` when none).
pub fn user_details(out: &mut Vec<u8>, user: &crate::metadata::User) {
    self::user(out, user);
    match &user.permissions {
        None => out.put_u32(0),
        Some(permissions) => crate::permissions::put_present(out, permissions),
    }
}

/// ConsumerGroupResponse: `[id][partitions_count][members_count][name]`.
pub fn consumer_group(out: &mut Vec<u8>, group_id: u32, partitions_count: u32, members_count: u32, name: &str) {
    out.put_u32(group_id);
    out.put_u32(partitions_count);
    out.put_u32(members_count);
    out.put_name(name);
}

/// One member of ConsumerGroupDetails: `[member_id][n][partition_id × n]`.
pub fn group_member(out: &mut Vec<u8>, member_id: u32, partitions: &[u32]) {
    out.put_u32(member_id);
    out.put_u32(partitions.len() as u32);
    for partition in partitions {
        out.put_u32(*partition);
    }
}

/// ClientDetails: the ClientResponse with its memberships, then `[stream][topic][group]`
/// for each of them.
pub fn client_details(out: &mut Vec<u8>, info: &ClientInfo, groups: &[(u32, u32, u32)]) {
    out.put_u32(info.client_id);
    out.put_u32(info.user_id.unwrap_or(u32::MAX));
    out.put_u8(info.transport);
    out.put_long_string(&info.address);
    out.put_u32(groups.len() as u32);
    for (stream_id, topic_id, group_id) in groups {
        out.put_u32(*stream_id);
        out.put_u32(*topic_id);
        out.put_u32(*group_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topic_options::TopicSettings;

    #[test]
    fn stream_matches_the_reference_example() {
        let mut out = Vec::new();
        stream(&mut out, 0, 1_700_000_000_000_000, 1, Usage { size_bytes: 1024, messages_count: 10 }, "orders");
        assert_eq!(out.len(), 43);
        assert_eq!(&out[4..12], &[0x00, 0x40, 0x1e, 0x18, 0x24, 0x0a, 0x06, 0x00]);
        assert_eq!(out[32], 6);
    }

    #[test]
    fn topic_header_has_fixed_layout() {
        let settings = TopicSettings::default();
        let topic = Topic {
            id: 0,
            name: "events".into(),
            created_at: 1_700_000_000_000_000,
            settings,
            partitions: vec![0],
            consumer_groups: Default::default(),
            next_group_id: 0,
            memberships: Default::default(),
        };
        let mut out = Vec::new();
        topic_header(&mut out, &topic, Usage { size_bytes: 1024, messages_count: 10 });
        assert_eq!(&out[12..16], &1u32.to_le_bytes());
        assert_eq!(&out[16..24], &[0; 8], "message expiry: the server default");
        assert_eq!(out[24], 1);
        assert_eq!(out[49], 6);
        assert_eq!(&out[56..60], &[0; 4]);
    }

    #[test]
    fn stats_numeric_part_is_108_bytes() {
        let mut out = Vec::new();
        stats(&mut out, &Stats::default());
        assert_eq!(&out[108..112], &[0; 4]);
        assert_eq!(out.len(), 108 + 4 * 5 + SERVER_VERSION.len() + 4 + 4 + 4 + 16);
    }

    #[test]
    fn option_catalog_entries_are_length_prefixed() {
        let spec = crate::topic_options::OptionSpec {
            key: "ab",
            kind: 11,
            default: 7u32.to_le_bytes().to_vec(),
            description: "xyz",
        };
        let mut out = Vec::new();
        option_catalog(&mut out, &[spec]);
        let expected: Vec<u8> = [
            &1u32.to_le_bytes()[..],
            &[2, b'a', b'b', 11],
            &4u32.to_le_bytes(),
            &7u32.to_le_bytes(),
            &3u32.to_le_bytes(),
            b"xyz",
        ]
        .concat();
        assert_eq!(out, expected);
    }
}
