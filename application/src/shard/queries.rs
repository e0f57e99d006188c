//! Read-only use cases: streams, topics, stats, clients and cluster metadata. They read the
//! shard's lock-free metadata view and the shared partition counters; no shard is asked.

use rill_domain::Namespace;
use rill_domain::identifier::Identifier;
use rill_domain::metadata::{Metadata, Topic};
use rill_domain::wire::command::TopicRef;
use rill_domain::wire::response::{self, PartitionInfo, Stats, Usage};

use super::Shard;
use crate::ports::HostMetrics;
use crate::ports::{Env, MetadataRead, ShardReply};
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

fn encode_stream(out: &mut Vec<u8>, metadata: &Metadata, shared: &Shared, stream_id: u32) {
    let Some(stream) = metadata.streams().find(|s| s.id == stream_id) else { return };
    let mut usage = Usage::default();
    for topic in stream.topics.values() {
        usage += topic_usage(shared, stream_id, topic);
    }
    response::stream(out, stream.id, stream.created_at, stream.topics.len() as u32, usage, &stream.name);
}

/// StreamDetails: the stream, then a header for each of its topics.
pub(super) fn encode_stream_details(out: &mut Vec<u8>, metadata: &Metadata, shared: &Shared, stream_id: u32) {
    encode_stream(out, metadata, shared, stream_id);
    let Some(stream) = metadata.streams().find(|s| s.id == stream_id) else { return };
    for topic in stream.topics.values() {
        response::topic_header(out, topic, topic_usage(shared, stream_id, topic));
    }
}

/// TopicDetails: the topic header, then every partition.
pub(super) fn encode_topic_details(
    out: &mut Vec<u8>,
    metadata: &Metadata,
    shared: &Shared,
    stream_id: u32,
    topic_id: u32,
) {
    let Some(topic) = metadata.topic_by_ids(stream_id, topic_id) else { return };
    response::topic_header(out, topic, topic_usage(shared, stream_id, topic));
    for (partition_id, created_at) in topic.partitions.iter().enumerate() {
        let mut info = PartitionInfo { id: partition_id as u32, created_at: *created_at, ..Default::default() };
        if let Some(stats) =
            Namespace::new(stream_id, topic_id, partition_id as u32).and_then(|ns| shared.partitions.stats(ns))
        {
            info.segments_count = stats.segments_count();
            info.current_offset = stats.current_offset();
            info.usage = stats.usage();
        }
        response::partition(out, &info);
    }
}

/// ConsumerGroupDetails: the group, then each member with its partitions.
pub(super) fn encode_group_details(out: &mut Vec<u8>, metadata: &Metadata, key: rill_domain::consumer_group::GroupKey) {
    let Some(topic) = metadata.topic_by_ids(key.stream_id, key.topic_id) else { return };
    let Some(name) = topic.consumer_groups.get(&key.group_id) else { return };
    let members = metadata.group_state(key).map(|g| g.members()).unwrap_or_default();
    response::consumer_group(out, key.group_id, topic.partitions.len() as u32, members.len() as u32, name);
    for member in &members {
        response::group_member(out, member.client_id, &member.partitions);
    }
}

impl<E: Env> Shard<E> {
    /// GET_STREAM: details, or an empty body when the stream does not exist.
    pub fn get_stream(&self, stream: &Identifier) -> Vec<u8> {
        self.metadata.read(|metadata| {
            let mut out = Vec::new();
            if let Ok(stream_id) = metadata.stream_id(stream) {
                encode_stream_details(&mut out, metadata, &self.shared, stream_id);
            }
            out
        })
    }

    pub fn get_streams(&self) -> Vec<u8> {
        self.metadata.read(|metadata| {
            let mut out = Vec::new();
            for stream in metadata.streams() {
                encode_stream(&mut out, metadata, &self.shared, stream.id);
            }
            out
        })
    }

    /// GET_TOPIC: details, or an empty body when the stream or topic does not exist.
    pub fn get_topic(&self, topic: &TopicRef) -> Vec<u8> {
        self.metadata.read(|metadata| {
            let mut out = Vec::new();
            if let Ok((stream_id, topic_id)) = metadata.topic_ids(topic) {
                encode_topic_details(&mut out, metadata, &self.shared, stream_id, topic_id);
            }
            out
        })
    }

    /// GET_TOPICS: `[count u32]` then the headers; a missing stream has none.
    pub fn get_topics(&self, stream: &Identifier) -> Vec<u8> {
        self.metadata.read(|metadata| {
            let Ok(stream) = metadata.stream(stream) else { return 0u32.to_le_bytes().to_vec() };
            let mut out = (stream.topics.len() as u32).to_le_bytes().to_vec();
            for topic in stream.topics.values() {
                response::topic_header(&mut out, topic, topic_usage(&self.shared, stream.id, topic));
            }
            out
        })
    }

    pub fn get_stats(&self) -> Vec<u8> {
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
        let mut out = Vec::new();
        response::stats(&mut out, &stats);
        out
    }

    /// The option catalog of a create command's scope (DESCRIBE_OPTIONS).
    pub fn describe_options(&self, scope: u8) -> Vec<u8> {
        let mut out = Vec::new();
        response::option_catalog(&mut out, &rill_domain::topic_options::option_catalog(scope));
        out
    }

    /// One healthy leader on a single node; in a cluster, every roster node with the role
    /// this node's replica currently sees (the primary of its view leads).
    pub fn get_cluster_metadata(&self) -> Vec<u8> {
        let name = if self.shared.config.membership.clustered() { "rill-cluster" } else { "single-node" };
        let mut out = Vec::new();
        response::cluster(&mut out, name, &self.cluster_nodes());
        out
    }

    /// Every roster node as cluster metadata lists it, the current view's primary as leader
    /// (one healthy leader on a single node).
    pub(crate) fn cluster_nodes(&self) -> Vec<response::ClusterNode> {
        let config = &self.shared.config;
        if !config.membership.clustered() {
            return vec![response::single_node(&config.advertised_ip, config.ports)];
        }
        let role = self.shared.replica.role();
        let me = config.membership.replica_id as usize;
        self.shared
            .config
            .cluster_nodes
            .iter()
            .enumerate()
            .map(|(index, (ip, ports))| response::ClusterNode {
                name: format!("rill-node-{index}"),
                ip: ip.clone(),
                ports: *ports,
                role: if role.normal && role.primary as usize == index { 0 } else { 1 },
                // Healthy, or Unreachable when the peer holds no connection to this node.
                status: if index == me || self.shared.replica.peer_connected(index as u8) { 0 } else { 3 },
            })
            .collect()
    }

    /// ClientDetails of one client, or an empty body when it is not connected.
    pub fn get_client(&self, client_id: u32) -> ShardReply {
        let mut out = Vec::new();
        if let Some(info) = self.shared.sessions.clients.get(client_id) {
            let groups: Vec<(u32, u32, u32)> =
                self.memberships(client_id).iter().map(|k| (k.stream_id, k.topic_id, k.group_id)).collect();
            response::client_details(&mut out, &info, &groups);
        }
        Ok(out)
    }

    pub fn get_clients(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for info in self.shared.sessions.clients.all() {
            let groups = self.memberships(info.client_id).len() as u32;
            response::client(&mut out, &info, groups);
        }
        out
    }
}
