//! Read-only use cases: streams, topics, stats, clients and cluster metadata.

use rill_domain::error::ErrorCode;
use rill_domain::identifier::Identifier;
use rill_domain::wire::command::TopicRef;
use rill_domain::wire::response::{self, PartitionInfo, Stats, Usage};

use super::System;
use crate::ports::Env;

impl<E: Env> System<E> {
    fn stream_usage(&self, stream_id: u32) -> Usage {
        let metadata = self.metadata.borrow();
        let mut usage = Usage::default();
        if let Some(stream) = metadata.streams().find(|s| s.id == stream_id) {
            for topic in stream.topics.values() {
                usage += self.topic_usage(stream_id, topic.id, topic.partitions.len() as u32);
            }
        }
        usage
    }

    fn encode_stream(&self, out: &mut Vec<u8>, stream_id: u32) {
        let usage = self.stream_usage(stream_id);
        let metadata = self.metadata.borrow();
        if let Some(stream) = metadata.streams().find(|s| s.id == stream_id) {
            response::stream(out, stream.id, stream.created_at, stream.topics.len() as u32, usage, &stream.name);
        }
    }

    /// StreamDetails: the stream, then a header for each of its topics.
    pub(super) fn encode_stream_details(&self, out: &mut Vec<u8>, stream_id: u32) {
        self.encode_stream(out, stream_id);
        let metadata = self.metadata.borrow();
        let Some(stream) = metadata.streams().find(|s| s.id == stream_id) else { return };
        for topic in stream.topics.values() {
            let usage = self.topic_usage(stream_id, topic.id, topic.partitions.len() as u32);
            response::topic_header(out, topic, usage);
        }
    }

    /// TopicDetails: the topic header, then every partition.
    pub(super) fn encode_topic_details(&self, out: &mut Vec<u8>, stream_id: u32, topic_id: u32) {
        let metadata = self.metadata.borrow();
        let Some(topic) = metadata.topic_by_ids(stream_id, topic_id) else { return };
        let usage = self.topic_usage(stream_id, topic_id, topic.partitions.len() as u32);
        response::topic_header(out, topic, usage);
        for (partition_id, created_at) in topic.partitions.iter().enumerate() {
            let mut info = PartitionInfo { id: partition_id as u32, created_at: *created_at, ..Default::default() };
            if let Some(partition) = self.partition_handle(stream_id, topic_id, partition_id as u32) {
                info.segments_count = partition.segments_count.get();
                info.current_offset = partition.current_offset.get();
                info.usage = partition.usage.get();
            }
            response::partition(out, &info);
        }
    }

    /// GET_STREAM: details, or an empty body when the stream does not exist.
    pub fn get_stream(&self, stream: &Identifier) -> Vec<u8> {
        let mut out = Vec::new();
        let stream_id = self.metadata.borrow().stream_id(stream);
        if let Ok(stream_id) = stream_id {
            self.encode_stream_details(&mut out, stream_id);
        }
        out
    }

    pub fn get_streams(&self) -> Vec<u8> {
        let ids: Vec<u32> = self.metadata.borrow().streams().map(|s| s.id).collect();
        let mut out = Vec::new();
        for stream_id in ids {
            self.encode_stream(&mut out, stream_id);
        }
        out
    }

    /// GET_TOPIC: details, or an empty body when the stream or topic does not exist.
    pub fn get_topic(&self, topic: &TopicRef) -> Vec<u8> {
        let mut out = Vec::new();
        let ids = self.metadata.borrow().topic_ids(topic);
        if let Ok((stream_id, topic_id)) = ids {
            self.encode_topic_details(&mut out, stream_id, topic_id);
        }
        out
    }

    /// GET_TOPICS: `[count u32]` then the headers; a missing stream has none.
    pub fn get_topics(&self, stream: &Identifier) -> Vec<u8> {
        let metadata = self.metadata.borrow();
        let Ok(stream) = metadata.stream(stream) else { return 0u32.to_le_bytes().to_vec() };
        let mut out = (stream.topics.len() as u32).to_le_bytes().to_vec();
        for topic in stream.topics.values() {
            let usage = self.topic_usage(stream.id, topic.id, topic.partitions.len() as u32);
            response::topic_header(&mut out, topic, usage);
        }
        out
    }

    pub fn get_stats(&self) -> Vec<u8> {
        let metadata = self.metadata.borrow();
        let mut stats = Stats {
            process_id: std::process::id(),
            total_memory: self.config.host.total_memory,
            run_time_us: self.now_us().saturating_sub(self.start_time_us),
            start_time_us: self.start_time_us,
            clients_count: self.clients.count(),
            hostname: self.config.host.hostname.clone(),
            os_name: self.config.host.os_name.clone(),
            os_version: self.config.host.os_version.clone(),
            kernel_version: self.config.host.kernel_version.clone(),
            threads_count: 1,
            ..Stats::default()
        };
        for stream in metadata.streams() {
            stats.streams_count += 1;
            for topic in stream.topics.values() {
                stats.topics_count += 1;
                stats.partitions_count += topic.partitions.len() as u32;
                for partition_id in 0..topic.partitions.len() as u32 {
                    if let Some(partition) = self.partition_handle(stream.id, topic.id, partition_id) {
                        let usage = partition.usage.get();
                        stats.messages_count += usage.messages_count;
                        stats.messages_size_bytes += usage.size_bytes;
                        stats.segments_count += partition.segments_count.get();
                    }
                }
            }
        }
        let mut out = Vec::new();
        response::stats(&mut out, &stats);
        out
    }

    pub fn get_cluster_metadata(&self) -> Vec<u8> {
        let mut out = Vec::new();
        response::single_node_cluster(&mut out, &self.config.advertised_ip, self.config.ports);
        out
    }

    /// ClientDetails of one client, or an empty body when it is not connected.
    pub fn get_client(&self, client_id: u32) -> Result<Vec<u8>, ErrorCode> {
        let mut out = Vec::new();
        if let Some(info) = self.clients.get(client_id) {
            response::client(&mut out, &info);
        }
        Ok(out)
    }

    pub fn get_clients(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for info in self.clients.all() {
            response::client(&mut out, &info);
        }
        out
    }
}
