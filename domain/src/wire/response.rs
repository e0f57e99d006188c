//! Reply bodies, byte by byte as each generation's client decodes them (0.11: reference
//! section 4; 0.12: `docs/protocol-versions.md`): the binary encoding of a use case's
//! `Answer`. The dialect changes only the layouts named where they are written.

use crate::answer::{
    Answer, ClientDetails, ClientInfo, ClusterNode, ConsumerOffset, Created, GroupDetails, GroupInfo, PartitionContext,
    PartitionInfo, PartitionRoute, PollHead, Routing, SendConfirmation, Stats, StreamDetails, StreamInfo, TopicDetails,
    TopicInfo, UserDetails, UserInfo,
};
use crate::constants::SERVER_VERSION;
use crate::reader::Put;
use crate::version::Dialect;

/// A successful result section: `count = 0`.
pub fn result_ok(out: &mut Vec<u8>) {
    out.put_u32(0);
}

/// Encodes an answer as its reply body in `dialect`'s layout.
pub fn encode(dialect: Dialect, answer: &Answer, out: &mut Vec<u8>) {
    let v12 = dialect == Dialect::V12;
    match answer {
        Answer::Nothing => {}
        Answer::Done => result_ok(out),
        Answer::Created(created) => {
            result_ok(out);
            match created {
                Created::Stream(details) => stream_details(out, details, v12),
                Created::Topic(details) => topic_details(out, details, v12),
                Created::Group(details) => group_details(out, details),
                Created::User(details) => user_details(out, details, v12),
            }
        }
        Answer::RawToken(token) => {
            result_ok(out);
            out.put_name(token);
        }
        Answer::Stream(details) => details.iter().for_each(|details| stream_details(out, details, v12)),
        Answer::Streams(streams) => streams.iter().for_each(|info| stream(out, info, v12)),
        Answer::Topic(details) => details.iter().for_each(|details| topic_details(out, details, v12)),
        Answer::Topics(topics) => {
            out.put_u32(topics.len() as u32);
            topics.iter().for_each(|info| topic_header(out, info, v12));
        }
        Answer::Group(details) => details.iter().for_each(|details| group_details(out, details)),
        Answer::Groups(groups) => groups.iter().for_each(|info| consumer_group(out, info)),
        Answer::User(details) => details.iter().for_each(|details| user_details(out, details, v12)),
        Answer::Users(users) => users.iter().for_each(|info| user(out, info, v12)),
        Answer::Tokens(tokens) => {
            for token in tokens {
                out.put_name(&token.name);
                out.put_u64(token.expiry_at);
            }
        }
        Answer::Client(details) => details.iter().for_each(|details| client_details(out, details)),
        Answer::Clients(clients) => clients.iter().for_each(|(info, groups)| client(out, info, *groups)),
        Answer::Stats(figures) => stats(out, figures),
        Answer::Cluster { name, nodes } => cluster(out, name, nodes, v12),
        Answer::Options(catalog) => option_catalog(out, catalog, v12),
        Answer::Offset(offset) => offset.iter().for_each(|offset| consumer_offset(out, offset)),
        Answer::Sent(confirmation) => send_confirmation(out, confirmation),
        Answer::EmptyPoll(head) => poll_head(dialect, out, head),
        Answer::Routing(to) => routing(out, to),
        Answer::Route(route) => partition_route(out, route),
        Answer::Synced(assignment) => {
            if let Some((generation, partitions)) = assignment {
                out.put_u64(*generation);
                out.put_u32(partitions.len() as u32);
                partitions.iter().for_each(|partition| out.put_u32(*partition));
            }
        }
        Answer::Snapshot(bytes) | Answer::MetadataChanges(bytes) => out.extend_from_slice(bytes),
    }
}

/// StreamResponse: 33 fixed bytes, the name, an empty options block (0.12: and the derived
/// block: the stream key's source and fingerprints).
fn stream(out: &mut Vec<u8>, info: &StreamInfo, v12: bool) {
    out.put_u32(info.id);
    out.put_u64(info.created_at);
    out.put_u32(info.topics_count);
    out.put_u64(info.usage.size_bytes);
    out.put_u64(info.usage.messages_count);
    out.put_name(&info.name);
    out.put_u32(0);
    if v12 {
        out.put_u32(info.derived_options.len() as u32);
        out.extend_from_slice(&info.derived_options);
    }
}

/// StreamDetails: the stream, then a header for each of its topics.
fn stream_details(out: &mut Vec<u8>, details: &StreamDetails, v12: bool) {
    stream(out, &details.stream, v12);
    details.topics.iter().for_each(|info| topic_header(out, info, v12));
}

/// TopicHeader: 50 fixed bytes, the name, the explicit and derived option blocks. 0.12
/// drops expiry, compression and size cap from the fixed part (33 bytes): they are in the
/// option blocks already.
fn topic_header(out: &mut Vec<u8>, info: &TopicInfo, v12: bool) {
    out.put_u32(info.id);
    out.put_u64(info.created_at);
    out.put_u32(info.partitions_count);
    if !v12 {
        out.put_u64(info.message_expiry_us);
        out.put_u8(info.compression);
        out.put_u64(info.max_topic_size_bytes);
    }
    out.put_u64(info.usage.size_bytes);
    out.put_u64(info.usage.messages_count);
    out.put_name(&info.name);
    out.put_u32(info.explicit_options.len() as u32);
    out.extend_from_slice(&info.explicit_options);
    out.put_u32(info.derived_options.len() as u32);
    out.extend_from_slice(&info.derived_options);
}

/// TopicDetails: the topic header, then every partition.
fn topic_details(out: &mut Vec<u8>, details: &TopicDetails, v12: bool) {
    topic_header(out, &details.topic, v12);
    details.partitions.iter().for_each(|info| partition(out, info, v12));
}

/// A stored consumer offset: `[partition][current offset][stored offset]`.
fn consumer_offset(out: &mut Vec<u8>, offset: &ConsumerOffset) {
    out.put_u32(offset.partition_id);
    out.put_u64(offset.current_offset);
    out.put_u64(offset.stored_offset);
}

/// PartitionResponse: 40 bytes. 0.12 adds the partition's context (24 bytes) and its
/// replica members, then those in sync (`[count u8][replica id]*` each).
fn partition(out: &mut Vec<u8>, info: &PartitionInfo, v12: bool) {
    out.put_u32(info.id);
    out.put_u64(info.created_at);
    out.put_u32(info.segments_count);
    out.put_u64(info.current_offset);
    out.put_u64(info.usage.size_bytes);
    out.put_u64(info.usage.messages_count);
    if v12 {
        partition_context(out, &info.context);
        for _list in ["members", "in sync"] {
            out.put_u8(1);
            out.put_u8(info.replica_id);
        }
    }
}

/// `[incarnation u64][owner_generation u64][metadata_op u64]`.
fn partition_context(out: &mut Vec<u8>, context: &PartitionContext) {
    out.put_u64(context.incarnation);
    out.put_u64(context.owner_generation);
    out.put_u64(context.metadata_op);
}

/// GET_PARTITION_ROUTE (0.12): `[incarnation u64][metadata_op u64][view u32]
/// [partitions_count u32][primary_replica u8]`.
fn partition_route(out: &mut Vec<u8>, route: &PartitionRoute) {
    out.put_u64(route.incarnation);
    out.put_u64(route.metadata_op);
    out.put_u32(route.view);
    out.put_u32(route.partitions_count);
    out.put_u8(route.primary_replica);
}

/// The login reply after its result section: the protocol version announced is the
/// dialect's own.
pub fn login(dialect: Dialect, out: &mut Vec<u8>, user_id: u32, session: u64) {
    result_ok(out);
    session_binding(dialect, out, user_id, session);
}

/// BIND_SESSION's reply (0.12): the login reply's fields without the result section, since
/// the bind is a non-replicated request.
pub fn session_binding(dialect: Dialect, out: &mut Vec<u8>, user_id: u32, session: u64) {
    out.put_u32(user_id);
    out.put_u64(session);
    out.put_u32(dialect.server_version());
    out.put_name(SERVER_VERSION);
}

/// The bytes of a poll reply before its batch records: 16 in 0.11, 40 in 0.12 (the
/// partition context the poll was served under).
pub fn poll_prefix_size(dialect: Dialect) -> usize {
    match dialect {
        Dialect::V11 => 16,
        Dialect::V12 => 40,
    }
}

/// Reads back the 0.12 prefix [`poll_head`] wrote (40 bytes), as a fetch and a waiting poll
/// read the poll frames their owners answer with.
pub fn read_poll_head(prefix: &[u8; 40]) -> PollHead {
    let u64_at = |at: usize| u64::from_le_bytes(prefix[at..at + 8].try_into().expect("eight bytes"));
    PollHead {
        partition_id: u32::from_le_bytes(prefix[..4].try_into().expect("four bytes")),
        current_offset: u64_at(4),
        messages_count: u32::from_le_bytes(prefix[12..16].try_into().expect("four bytes")),
        context: PartitionContext { incarnation: u64_at(16), owner_generation: u64_at(24), metadata_op: u64_at(32) },
    }
}

/// A poll reply's prefix; batch records follow it.
pub fn poll_head(dialect: Dialect, out: &mut Vec<u8>, head: &PollHead) {
    out.put_u32(head.partition_id);
    out.put_u64(head.current_offset);
    out.put_u32(head.messages_count);
    if dialect == Dialect::V12 {
        partition_context(out, &head.context);
    }
}

/// The body of a send confirmation: one `[stream][topic][partition][base_offset]` entry.
fn send_confirmation(out: &mut Vec<u8>, confirmation: &SendConfirmation) {
    out.put_u32(1);
    out.put_u32(confirmation.stream_id);
    out.put_u32(confirmation.topic_id);
    out.put_u32(confirmation.partition_id);
    out.put_u64(confirmation.base_offset);
}

/// DESCRIBE_OPTIONS: `[count u32]`, then per key `[key WireName][kind u8][default_len u32]
/// [default][description_len u32][description UTF-8]`.
/// 0.12 adds `[flags u8]` after the kind (updatable, resettable, secret, read-only,
/// critical).
fn option_catalog(out: &mut Vec<u8>, catalog: &[crate::topic_options::OptionSpec], v12: bool) {
    // A 0.11 stream create carries no options: its catalog names none.
    let served = |spec: &&crate::topic_options::OptionSpec| v12 || spec.key != crate::stream_options::ENCRYPTION_KEY;
    out.put_u32(catalog.iter().filter(served).count() as u32);
    for spec in catalog.iter().filter(served) {
        out.put_name(spec.key);
        out.put_u8(spec.kind);
        if v12 {
            out.put_u8(spec.flags());
        }
        out.put_u32(spec.default.len() as u32);
        out.extend_from_slice(&spec.default);
        out.put_long_string(spec.description);
    }
}

/// Cluster metadata: the cluster's name and every node with its role.
fn cluster(out: &mut Vec<u8>, name: &str, nodes: &[ClusterNode], v12: bool) {
    out.put_long_string(name);
    out.put_u32(nodes.len() as u32);
    for node in nodes {
        if v12 {
            out.put_u8(node.replica_id);
        }
        cluster_node(out, node);
    }
}

/// One node entry: `[name][ip]` as long strings, four u16 ports (tcp, quic, http,
/// websocket), role, status (0.12 puts the replica id before it).
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
fn routing(out: &mut Vec<u8>, to: &Routing) {
    out.extend_from_slice(&to.client.to_le_bytes());
    out.put_u64(to.session);
    out.put_u64(to.metadata_watermark);
    cluster_node(out, &to.node);
}

/// ClientResponse: the client and how many consumer groups it is a member of.
fn client(out: &mut Vec<u8>, info: &ClientInfo, groups_count: u32) {
    out.put_u32(info.client_id);
    out.put_u32(info.user_id.unwrap_or(u32::MAX));
    out.put_u8(info.transport);
    out.put_long_string(&info.address);
    out.put_u32(groups_count);
}

fn stats(out: &mut Vec<u8>, stats: &Stats) {
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

/// UserResponse: `[id][created_at][status][username][options_len = 0]` (0.12: and an
/// empty derived block).
fn user(out: &mut Vec<u8>, info: &UserInfo, v12: bool) {
    out.put_u32(info.id);
    out.put_u64(info.created_at);
    out.put_u8(info.status);
    out.put_name(&info.username);
    out.put_u32(0);
    if v12 {
        out.put_u32(0);
    }
}

/// UserDetails: the UserResponse, then the permissions (`00 00 00 00` when none).
fn user_details(out: &mut Vec<u8>, details: &UserDetails, v12: bool) {
    user(out, &details.user, v12);
    match &details.permissions {
        None => out.put_u32(0),
        Some(permissions) => crate::permissions::put_present(out, permissions),
    }
}

/// ConsumerGroupResponse: `[id][partitions_count][members_count][name]`.
fn consumer_group(out: &mut Vec<u8>, info: &GroupInfo) {
    out.put_u32(info.id);
    out.put_u32(info.partitions_count);
    out.put_u32(info.members_count);
    out.put_name(&info.name);
}

/// ConsumerGroupDetails: the group, then each member as `[member_id][n][partition_id × n]`.
fn group_details(out: &mut Vec<u8>, details: &GroupDetails) {
    consumer_group(out, &details.group);
    for (member_id, partitions) in &details.members {
        out.put_u32(*member_id);
        out.put_u32(partitions.len() as u32);
        partitions.iter().for_each(|partition| out.put_u32(*partition));
    }
}

/// ClientDetails: the ClientResponse with its memberships, then `[stream][topic][group]`
/// for each of them.
fn client_details(out: &mut Vec<u8>, details: &ClientDetails) {
    let info = &details.client;
    out.put_u32(info.client_id);
    out.put_u32(info.user_id.unwrap_or(u32::MAX));
    out.put_u8(info.transport);
    out.put_long_string(&info.address);
    out.put_u32(details.groups.len() as u32);
    for group in &details.groups {
        out.put_u32(group.stream_id);
        out.put_u32(group.topic_id);
        out.put_u32(group.group_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answer::Usage;
    use crate::metadata::Topic;
    use crate::topic_options::TopicSettings;

    #[test]
    fn a_0_12_poll_prefix_reads_back_as_written() {
        let context = PartitionContext { incarnation: 7, owner_generation: 8, metadata_op: 9 };
        let head = PollHead { partition_id: 3, current_offset: 41, messages_count: 5, context };
        let mut out = Vec::new();
        poll_head(Dialect::V12, &mut out, &head);
        assert_eq!(read_poll_head(out.as_slice().try_into().unwrap()), head);
    }

    #[test]
    fn stream_matches_the_reference_example() {
        let mut out = Vec::new();
        let usage = Usage { size_bytes: 1024, messages_count: 10 };
        let info = StreamInfo {
            id: 0,
            created_at: 1_700_000_000_000_000,
            topics_count: 1,
            usage,
            name: "orders".into(),
            derived_options: Vec::new(),
        };
        stream(&mut out, &info, false);
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
            created_op: 2,
            settings,
            partitions: vec![0],
            consumer_groups: Default::default(),
            next_group_id: 0,
            memberships: Default::default(),
        };
        let mut out = Vec::new();
        topic_header(&mut out, &TopicInfo::of(&topic, Usage { size_bytes: 1024, messages_count: 10 }), false);
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
        option_catalog(&mut out, &[spec], false);
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
