//! Read-only use cases: streams, topics, stats, clients and cluster metadata. They read the
//! shard's lock-free metadata view and the shared partition counters; no shard is asked.

use rill_domain::Namespace;
use rill_domain::answer::{
    Answer, ClientDetails, ClusterNode, GroupDetails, GroupInfo, PartitionInfo, Stats, StreamDetails, StreamInfo,
    TopicDetails, TopicInfo, Usage, single_node,
};
use rill_domain::consumer_group::GroupKey;
use rill_domain::identifier::Identifier;
use rill_domain::metadata::{Metadata, Topic};
use rill_domain::version::Dialect;
use rill_domain::wire::command::TopicRef;

use super::Shard;
use crate::ports::HostMetrics;
use crate::ports::{Env, MetadataRead};
use crate::shared::Shared;
use std::sync::atomic::Ordering;

fn topic_usage(shared: &Shared, stream_id: u32, topic: &Topic) -> Usage {
    let mut usage = Usage::default();
    for partition_id in 0..topic.partitions.len() as u32 {
        if let Some(stats) =
            Namespace::new(stream_id, topic.id, partition_id).and_then(|ns| shared.partitions.stats(ns))
        {
            usage += stats.usage();
        }
    }
    usage
}

fn stream_info(metadata: &Metadata, shared: &Shared, stream_id: u32) -> Option<StreamInfo> {
    let stream = metadata.streams().find(|s| s.id == stream_id)?;
    let mut usage = Usage::default();
    for topic in stream.topics.values() {
        usage += topic_usage(shared, stream_id, topic);
    }
    let topics_count = stream.topics.len() as u32;
    let envelope = rill_domain::stream_options::stored_envelope(&stream.options).ok().flatten();
    Some(StreamInfo {
        id: stream.id,
        created_at: stream.created_at,
        topics_count,
        usage,
        name: stream.name.clone(),
        derived_options: rill_domain::stream_options::derived_options(envelope),
    })
}

/// A stream with a header for each of its topics.
pub(super) fn stream_details(metadata: &Metadata, shared: &Shared, stream_id: u32) -> Option<StreamDetails> {
    let info = stream_info(metadata, shared, stream_id)?;
    let stream = metadata.streams().find(|s| s.id == stream_id)?;
    let topics = stream.topics.values().map(|t| TopicInfo::of(t, topic_usage(shared, stream_id, t))).collect();
    Some(StreamDetails { stream: info, topics })
}

/// A topic with every partition.
pub(super) fn topic_details(
    metadata: &Metadata,
    shared: &Shared,
    stream_id: u32,
    topic_id: u32,
) -> Option<TopicDetails> {
    let topic = metadata.topic_by_ids(stream_id, topic_id)?;
    let mut partitions = Vec::with_capacity(topic.partitions.len());
    for (partition_id, created_at) in topic.partitions.iter().enumerate() {
        let mut info = PartitionInfo { id: partition_id as u32, created_at: *created_at, ..Default::default() };
        if let Some(stats) =
            Namespace::new(stream_id, topic_id, partition_id as u32).and_then(|ns| shared.partitions.stats(ns))
        {
            info.segments_count = stats.segments_count();
            info.current_offset = stats.current_offset();
            info.usage = stats.usage();
            info.context.incarnation = stats.incarnation();
        }
        info.context.metadata_op = shared.replica.commit();
        info.replica_id = shared.config.membership.replica_id;
        partitions.push(info);
    }
    Some(TopicDetails { topic: TopicInfo::of(topic, topic_usage(shared, stream_id, topic)), partitions })
}

/// A consumer group with each member and its partitions.
pub(super) fn group_details(metadata: &Metadata, key: GroupKey) -> Option<GroupDetails> {
    let topic = metadata.topic_by_ids(key.stream_id, key.topic_id)?;
    let name = topic.consumer_groups.get(&key.group_id)?;
    let members = metadata.group_state(key).map(|g| g.members()).unwrap_or_default();
    let group = GroupInfo {
        id: key.group_id,
        partitions_count: topic.partitions.len() as u32,
        members_count: members.len() as u32,
        name: name.clone(),
    };
    let members = members.into_iter().map(|member| (member.client_id, member.partitions)).collect();
    Some(GroupDetails { group, members })
}

impl<E: Env> Shard<E> {
    /// GET_STREAM: details, or none when the stream does not exist.
    pub fn get_stream(&self, stream: &Identifier) -> Answer {
        Answer::Stream(self.metadata.read(|metadata| {
            let stream_id = metadata.stream_id(stream).ok()?;
            stream_details(metadata, &self.shared, stream_id)
        }))
    }

    pub fn get_streams(&self) -> Answer {
        Answer::Streams(self.metadata.read(|metadata| {
            metadata.streams().filter_map(|stream| stream_info(metadata, &self.shared, stream.id)).collect()
        }))
    }

    /// GET_TOPIC: details, or none when the stream or topic does not exist.
    pub fn get_topic(&self, topic: &TopicRef) -> Answer {
        Answer::Topic(self.metadata.read(|metadata| {
            let (stream_id, topic_id) = metadata.topic_ids(topic).ok()?;
            topic_details(metadata, &self.shared, stream_id, topic_id)
        }))
    }

    /// GET_TOPICS: every topic of the stream; a missing stream has none.
    pub fn get_topics(&self, stream: &Identifier) -> Answer {
        Answer::Topics(self.metadata.read(|metadata| {
            let Ok(stream) = metadata.stream(stream) else { return Vec::new() };
            stream
                .topics
                .values()
                .map(|topic| TopicInfo::of(topic, topic_usage(&self.shared, stream.id, topic)))
                .collect()
        }))
    }

    pub fn get_stats(&self) -> Answer {
        let host = &self.shared.config.host;
        let sample = self.host_metrics.sample();
        let data = &self.shared.telemetry.data;
        let mut stats = Stats {
            process_id: std::process::id(),
            cpu_usage: sample.cpu_usage,
            total_cpu_usage: sample.total_cpu_usage,
            memory_usage: sample.memory_usage,
            total_memory: if sample.total_memory > 0 { sample.total_memory } else { host.total_memory },
            available_memory: sample.available_memory,
            read_bytes: sample.read_bytes,
            written_bytes: sample.written_bytes,
            run_time_us: self.now_us().saturating_sub(self.shared.start_time_us),
            start_time_us: self.shared.start_time_us,
            clients_count: self.shared.sessions.clients.count(),
            hostname: host.hostname.clone(),
            os_name: host.os_name.clone(),
            os_version: host.os_version.clone(),
            kernel_version: host.kernel_version.clone(),
            threads_count: sample.threads_count.max(self.shared.shard_count as u32),
            free_disk_space: data.disk_available.load(Ordering::Relaxed),
            total_disk_space: data.disk_total.load(Ordering::Relaxed),
            ..Stats::default()
        };
        self.metadata.read(|metadata| {
            for stream in metadata.streams() {
                stats.streams_count += 1;
                for topic in stream.topics.values() {
                    stats.topics_count += 1;
                    stats.consumer_groups_count += topic.consumer_groups.len() as u32;
                    stats.partitions_count += topic.partitions.len() as u32;
                    for partition_id in 0..topic.partitions.len() as u32 {
                        if let Some(partition) = Namespace::new(stream.id, topic.id, partition_id)
                            .and_then(|ns| self.shared.partitions.stats(ns))
                        {
                            let usage = partition.usage();
                            stats.messages_count += usage.messages_count;
                            stats.messages_size_bytes += usage.size_bytes;
                            stats.segments_count += partition.segments_count();
                        }
                    }
                }
            }
        });
        Answer::Stats(Box::new(stats))
    }

    /// The option catalog of a create command's scope (DESCRIBE_OPTIONS).
    pub fn describe_options(&self, scope: u8) -> Answer {
        Answer::Options(rill_domain::topic_options::option_catalog(scope))
    }

    /// One healthy leader on a single node; in a cluster, every roster node with the role
    /// this node's replica currently sees (the primary of its view leads). A 0.12 client
    /// opens a session on every node listed and sends metadata to the leader; sessions are
    /// this node's own, so it is told of this node alone, as the leader.
    pub fn get_cluster_metadata(&self, dialect: Dialect) -> Answer {
        let name = if self.shared.config.membership.clustered() { "rill-cluster" } else { "single-node" };
        let mut nodes = self.cluster_nodes();
        if dialect == Dialect::V12 {
            let me = self.shared.config.membership.replica_id;
            nodes.retain(|node| node.replica_id == me);
            nodes.iter_mut().for_each(|node| node.role = 0);
        }
        Answer::Cluster { name: name.to_owned(), nodes }
    }

    /// Every roster node as cluster metadata lists it, the current view's primary as leader
    /// (one healthy leader on a single node).
    pub(crate) fn cluster_nodes(&self) -> Vec<ClusterNode> {
        let config = &self.shared.config;
        if !config.membership.clustered() {
            return vec![single_node(&config.advertised_ip, config.ports)];
        }
        let role = self.shared.replica.role();
        let me = config.membership.replica_id as usize;
        self.shared
            .config
            .cluster_nodes
            .iter()
            .enumerate()
            .map(|(index, (ip, ports))| ClusterNode {
                replica_id: index as u8,
                name: format!("rill-node-{index}"),
                ip: ip.clone(),
                ports: *ports,
                role: if role.normal && role.primary as usize == index { 0 } else { 1 },
                // Healthy, or Unreachable when the peer holds no connection to this node.
                status: if index == me || self.shared.replica.peer_connected(index as u8) { 0 } else { 3 },
            })
            .collect()
    }

    /// ClientDetails of one client, or none when it is not connected.
    pub fn get_client(&self, client_id: u32) -> Answer {
        Answer::Client(
            self.shared
                .sessions
                .clients
                .get(client_id)
                .map(|client| ClientDetails { client, groups: self.memberships(client_id) }),
        )
    }

    pub fn get_clients(&self) -> Answer {
        let clients = self.shared.sessions.clients.all().into_iter();
        Answer::Clients(clients.map(|info| (info.clone(), self.memberships(info.client_id).len() as u32)).collect())
    }
}
