//! The canonical message batch: a 256-byte batch header followed by frames of a 48-byte
//! message header, the payload, then the user headers. The same bytes arrive in a send,
//! sit in the `.log` file and go out in a poll reply.

use crate::checksum::xxh3_64;
use crate::constants::{BATCH_HEADER_SIZE, MAX_PAYLOAD_SIZE, MAX_USER_HEADERS_SIZE, MESSAGE_HEADER_SIZE};
use crate::error::ErrorCode;
use crate::producers::BatchProducer;
use crate::wire::tlv;
use xxhash_rust::xxh3::Xxh3;

const OFF_PARTITION_ID: usize = 0;
const OFF_BASE_OFFSET: usize = 8;
const OFF_BASE_TIMESTAMP: usize = 16;
const OFF_ORIGIN_TIMESTAMP: usize = 24;
const OFF_BATCH_LENGTH: usize = 32;
const OFF_CHECKSUM: usize = 40;
const OFF_MESSAGE_COUNT: usize = 48;
/// Protocol 0.12's producer section (zero in a batch without one): `[present u8][0; 3]
/// [producer_id u64][epoch u16][0; 2][base_sequence u32]`.
const OFF_PRODUCER: usize = 52;
const OFF_PRODUCER_ID: usize = 56;
const OFF_PRODUCER_EPOCH: usize = 64;
const OFF_PRODUCER_SEQUENCE: usize = 68;
const PRODUCER_PRESENT: u8 = 1;
const RESERVED_START: usize = 72;

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

/// The fields of a batch header. Only valid batches are ever read through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub partition_id: u64,
    pub base_offset: u64,
    pub base_timestamp: u64,
    pub origin_timestamp: u64,
    pub batch_length: u64,
    pub checksum: u64,
    pub message_count: u32,
}

impl BatchHeader {
    pub fn read(bytes: &[u8]) -> Self {
        Self {
            partition_id: read_u64(bytes, OFF_PARTITION_ID),
            base_offset: read_u64(bytes, OFF_BASE_OFFSET),
            base_timestamp: read_u64(bytes, OFF_BASE_TIMESTAMP),
            origin_timestamp: read_u64(bytes, OFF_ORIGIN_TIMESTAMP),
            batch_length: read_u64(bytes, OFF_BATCH_LENGTH),
            checksum: read_u64(bytes, OFF_CHECKSUM),
            message_count: read_u32(bytes, OFF_MESSAGE_COUNT),
        }
    }

    /// Offset of the last message in the batch.
    pub fn last_offset(&self) -> u64 {
        self.base_offset + self.message_count as u64 - 1
    }
}

/// One frame's place in the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    pub start: usize,
    pub end: usize,
    pub offset_delta: u32,
    pub checksum: u64,
}

/// Walks the frames of a batch whose layout was validated.
pub fn frames(batch: &[u8]) -> impl Iterator<Item = Frame> + '_ {
    let count = read_u32(batch, OFF_MESSAGE_COUNT);
    let mut position = BATCH_HEADER_SIZE;
    (0..count).map(move |_| {
        let header = &batch[position..position + MESSAGE_HEADER_SIZE];
        let len = MESSAGE_HEADER_SIZE + read_u32(header, 32) as usize + read_u32(header, 36) as usize;
        let frame = Frame {
            start: position,
            end: position + len,
            offset_delta: read_u32(header, 24),
            checksum: read_u64(header, 0),
        };
        position += len;
        frame
    })
}

/// One frame's fields, borrowed from its batch.
#[derive(Debug, Clone, Copy)]
pub struct FrameParts<'a> {
    /// The 48-byte message header.
    pub header: &'a [u8],
    pub payload: &'a [u8],
    pub user_headers: &'a [u8],
    /// The header's reserved field: 0 from producers; the server may mark its own forms.
    pub reserved: u64,
}

impl<'a> FrameParts<'a> {
    /// The message id's 16 bytes.
    pub fn id_bytes(&self) -> &'a [u8] {
        &self.header[8..24]
    }
}

/// The fields of a frame of a batch whose layout was validated.
pub fn frame_parts<'a>(batch: &'a [u8], frame: &Frame) -> FrameParts<'a> {
    let header = &batch[frame.start..frame.start + MESSAGE_HEADER_SIZE];
    let headers_len = read_u32(header, 32) as usize;
    let payload_end = frame.end - headers_len;
    FrameParts {
        header,
        payload: &batch[frame.start + MESSAGE_HEADER_SIZE..payload_end],
        user_headers: &batch[payload_end..frame.end],
        reserved: read_u64(header, 40),
    }
}

/// Appends a frame to `out`: `header`'s id, offset delta and timestamp delta, the given
/// payload, user headers and reserved field, and a fresh message checksum.
pub fn push_frame(out: &mut Vec<u8>, header: &[u8], payload: &[u8], user_headers: &[u8], reserved: u64) {
    let start = out.len();
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&header[8..32]);
    out.extend_from_slice(&(user_headers.len() as u32).to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&reserved.to_le_bytes());
    out.extend_from_slice(payload);
    out.extend_from_slice(user_headers);
    let checksum = xxh3_64(&out[start + 8..]);
    out[start..start + 8].copy_from_slice(&checksum.to_le_bytes());
}

/// XXH3-64 over the six header fields, the producer section when there is one (`[1][id]
/// [epoch][base_sequence]`), then each frame's checksum, in order.
pub fn compute_checksum(batch: &[u8]) -> u64 {
    let mut hasher = Xxh3::new();
    hasher.update(&batch[..OFF_CHECKSUM]);
    hasher.update(&batch[OFF_MESSAGE_COUNT..OFF_MESSAGE_COUNT + 4]);
    if batch[OFF_PRODUCER] == PRODUCER_PRESENT {
        hasher.update(&[PRODUCER_PRESENT]);
        hasher.update(&batch[OFF_PRODUCER_ID..OFF_PRODUCER_EPOCH + 2]);
        hasher.update(&batch[OFF_PRODUCER_SEQUENCE..OFF_PRODUCER_SEQUENCE + 4]);
    }
    for frame in frames(batch) {
        hasher.update(&frame.checksum.to_le_bytes());
    }
    hasher.digest()
}

/// A batch's producer (0.12's idempotent producers), `None` when it has none. A section
/// with padding set, a flag other than 0 or 1, or a field past the clients' maxima (ids and
/// sequences are 63 and 31 bits, epochs 15) is malformed.
pub fn producer(batch: &[u8]) -> Result<Option<BatchProducer>, ErrorCode> {
    let section = &batch[OFF_PRODUCER..RESERVED_START];
    match section[0] {
        0 if section.iter().all(|&b| b == 0) => Ok(None),
        PRODUCER_PRESENT => {
            let padding = batch[OFF_PRODUCER + 1..OFF_PRODUCER_ID]
                .iter()
                .chain(&batch[OFF_PRODUCER_EPOCH + 2..OFF_PRODUCER_SEQUENCE]);
            let producer = BatchProducer {
                id: read_u64(batch, OFF_PRODUCER_ID),
                epoch: u16::from_le_bytes([batch[OFF_PRODUCER_EPOCH], batch[OFF_PRODUCER_EPOCH + 1]]),
                base_sequence: read_u32(batch, OFF_PRODUCER_SEQUENCE),
            };
            let within = producer.id <= i64::MAX as u64
                && producer.epoch <= i16::MAX as u16
                && producer.base_sequence <= crate::producers::SEQUENCE_MAX;
            if padding.into_iter().all(|&b| b == 0) && within {
                Ok(Some(producer))
            } else {
                Err(ErrorCode::InvalidFormat)
            }
        }
        _ => Err(ErrorCode::InvalidFormat),
    }
}

/// Sets a batch's producer section, as a 0.12 idempotent producer sends it, and reseals the
/// batch checksum that covers it.
pub fn set_producer(batch: &mut [u8], producer: BatchProducer) {
    batch[OFF_PRODUCER] = PRODUCER_PRESENT;
    batch[OFF_PRODUCER_ID..OFF_PRODUCER_ID + 8].copy_from_slice(&producer.id.to_le_bytes());
    batch[OFF_PRODUCER_EPOCH..OFF_PRODUCER_EPOCH + 2].copy_from_slice(&producer.epoch.to_le_bytes());
    batch[OFF_PRODUCER_SEQUENCE..OFF_PRODUCER_SEQUENCE + 4].copy_from_slice(&producer.base_sequence.to_le_bytes());
    let checksum = compute_checksum(batch);
    batch[OFF_CHECKSUM..OFF_CHECKSUM + 8].copy_from_slice(&checksum.to_le_bytes());
}

/// Clears the producer section of each batch in `batches` (stored batches back to back)
/// that has one, resealing its checksum: how a 0.11 client, which refuses nonzero reserved
/// bytes, gets a 0.12 producer's batches.
pub fn strip_producers(batches: &mut [u8]) {
    let mut at = 0;
    while batches.len() - at >= BATCH_HEADER_SIZE {
        let len = usize::try_from(read_u64(batches, at + OFF_BATCH_LENGTH)).unwrap_or(usize::MAX);
        if len < BATCH_HEADER_SIZE || len > batches.len() - at {
            return;
        }
        let batch = &mut batches[at..at + len];
        if batch[OFF_PRODUCER] != 0 {
            batch[OFF_PRODUCER..RESERVED_START].fill(0);
            let checksum = compute_checksum(batch);
            batch[OFF_CHECKSUM..OFF_CHECKSUM + 8].copy_from_slice(&checksum.to_le_bytes());
        }
        at += len;
    }
}

/// Whether any batch of `batches` (back to back) has a producer section.
pub fn any_producer(batches: &[u8]) -> bool {
    let mut at = 0usize;
    while at.saturating_add(BATCH_HEADER_SIZE) <= batches.len() {
        if batches[at + OFF_PRODUCER] != 0 {
            return true;
        }
        match usize::try_from(read_u64(batches, at + OFF_BATCH_LENGTH)) {
            Ok(len) if len >= BATCH_HEADER_SIZE => at = at.saturating_add(len),
            _ => return false,
        }
    }
    false
}

/// Checks one frame at `position` and returns its end.
fn validate_frame(batch: &[u8], position: usize, index: u32) -> Result<usize, ErrorCode> {
    if batch.len() - position < MESSAGE_HEADER_SIZE {
        return Err(ErrorCode::InvalidFormat);
    }
    let header = &batch[position..position + MESSAGE_HEADER_SIZE];
    let headers_len = read_u32(header, 32) as usize;
    let payload_len = read_u32(header, 36) as usize;
    if read_u64(header, 40) != 0 || read_u32(header, 24) != index {
        return Err(ErrorCode::InvalidFormat);
    }
    if payload_len == 0 {
        return Err(ErrorCode::EmptyMessagePayload);
    }
    if payload_len > MAX_PAYLOAD_SIZE {
        return Err(ErrorCode::TooBigMessagePayload);
    }
    if headers_len > MAX_USER_HEADERS_SIZE {
        return Err(ErrorCode::TooBigUserHeaders);
    }
    let end = position + MESSAGE_HEADER_SIZE + payload_len + headers_len;
    if end > batch.len() {
        return Err(ErrorCode::InvalidFormat);
    }
    if headers_len > 0 {
        let headers = &batch[end - headers_len..end];
        let entries = tlv::decode(headers)?;
        if entries.is_empty() {
            return Err(ErrorCode::InvalidFormat);
        }
    }
    let body = &batch[position + 8..end];
    if xxh3_64(body) != read_u64(header, 0) {
        return Err(ErrorCode::InvalidMessageChecksum);
    }
    Ok(end)
}

/// Validates a batch as a producer sent it: exact tiling, zero reserved bytes, every
/// message checksum, and the batch checksum.
pub fn validate(batch: &[u8], declared_count: u32) -> Result<BatchHeader, ErrorCode> {
    if batch.len() < BATCH_HEADER_SIZE {
        return Err(ErrorCode::InvalidFormat);
    }
    let header = BatchHeader::read(batch);
    if header.batch_length != batch.len() as u64 || batch[RESERVED_START..BATCH_HEADER_SIZE].iter().any(|&b| b != 0) {
        return Err(ErrorCode::InvalidFormat);
    }
    producer(batch)?;
    if header.message_count == 0 || header.message_count != declared_count {
        return Err(ErrorCode::InvalidMessagesCount);
    }
    let mut position = BATCH_HEADER_SIZE;
    for index in 0..header.message_count {
        position = validate_frame(batch, position, index)?;
    }
    if position != batch.len() {
        return Err(ErrorCode::InvalidFormat);
    }
    if compute_checksum(batch) != header.checksum {
        return Err(ErrorCode::InvalidBatchChecksum);
    }
    Ok(header)
}

/// Stamps the server-side fields and reseals the batch checksum.
pub fn stamp(batch: &mut [u8], partition_id: u32, base_offset: u64, base_timestamp: u64) {
    batch[OFF_PARTITION_ID..OFF_PARTITION_ID + 8].copy_from_slice(&(partition_id as u64).to_le_bytes());
    batch[OFF_BASE_OFFSET..OFF_BASE_OFFSET + 8].copy_from_slice(&base_offset.to_le_bytes());
    batch[OFF_BASE_TIMESTAMP..OFF_BASE_TIMESTAMP + 8].copy_from_slice(&base_timestamp.to_le_bytes());
    let checksum = compute_checksum(batch);
    batch[OFF_CHECKSUM..OFF_CHECKSUM + 8].copy_from_slice(&checksum.to_le_bytes());
}

/// What a stored batch read back from disk turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoredBatch {
    /// Every message checksum and the batch checksum match.
    Valid,
    /// The frames tile the batch as its header says, but a checksum does not match: the
    /// bytes changed after they were written (bit rot), not a torn write.
    Damaged,
    /// Lengths do not add up: not a batch at all, or a torn one.
    Malformed,
}

/// Walks a stored batch's frames: `None` when its lengths do not tile it, otherwise
/// whether every message checksum matches (always true without `hash`).
fn walk_stored(batch: &[u8], hash: bool) -> Option<bool> {
    if batch.len() < BATCH_HEADER_SIZE {
        return None;
    }
    let header = BatchHeader::read(batch);
    if header.batch_length != batch.len() as u64 || header.message_count == 0 {
        return None;
    }
    let mut intact = true;
    let mut position = BATCH_HEADER_SIZE;
    for _ in 0..header.message_count {
        if batch.len() - position < MESSAGE_HEADER_SIZE {
            return None;
        }
        let len = read_u32(batch, position + 32) as u64 + read_u32(batch, position + 36) as u64;
        let end = position as u64 + MESSAGE_HEADER_SIZE as u64 + len;
        if end > batch.len() as u64 {
            return None;
        }
        intact = intact && (!hash || xxh3_64(&batch[position + 8..end as usize]) == read_u64(batch, position));
        position = end as usize;
    }
    (position == batch.len()).then_some(intact)
}

/// Checks a stored batch: its length field, the frames' tiling, every message checksum
/// and the batch checksum.
pub fn check_stored(batch: &[u8]) -> StoredBatch {
    match walk_stored(batch, true) {
        None => StoredBatch::Malformed,
        Some(intact) => {
            let reserved_clear =
                batch[RESERVED_START..BATCH_HEADER_SIZE].iter().all(|&b| b == 0) && producer(batch).is_ok();
            if intact && reserved_clear && compute_checksum(batch) == BatchHeader::read(batch).checksum {
                StoredBatch::Valid
            } else {
                StoredBatch::Damaged
            }
        }
    }
}

/// Whether a stored batch's lengths tile it, without hashing anything: the least a reader
/// needs before it can slice the batch safely.
pub fn check_structure(batch: &[u8]) -> bool {
    walk_stored(batch, false).is_some()
}

/// Verifies a stored batch read back from disk: its length field and its checksums.
pub fn verify_stored(batch: &[u8]) -> bool {
    check_stored(batch) == StoredBatch::Valid
}

/// The id of every message of a validated batch, in order.
pub fn message_ids(batch: &[u8]) -> impl Iterator<Item = u128> + '_ {
    frames(batch).map(|frame| u128::from_le_bytes(batch[frame.start + 8..frame.start + 24].try_into().unwrap()))
}

/// Removes, in place, the frames of a producer's batch that `drop` marks: the kept frames
/// move forward, renumbered from 0, with their checksums (which cover the offset delta) and
/// the batch's recomputed. Returns how many frames are kept and the batch's new length; with
/// none kept the bytes are left as they were.
pub fn drop_frames(batch: &mut [u8], drop: &[bool]) -> (u32, usize) {
    let frames: Vec<Frame> = frames(batch).collect();
    let kept = frames.iter().zip(drop).filter(|(_, dropped)| !**dropped).count();
    if kept == 0 || kept == frames.len() {
        return (kept as u32, batch.len());
    }
    let mut write = BATCH_HEADER_SIZE;
    let mut index = 0u32;
    for (frame, _) in frames.iter().zip(drop).filter(|(_, dropped)| !**dropped) {
        let len = frame.end - frame.start;
        batch.copy_within(frame.start..frame.end, write);
        batch[write + 24..write + 28].copy_from_slice(&index.to_le_bytes());
        let checksum = xxh3_64(&batch[write + 8..write + len]);
        batch[write..write + 8].copy_from_slice(&checksum.to_le_bytes());
        write += len;
        index += 1;
    }
    reseal(&mut batch[..write], index);
    (kept as u32, write)
}

/// Rewrites a batch's length, message count and checksum after frames were cut from it
/// (`batch` is exactly the header and the frames kept).
pub fn reseal(batch: &mut [u8], message_count: u32) {
    let len = batch.len() as u64;
    batch[OFF_BATCH_LENGTH..OFF_BATCH_LENGTH + 8].copy_from_slice(&len.to_le_bytes());
    batch[OFF_MESSAGE_COUNT..OFF_MESSAGE_COUNT + 4].copy_from_slice(&message_count.to_le_bytes());
    let checksum = compute_checksum(batch);
    batch[OFF_CHECKSUM..OFF_CHECKSUM + 8].copy_from_slice(&checksum.to_le_bytes());
}

/// Where the part of a stored batch holding offsets `from..` (at most `max` messages)
/// lies in it: the byte range of its frames and how many there are. `None` when the batch
/// holds none of them. Frames keep their original offset deltas when the part is served.
pub fn part(batch: &[u8], from: u64, max: u32) -> Option<(std::ops::Range<usize>, u32)> {
    let header = BatchHeader::read(batch);
    let skip = from.saturating_sub(header.base_offset);
    if skip >= header.message_count as u64 || max == 0 {
        return None;
    }
    let mut selected = frames(batch).skip(skip as usize).take(max as usize);
    let first = selected.next()?;
    let (end, count) = selected.fold((first.end, 1u32), |(_, count), frame| (frame.end, count + 1));
    Some((first.start..end, count))
}

/// Copies the part of a stored batch holding offsets `from..` (at most `max` messages) into
/// `out` as a batch record of its own: the same base fields, the selected frames, a fresh
/// checksum. Returns the messages and bytes written; `out` must hold the whole batch.
pub fn copy_part(batch: &[u8], from: u64, max: u32, out: &mut [u8]) -> (u32, usize) {
    let Some((frames, count)) = part(batch, from, max) else { return (0, 0) };
    let header = BATCH_HEADER_SIZE;
    let len = header + frames.len();
    out[..header].copy_from_slice(&batch[..header]);
    out[header..len].copy_from_slice(&batch[frames.clone()]);
    if frames.start != header || frames.end != batch.len() {
        reseal(&mut out[..len], count);
    }
    (count, len)
}

/// The offset after the last message of `batches` (stored batches back to back, as a poll
/// serves them, parts included); `None` when they hold no message.
pub fn end_offset(batches: &[u8]) -> Option<u64> {
    let (mut at, mut end) = (0, None);
    while batches.len() - at >= BATCH_HEADER_SIZE {
        let header = BatchHeader::read(&batches[at..]);
        let len = usize::try_from(header.batch_length).unwrap_or(usize::MAX);
        if len < BATCH_HEADER_SIZE || len > batches.len() - at {
            break;
        }
        if let Some(last) = frames(&batches[at..at + len]).last() {
            end = Some(header.base_offset + u64::from(last.offset_delta) + 1);
        }
        at += len;
    }
    end
}

/// Appends to `out` the part of a stored batch holding offsets `from..` (at most `max`
/// messages), as [`copy_part`] writes it. Returns the number of messages appended.
pub fn append_slice(batch: &[u8], from: u64, max: u32, out: &mut Vec<u8>) -> u32 {
    let start = out.len();
    out.resize(start + batch.len(), 0);
    let (count, len) = copy_part(batch, from, max, &mut out[start..]);
    out.truncate(start + len);
    count
}

/// Builds a batch message by message, the way a producer does.
pub struct BatchBuilder {
    out: Vec<u8>,
    count: u32,
}

impl BatchBuilder {
    /// An empty batch with room for `bytes` of messages.
    pub fn with_capacity(bytes: usize) -> Self {
        let mut out = Vec::with_capacity(BATCH_HEADER_SIZE + bytes);
        out.resize(BATCH_HEADER_SIZE, 0);
        Self { out, count: 0 }
    }

    /// Appends a message whose payload `fill` writes into a slot of `max_payload` bytes,
    /// returning how many it wrote (a decoder that knows only a bound writes in place).
    /// On an error nothing of the message stays.
    pub fn push_with<E>(
        &mut self,
        id: u128,
        max_payload: usize,
        user_headers: &[u8],
        fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<(), E> {
        let start = self.out.len();
        let payload_at = start + MESSAGE_HEADER_SIZE;
        self.out.resize(payload_at + max_payload, 0);
        let written = match fill(&mut self.out[payload_at..]) {
            Ok(written) => written.min(max_payload),
            Err(error) => {
                self.out.truncate(start);
                return Err(error);
            }
        };
        self.out.truncate(payload_at + written);
        let header = &mut self.out[start..payload_at];
        header[8..24].copy_from_slice(&id.to_le_bytes());
        header[24..28].copy_from_slice(&self.count.to_le_bytes());
        header[32..36].copy_from_slice(&(user_headers.len() as u32).to_le_bytes());
        header[36..40].copy_from_slice(&(written as u32).to_le_bytes());
        self.out.extend_from_slice(user_headers);
        let checksum = xxh3_64(&self.out[start + 8..]);
        self.out[start..start + 8].copy_from_slice(&checksum.to_le_bytes());
        self.count += 1;
        Ok(())
    }

    pub fn push(&mut self, id: u128, payload: &[u8], user_headers: &[u8]) {
        let copied: Result<(), std::convert::Infallible> = self.push_with(id, payload.len(), user_headers, |slot| {
            slot.copy_from_slice(payload);
            Ok(payload.len())
        });
        let Ok(()) = copied;
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    /// The sealed batch: length, count, origin timestamp and checksum filled in.
    pub fn finish(mut self, origin_timestamp: u64) -> Vec<u8> {
        let out = &mut self.out;
        let len = out.len() as u64;
        out[OFF_ORIGIN_TIMESTAMP..OFF_ORIGIN_TIMESTAMP + 8].copy_from_slice(&origin_timestamp.to_le_bytes());
        out[OFF_BATCH_LENGTH..OFF_BATCH_LENGTH + 8].copy_from_slice(&len.to_le_bytes());
        out[OFF_MESSAGE_COUNT..OFF_MESSAGE_COUNT + 4].copy_from_slice(&self.count.to_le_bytes());
        let checksum = compute_checksum(out);
        out[OFF_CHECKSUM..OFF_CHECKSUM + 8].copy_from_slice(&checksum.to_le_bytes());
        self.out
    }
}

/// Builds a batch the way a producer does; used by tests, tools and the benchmark.
pub fn build(messages: &[(u128, &[u8], &[u8])], origin_timestamp: u64) -> Vec<u8> {
    let bytes = messages.iter().map(|(_, payload, headers)| MESSAGE_HEADER_SIZE + payload.len() + headers.len()).sum();
    let mut builder = BatchBuilder::with_capacity(bytes);
    for (id, payload, headers) in messages {
        builder.push(*id, payload, headers);
    }
    builder.finish(origin_timestamp)
}

#[cfg(test)]
mod tests;
