//! Protocol and storage constants, with the relations between them checked at compile time.

/// Size of every frame header on the wire (request, reply, eviction).
pub const HEADER_SIZE: usize = 256;
/// Upper bound on a whole frame, header included (upstream `max_message_size`).
pub const MAX_FRAME_SIZE: usize = 64 * 1024 * 1024;
/// Packed protocol version 0.11.0: `major << 20 | minor << 10 | patch`.
pub const PROTOCOL_VERSION: u32 = 11 << 10;
/// Version string returned at login.
pub const SERVER_VERSION: &str = "0.9.0";

pub const BATCH_HEADER_SIZE: usize = 256;
pub const MESSAGE_HEADER_SIZE: usize = 48;
pub const MAX_PAYLOAD_SIZE: usize = 64_000_000;
pub const MAX_USER_HEADERS_SIZE: usize = 100_000;

pub const MAX_STREAMS: u32 = 1 << 20;
pub const MAX_TOPICS_PER_STREAM: u32 = 1 << 12;
pub const MAX_PARTITIONS_PER_TOPIC: u32 = 1_000_000;
pub const MAX_PARTITIONS_PER_REQUEST: u32 = 1000;
pub const MAX_NAME_LENGTH: usize = 255;

/// Defaults of the per-topic write pipeline.
pub const DEFAULT_MESSAGES_REQUIRED_TO_SAVE: u32 = 1024;
pub const DEFAULT_SIZE_REQUIRED_TO_SAVE_BYTES: u64 = 1024 * 1024;
pub const DEFAULT_SEGMENT_SIZE_BYTES: u64 = 1024 * 1024 * 1024;
pub const MIN_SEGMENT_SIZE_BYTES: u64 = 1024 * 1024;
/// At most this many buffers go to the kernel in one vectored write.
pub const MAX_IOVECS_PER_WRITE: usize = 1024;

/// Bytes of one on-disk index entry, one per stored batch: relative base offset u32,
/// position u32, base timestamp u64, message count u32 and batch length u32, so a reader
/// fetches exactly the batches it needs without scanning the log.
pub const INDEX_ENTRY_SIZE: usize = 24;

const _: () = assert!(MAX_FRAME_SIZE > HEADER_SIZE + BATCH_HEADER_SIZE);
const _: () = assert!(MAX_PAYLOAD_SIZE < MAX_FRAME_SIZE);
const _: () = assert!(MIN_SEGMENT_SIZE_BYTES <= DEFAULT_SEGMENT_SIZE_BYTES);
const _: () = assert!(DEFAULT_SEGMENT_SIZE_BYTES <= u32::MAX as u64);
