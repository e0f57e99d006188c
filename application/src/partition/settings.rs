//! The settings a partition runs with: its topic's, with the server's defaults filled in.

use rill_domain::topic_options::TopicSettings;

/// The message-id window of a partition that deduplicates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DedupSettings {
    pub max_entries: usize,
    pub expiry_us: u64,
}

/// Which topics' logs are written with direct I/O (`[system.partition] direct_io`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DirectIo {
    /// Every log goes through the page cache.
    #[default]
    Off,
    /// Topics whose durability is `persisted` (fsync per send): their bytes must reach the
    /// device before the acknowledgement anyway, so they go there once, from the pool.
    Persisted,
    /// Every topic.
    All,
}

/// Server-wide settings every partition runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionDefaults {
    /// Check every batch read from disk against its checksums before serving it.
    pub validate_checksum: bool,
    /// Whether topics that do not say deduplicate message ids.
    pub deduplicate: bool,
    pub dedup_window: DedupSettings,
    pub direct_io: DirectIo,
    /// How long a partition remembers an idempotent producer after its last batch.
    pub producer_expiry_us: u64,
}

impl Default for PartitionDefaults {
    fn default() -> Self {
        Self {
            validate_checksum: true,
            deduplicate: false,
            dedup_window: DedupSettings { max_entries: 10_000, expiry_us: 60_000_000 },
            direct_io: DirectIo::default(),
            producer_expiry_us: 86_400_000_000,
        }
    }
}

/// The settings a partition runs with: its topic's, with server defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionSettings {
    pub segment_size_bytes: u64,
    pub messages_required_to_save: u32,
    pub size_required_to_save_bytes: u64,
    pub enforce_fsync: bool,
    pub consumer_offset_fsync: bool,
    pub validate_checksum: bool,
    pub deduplication: Option<DedupSettings>,
    /// The active segment's log is written with direct I/O.
    pub direct_log: bool,
    pub producer_expiry_us: u64,
}

impl PartitionSettings {
    pub fn new(topic: &TopicSettings, defaults: &PartitionDefaults) -> Self {
        Self {
            segment_size_bytes: topic.segment_size_bytes,
            messages_required_to_save: topic.messages_required_to_save,
            size_required_to_save_bytes: topic.size_required_to_save_bytes,
            enforce_fsync: topic.enforce_fsync,
            consumer_offset_fsync: topic.consumer_offset_fsync,
            validate_checksum: defaults.validate_checksum,
            deduplication: topic.deduplicate.unwrap_or(defaults.deduplicate).then_some(defaults.dedup_window),
            direct_log: match defaults.direct_io {
                DirectIo::Off => false,
                DirectIo::Persisted => topic.enforce_fsync,
                DirectIo::All => true,
            },
            producer_expiry_us: defaults.producer_expiry_us,
        }
    }
}
