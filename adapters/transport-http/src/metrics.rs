//! Prometheus text and the stats document: resource counts, per-partition message and
//! byte counters and rates, consumer offsets and lag, connections per transport, errors by
//! code, connected clients, the memory pool's use, the data path's integrity,
//! retention, scrubbing, write-failure and disk-space figures, and request latency
//! histograms.

use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;

use rill_application::GatewayContext;
use rill_application::latency::{BUCKET_BOUNDS_US, HistogramSnapshot};
use rill_application::partition::ConsumerKey;
use rill_application::shared::GroupGauges;
use rill_domain::Namespace;
use rill_domain::metadata::Metadata;

/// Totals over every partition the metadata lists.
#[derive(Debug, Default, serde::Serialize)]
pub struct Stats {
    pub streams_count: u64,
    pub topics_count: u64,
    pub partitions_count: u64,
    pub segments_count: u64,
    pub messages_count: u64,
    pub messages_size_bytes: u64,
    pub clients_count: u64,
    pub shards_count: u64,
    pub memory_pool_allocated_bytes: u64,
    pub memory_pool_in_use_buffers: u64,
    pub memory_pool_free_buffers: u64,
    pub memory_pool_hits: u64,
    pub memory_pool_misses: u64,
    pub disk_total_bytes: u64,
    pub disk_available_bytes: u64,
    pub disk_min_free_bytes: u64,
    /// Sends are refused: the data volume is below its free-space floor.
    pub disk_below_floor: bool,
    pub read_only_partitions: u64,
    /// Partitions the metadata lists that no shard has open (their opening failed, or the
    /// shard has not got to it yet).
    pub unopened_partitions: u64,
    pub damaged_batches: u64,
    /// Bytes of every file under the data directory.
    pub data_directory_bytes: u64,
    /// Messages and payload bytes appended and polled since start, over every partition
    /// (the console draws throughput from their differences).
    pub messages_in_total: u64,
    pub bytes_in_total: u64,
    pub messages_out_total: u64,
    pub bytes_out_total: u64,
    /// The metadata replica: view, primary's index, normal status and commit number.
    pub replica_view: u32,
    pub replica_primary: u8,
    pub replica_normal: bool,
    pub metadata_commit: u64,
}

/// One partition's counters, with its labels.
struct PartitionLine {
    labels: String,
    messages: u64,
    size_bytes: u64,
    first_offset: u64,
    current_offset: u64,
    segments: u64,
    read_only: bool,
    appended_messages: u64,
    appended_bytes: u64,
    polled_messages: u64,
    polled_bytes: u64,
    /// Stored consumer and group offsets.
    offsets: Vec<(ConsumerKey, u64)>,
}

fn collect(metadata: &Metadata, context: &GatewayContext) -> (Stats, Vec<PartitionLine>) {
    let pool = context.pool_stats();
    let data = &context.telemetry().data;
    let (commit, role) = context.replica();
    let mut stats = Stats {
        replica_view: role.view,
        replica_primary: role.primary,
        replica_normal: role.normal,
        metadata_commit: commit,
        disk_total_bytes: data.disk_total.load(Relaxed),
        disk_available_bytes: data.disk_available.load(Relaxed),
        disk_min_free_bytes: data.disk_floor.load(Relaxed),
        disk_below_floor: data.below_floor.load(Relaxed),
        damaged_batches: data.damaged_batches.load(Relaxed),
        data_directory_bytes: data.data_directory_bytes.load(Relaxed),
        clients_count: context.clients_count() as u64,
        shards_count: context.shard_count() as u64,
        memory_pool_allocated_bytes: pool.allocated_bytes,
        memory_pool_in_use_buffers: pool.in_use_buffers as u64,
        memory_pool_free_buffers: pool.free_buffers as u64,
        memory_pool_hits: pool.hits,
        memory_pool_misses: pool.misses,
        ..Stats::default()
    };
    let mut partitions = Vec::new();
    for stream in metadata.streams() {
        stats.streams_count += 1;
        for topic in stream.topics.values() {
            stats.topics_count += 1;
            for partition_id in 0..topic.partitions.len() as u32 {
                stats.partitions_count += 1;
                let Some(counters) =
                    Namespace::new(stream.id, topic.id, partition_id).and_then(|ns| context.partition(ns))
                else {
                    stats.unopened_partitions += 1;
                    continue;
                };
                let usage = counters.usage();
                stats.segments_count += counters.segments_count() as u64;
                stats.messages_count += usage.messages_count;
                stats.messages_size_bytes += usage.size_bytes;
                stats.read_only_partitions += counters.read_only() as u64;
                stats.messages_in_total += counters.appended_messages.load(Relaxed);
                stats.bytes_in_total += counters.appended_bytes.load(Relaxed);
                stats.messages_out_total += counters.polled_messages.load(Relaxed);
                stats.bytes_out_total += counters.polled_bytes.load(Relaxed);
                partitions.push(PartitionLine {
                    labels: format!("stream=\"{}\",topic=\"{}\",partition=\"{partition_id}\"", stream.id, topic.id),
                    messages: usage.messages_count,
                    size_bytes: usage.size_bytes,
                    first_offset: counters.first_offset(),
                    current_offset: counters.current_offset(),
                    segments: counters.segments_count() as u64,
                    read_only: counters.read_only(),
                    appended_messages: counters.appended_messages.load(Relaxed),
                    appended_bytes: counters.appended_bytes.load(Relaxed),
                    polled_messages: counters.polled_messages.load(Relaxed),
                    polled_bytes: counters.polled_bytes.load(Relaxed),
                    offsets: counters.stored_offsets(),
                });
            }
        }
    }
    (stats, partitions)
}

pub fn stats(metadata: &Metadata, context: &GatewayContext) -> Stats {
    collect(metadata, context).0
}

/// The Prometheus text exposition (format 0.0.4).
pub fn render(metadata: &Metadata, context: &GatewayContext) -> String {
    let (stats, partitions) = collect(metadata, context);
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, value: u64| {
        let _ = writeln!(out, "# HELP rill_{name} {help}\n# TYPE rill_{name} {kind}\nrill_{name} {value}");
    };
    metric("streams", "gauge", "Streams.", stats.streams_count);
    metric("topics", "gauge", "Topics.", stats.topics_count);
    metric("partitions", "gauge", "Partitions.", stats.partitions_count);
    metric("segments", "gauge", "Segments.", stats.segments_count);
    metric("messages", "gauge", "Messages stored.", stats.messages_count);
    metric("messages_size_bytes", "gauge", "Bytes of stored messages.", stats.messages_size_bytes);
    metric("clients", "gauge", "Connected clients.", stats.clients_count);
    metric("shards", "gauge", "Shards (one thread each).", stats.shards_count);
    metric("memory_pool_allocated_bytes", "gauge", "Bytes the memory pool holds.", stats.memory_pool_allocated_bytes);
    metric("memory_pool_in_use_buffers", "gauge", "Pool buffers handed out.", stats.memory_pool_in_use_buffers);
    metric("memory_pool_free_buffers", "gauge", "Pool buffers ready for reuse.", stats.memory_pool_free_buffers);
    metric("memory_pool_hits_total", "counter", "Buffers served from the pool.", stats.memory_pool_hits);
    metric("memory_pool_misses_total", "counter", "Buffers the pool could not serve.", stats.memory_pool_misses);
    let _ = writeln!(
        out,
        "# HELP rill_partition_messages Messages stored per partition.\n# TYPE rill_partition_messages gauge"
    );
    for line in &partitions {
        let _ = writeln!(out, "rill_partition_messages{{{}}} {}", line.labels, line.messages);
    }
    let _ = writeln!(
        out,
        "# HELP rill_partition_size_bytes Bytes stored per partition.\n# TYPE rill_partition_size_bytes gauge"
    );
    for line in &partitions {
        let _ = writeln!(out, "rill_partition_size_bytes{{{}}} {}", line.labels, line.size_bytes);
    }
    let mut per_partition = |name: &str, help: &str, value: &dyn Fn(&PartitionLine) -> u64| {
        let _ = writeln!(out, "# HELP rill_{name} {help}\n# TYPE rill_{name} gauge");
        for line in &partitions {
            let _ = writeln!(out, "rill_{name}{{{}}} {}", line.labels, value(line));
        }
    };
    per_partition("partition_first_offset", "Lowest offset still stored per partition.", &|l| l.first_offset);
    per_partition("partition_current_offset", "Newest offset per partition.", &|l| l.current_offset);
    per_partition("partition_segments", "Segments per partition.", &|l| l.segments);
    per_partition("partition_read_only", "1 while a partition refuses sends because its last write failed.", &|l| {
        l.read_only as u64
    });
    let mut per_partition_counter = |name: &str, help: &str, value: &dyn Fn(&PartitionLine) -> u64| {
        let _ = writeln!(out, "# HELP rill_{name} {help}\n# TYPE rill_{name} counter");
        for line in &partitions {
            let _ = writeln!(out, "rill_{name}{{{}}} {}", line.labels, value(line));
        }
    };
    per_partition_counter("partition_appended_messages_total", "Messages appended since start.", &|l| {
        l.appended_messages
    });
    per_partition_counter("partition_appended_bytes_total", "Bytes appended since start.", &|l| l.appended_bytes);
    per_partition_counter("partition_polled_messages_total", "Messages served by polls since start.", &|l| {
        l.polled_messages
    });
    per_partition_counter("partition_polled_bytes_total", "Bytes served by polls since start.", &|l| l.polled_bytes);
    render_iggy_names(&mut out, metadata, context, &stats);
    render_consumers(&mut out, &partitions);
    render_data(&mut out, context, &stats);
    render_replication(&mut out, context, &stats);
    render_connections(&mut out, context);
    render_fsync(&mut out, context);
    render_latency(&mut out, context);
    out
}

/// The same counts under Iggy's own metric names, so dashboards made for Iggy keep working.
fn render_iggy_names(out: &mut String, metadata: &Metadata, context: &GatewayContext, stats: &Stats) {
    let http_requests: u64 = context
        .telemetry()
        .latency
        .snapshot()
        .iter()
        .filter(|(transport, _, _)| *transport == "http")
        .map(|(_, _, histogram)| histogram.cumulative.last().copied().unwrap_or(0))
        .sum();
    let values = [
        ("streams", "gauge", "total count of streams", stats.streams_count),
        ("topics", "gauge", "total count of topics", stats.topics_count),
        ("partitions", "gauge", "total count of partitions", stats.partitions_count),
        ("segments", "gauge", "total count of segments", stats.segments_count),
        ("messages", "gauge", "total count of messages", stats.messages_count),
        ("users", "gauge", "total count of users", metadata.users().count() as u64),
        ("clients", "gauge", "total count of clients", stats.clients_count),
        ("http_requests_total", "counter", "total count of http_requests", http_requests),
    ];
    for (name, kind, help, value) in values {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
    }
}

/// `rill_consumer_offset` and `rill_consumer_lag` per consumer (or group) and partition:
/// lag is the partition's newest offset minus the stored one (0 once caught up).
fn render_consumers(out: &mut String, partitions: &[PartitionLine]) {
    let series = |key: &ConsumerKey| match key {
        ConsumerKey::Consumer(id) => format!("kind=\"consumer\",consumer=\"{id}\""),
        ConsumerKey::Group(id) => format!("kind=\"group\",consumer=\"{id}\""),
    };
    let _ = writeln!(out, "# HELP rill_consumer_offset Stored offset per consumer or group and partition.");
    let _ = writeln!(out, "# TYPE rill_consumer_offset gauge");
    for line in partitions {
        for (key, offset) in &line.offsets {
            let _ = writeln!(out, "rill_consumer_offset{{{},{}}} {offset}", line.labels, series(key));
        }
    }
    let _ = writeln!(
        out,
        "# HELP rill_consumer_lag Newest offset minus the stored offset, per consumer or group and partition."
    );
    let _ = writeln!(out, "# TYPE rill_consumer_lag gauge");
    for line in partitions {
        for (key, offset) in &line.offsets {
            let lag = line.current_offset.saturating_sub(*offset);
            let _ = writeln!(out, "rill_consumer_lag{{{},{}}} {lag}", line.labels, series(key));
        }
    }
}

/// Connections per transport and binary-protocol error replies per status code.
fn render_connections(out: &mut String, context: &GatewayContext) {
    let _ = writeln!(
        out,
        "# HELP rill_clients_by_protocol Connected clients by the protocol generation their login chose."
    );
    let _ = writeln!(out, "# TYPE rill_clients_by_protocol gauge");
    for (protocol, count) in context.clients_by_protocol() {
        let _ = writeln!(out, "rill_clients_by_protocol{{protocol=\"{}\"}} {count}", protocol.label());
    }
    let _ = writeln!(out, "# HELP rill_connections Connected clients per transport.\n# TYPE rill_connections gauge");
    for (transport, count) in context.connections_by_transport() {
        let _ = writeln!(out, "rill_connections{{transport=\"{transport}\"}} {count}");
    }
    let _ = writeln!(
        out,
        "# HELP rill_request_errors_total Binary-protocol replies carrying an error, by status code.\n# TYPE rill_request_errors_total counter"
    );
    for (code, count) in context.telemetry().errors.snapshot() {
        let _ = writeln!(out, "rill_request_errors_total{{code=\"{code}\"}} {count}");
    }
}

/// The data path's counters: damage found, scrubbing, retention, write failures, dedup and
/// the data volume's space.
fn render_data(out: &mut String, context: &GatewayContext, stats: &Stats) {
    let data = &context.telemetry().data;
    let counters = [
        ("damaged_batches_total", "Distinct stored batches found failing their checksums.", &data.damaged_batches),
        ("damaged_reads_total", "Polls refused because they start at a damaged batch.", &data.damaged_reads),
        ("scrub_bytes_total", "Bytes of sealed segments the scrubber verified.", &data.scrub_bytes),
        ("scrub_batches_total", "Batches the scrubber verified.", &data.scrub_batches),
        ("scrub_damaged_total", "Damaged batches the scrubber met, repeats included.", &data.scrub_damaged),
        ("scrub_passes_total", "Full passes of the scrubber over a shard's partitions.", &data.scrub_passes),
        (
            "retention_deleted_segments_total",
            "Segments deleted by retention or DELETE_SEGMENTS.",
            &data.retention_segments,
        ),
        ("retention_deleted_messages_total", "Messages deleted by retention.", &data.retention_messages),
        ("retention_deleted_bytes_total", "Bytes deleted by retention.", &data.retention_bytes),
        (
            "partition_write_failures_total",
            "Partition writes that failed (full disk, device errors).",
            &data.write_failures,
        ),
        ("sends_refused_total", "Sends refused: read-only partition or disk below its floor.", &data.sends_refused),
        ("deduplicated_messages_total", "Messages dropped as duplicates of a stored id.", &data.duplicates_dropped),
        (
            "spare_logs_taken_total",
            "New direct segments written over their partition's spare logs.",
            &data.spare_logs.taken,
        ),
        (
            "spare_logs_kept_total",
            "Direct logs retention removed, kept by their partitions as spares.",
            &data.spare_logs.kept,
        ),
    ];
    let bus = &context.telemetry().bus;
    let counters = counters.into_iter().chain([
        ("bus_forwarded_total", "Partition requests served by a shard other than the connection's.", &bus.forwarded),
        ("bus_metadata_forwarded_total", "Metadata requests forwarded to shard 0.", &bus.metadata_forwarded),
        ("connections_moved_total", "Connections moved to the shard owning their partitions.", &bus.connections_moved),
        (
            "bus_direct_replies_total",
            "Crossing sends whose reply the partition's owner wrote to the client's socket.",
            &bus.direct_replies,
        ),
    ]);
    for (name, help, value) in counters {
        let _ =
            writeln!(out, "# HELP rill_{name} {help}\n# TYPE rill_{name} counter\nrill_{name} {}", value.load(Relaxed));
    }
    let spares = &data.spare_logs;
    let gauges = [
        ("read_only_partitions", "Partitions refusing sends after a failed write.", stats.read_only_partitions),
        ("unopened_partitions", "Partitions no shard could open (a disk error).", stats.unopened_partitions),
        ("disk_total_bytes", "Size of the data volume.", stats.disk_total_bytes),
        ("disk_available_bytes", "Free space on the data volume.", stats.disk_available_bytes),
        ("disk_min_free_bytes", "The free-space floor below which sends are refused.", stats.disk_min_free_bytes),
        ("disk_below_floor", "1 while sends are refused for lack of free space.", stats.disk_below_floor as u64),
        ("data_directory_bytes", "Bytes of every file under the data directory.", stats.data_directory_bytes),
        ("spare_logs", "Removed segments' logs their partitions keep to write over.", spares.files.load(Relaxed)),
        ("spare_log_bytes", "Bytes the spare logs hold.", spares.bytes.load(Relaxed)),
    ];
    for (name, help, value) in gauges {
        let _ = writeln!(out, "# HELP rill_{name} {help}\n# TYPE rill_{name} gauge\nrill_{name} {value}");
    }
}

/// One `rill_partition_group_*` gauge: name, help, and its value in a group's gauges.
type GroupFamily = (&'static str, &'static str, fn(&GroupGauges) -> u64);

/// The metadata replica's view, primary, status and commit number, whether its journal
/// halted, and the same for each shard's partition group (docs/vsr.md).
fn render_replication(out: &mut String, context: &GatewayContext, stats: &Stats) {
    let halted = context.telemetry().metadata_halted.load(Relaxed);
    let metadata = [
        ("metadata_view", "The metadata replica's view.", u64::from(stats.replica_view)),
        ("metadata_primary", "The replica id of the metadata primary in that view.", u64::from(stats.replica_primary)),
        (
            "metadata_normal",
            "1 while the metadata replica is in normal status (0: a view change or recovery).",
            u64::from(stats.replica_normal),
        ),
        ("metadata_commit", "The metadata replica's commit number.", stats.metadata_commit),
        (
            "metadata_halted",
            "1 while metadata changes are refused: its journal cannot be written (until it opens again), or its replica halted itself (until a restart).",
            u64::from(halted),
        ),
    ];
    for (name, help, value) in metadata {
        let _ = writeln!(out, "# HELP rill_{name} {help}\n# TYPE rill_{name} gauge\nrill_{name} {value}");
    }
    let halts = context.telemetry().replica_halts.load(Relaxed);
    let _ = writeln!(
        out,
        "# HELP rill_replica_halts_total Replicas (the metadata's, a partition group's) that halted themselves since start: \
         a broken invariant or a committed op they could not apply.\n# TYPE rill_replica_halts_total counter\n\
         rill_replica_halts_total {halts}"
    );
    let groups = &context.telemetry().groups;
    if !groups.iter().any(|gauges| gauges.open.load(Relaxed)) {
        return;
    }
    let families: [GroupFamily; 6] = [
        ("view", "The partition group's view on this node.", |g| u64::from(g.view.load(Relaxed))),
        ("primary", "The replica id of the group's primary in that view.", |g| u64::from(g.primary.load(Relaxed))),
        ("normal", "1 while the group's replica here is in normal status.", |g| u64::from(g.normal.load(Relaxed))),
        ("commit", "The group's commit number on this node.", |g| g.commit.load(Relaxed)),
        (
            "halted",
            "1 while the group refuses every send here (a journal write failed: until it opens again; a copy here differs from the partition the group recorded, or its replica halted itself: until a restart).",
            |g| u64::from(g.halted.load(Relaxed)),
        ),
        (
            "lagging_copies",
            "This node's copies of the group's partitions that lack committed batches or a purge's emptying.",
            |g| u64::from(g.lagging_copies.load(Relaxed)),
        ),
    ];
    for (name, help, value) in families {
        let _ = writeln!(out, "# HELP rill_partition_group_{name} {help}\n# TYPE rill_partition_group_{name} gauge");
        for (group, gauges) in groups.iter().enumerate().filter(|(_, gauges)| gauges.open.load(Relaxed)) {
            let _ = writeln!(out, "rill_partition_group_{name}{{group=\"{group}\"}} {}", value(gauges));
        }
    }
}

/// `rill_fsync_duration_seconds`: every file fsync of the data path.
fn render_fsync(out: &mut String, context: &GatewayContext) {
    let _ = writeln!(
        out,
        "# HELP rill_fsync_duration_seconds Time a file fsync takes (segments, indexes, offsets).\n\
         # TYPE rill_fsync_duration_seconds histogram"
    );
    write_histogram(out, "rill_fsync_duration_seconds", "", &context.telemetry().fsync_latency.snapshot());
}

/// One histogram's series: cumulative buckets in seconds, +Inf, sum and count; `labels`
/// (empty or `k="v",...`) go on every series.
fn write_histogram(out: &mut String, name: &str, labels: &str, histogram: &HistogramSnapshot) {
    let sep = if labels.is_empty() { "" } else { "," };
    for (bound_us, count) in BUCKET_BOUNDS_US.iter().zip(&histogram.cumulative) {
        let le = *bound_us as f64 / 1e6;
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {count}");
    }
    let total = histogram.cumulative.last().copied().unwrap_or(0);
    let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {total}");
    let braces = |labels: &str| if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
    let _ = writeln!(out, "{name}_sum{} {}", braces(labels), histogram.sum_us as f64 / 1e6);
    let _ = writeln!(out, "{name}_count{} {total}", braces(labels));
}

/// `rill_request_duration_seconds`: one histogram per binary command and per HTTP route.
fn render_latency(out: &mut String, context: &GatewayContext) {
    let _ = writeln!(
        out,
        "# HELP rill_request_duration_seconds Time to serve a request, by transport family and request.\n\
         # TYPE rill_request_duration_seconds histogram"
    );
    for (transport, request, histogram) in context.telemetry().latency.snapshot() {
        let labels = format!("transport=\"{transport}\",request=\"{}\"", request.replace('"', "'"));
        write_histogram(out, "rill_request_duration_seconds", &labels, &histogram);
    }
}
