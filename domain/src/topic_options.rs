//! Per-topic settings and the option keys that set them (the union of iggy 0.11.0's
//! `durability` catalog and the `enforce_fsync` catalog, so every 0.11 client can create topics).

use crate::constants::{
    DEFAULT_MESSAGES_REQUIRED_TO_SAVE, DEFAULT_SEGMENT_SIZE_BYTES, DEFAULT_SIZE_REQUIRED_TO_SAVE_BYTES,
    MIN_SEGMENT_SIZE_BYTES,
};
use crate::error::ErrorCode;
use crate::wire::tlv::{self, Entry};

pub const NEVER_EXPIRE: u64 = u64::MAX;
pub const UNLIMITED_SIZE: u64 = u64::MAX;
/// `message_expiry` or `max_topic_size` left to the server: resolved against
/// `[system.topic]` whenever retention runs, so a changed server default applies to every
/// topic that did not set its own.
pub const SERVER_DEFAULT: u64 = 0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None = 1,
    Gzip = 2,
}

impl Compression {
    /// The option value that names it.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
        }
    }
}

/// The settings a topic runs with. `explicit` keeps the raw keys the client sent so replies
/// can echo them, as the client's option block expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSettings {
    pub compression: Compression,
    pub message_expiry_us: u64,
    pub max_topic_size_bytes: u64,
    pub segment_size_bytes: u64,
    pub messages_required_to_save: u32,
    pub size_required_to_save_bytes: u64,
    /// Acknowledge a send only after its bytes are fsynced.
    pub enforce_fsync: bool,
    /// Fsync stored consumer offsets before acknowledging them.
    pub consumer_offset_fsync: bool,
    /// Drop messages whose id the partition stored within the window; `None` follows
    /// `[system.message_deduplication] enabled`.
    pub deduplicate: Option<bool>,
    pub explicit: Vec<u8>,
}

impl Default for TopicSettings {
    fn default() -> Self {
        Self {
            compression: Compression::None,
            message_expiry_us: SERVER_DEFAULT,
            max_topic_size_bytes: SERVER_DEFAULT,
            segment_size_bytes: DEFAULT_SEGMENT_SIZE_BYTES,
            messages_required_to_save: DEFAULT_MESSAGES_REQUIRED_TO_SAVE,
            size_required_to_save_bytes: DEFAULT_SIZE_REQUIRED_TO_SAVE_BYTES,
            enforce_fsync: false,
            consumer_offset_fsync: false,
            deduplicate: None,
            explicit: Vec::new(),
        }
    }
}

fn as_text<'a>(entry: &Entry<'a>) -> Option<&'a str> {
    (entry.value_kind == tlv::KIND_STRING).then(|| std::str::from_utf8(entry.value).ok())?
}

fn as_u64(entry: &Entry<'_>) -> Result<u64, ErrorCode> {
    let bad = ErrorCode::InvalidOptionValue;
    match entry.value_kind {
        tlv::KIND_STRING => as_text(entry).and_then(parse_size_bytes).ok_or(bad),
        _ if entry.value.len() == 8 => Ok(u64::from_le_bytes(entry.value.try_into().unwrap())),
        _ if entry.value.len() == 4 => Ok(u32::from_le_bytes(entry.value.try_into().unwrap()) as u64),
        _ => Err(bad),
    }
}

fn as_bool(entry: &Entry<'_>) -> Result<bool, ErrorCode> {
    match (entry.value_kind, entry.value) {
        (tlv::KIND_BOOL, [0]) => Ok(false),
        (tlv::KIND_BOOL, [1]) => Ok(true),
        (tlv::KIND_STRING, b"true") => Ok(true),
        (tlv::KIND_STRING, b"false") => Ok(false),
        _ => Err(ErrorCode::InvalidOptionValue),
    }
}

/// Parses a durability level: `persisted` means fsync before acknowledging.
fn durability_is_persisted(entry: &Entry<'_>) -> Result<bool, ErrorCode> {
    match as_text(entry) {
        Some("persisted") => Ok(true),
        Some("replicated") | Some("memory") | Some("none") => Ok(false),
        _ => Err(ErrorCode::InvalidOptionValue),
    }
}

/// Whether a string value names the server default.
fn is_server_default(text: &str) -> bool {
    matches!(text, "server_default" | "default")
}

/// A humantime-like duration ("7 days", "1h", "none") in microseconds, or a plain number
/// (0 and "server_default": the server's default; u64::MAX and "none": never).
fn as_expiry(entry: &Entry<'_>) -> Result<u64, ErrorCode> {
    let text = as_text(entry).map(str::trim);
    if text.is_some_and(is_server_default) {
        return Ok(SERVER_DEFAULT);
    }
    if text.is_some_and(|t| matches!(t, "none" | "never" | "never_expire" | "unlimited")) {
        return Ok(NEVER_EXPIRE);
    }
    if let Some(text) = text
        && let Some(us) = parse_duration_us(text)
    {
        return Ok(us);
    }
    as_u64(entry)
}

/// A byte count (0 and "server_default": the server's default; u64::MAX, "unlimited" and
/// "none": no cap).
fn as_max_size(entry: &Entry<'_>) -> Result<u64, ErrorCode> {
    match as_text(entry).map(str::trim) {
        Some(text) if is_server_default(text) => Ok(SERVER_DEFAULT),
        Some("unlimited" | "none") => Ok(UNLIMITED_SIZE),
        _ => as_u64(entry),
    }
}

/// Parses a plain number or a human size such as `128MiB`, `1 GB` or `512 B` (decimal units
/// are powers of 1000, binary ones powers of 1024). `unlimited` and `server_default` are 0,
/// which the callers read as "the default".
pub fn parse_size_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    if matches!(text, "unlimited" | "server_default" | "none") {
        return Some(0);
    }
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let number: u64 = text[..digits].parse().ok()?;
    let multiplier: u64 = match text[digits..].trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        _ => return None,
    };
    number.checked_mul(multiplier)
}

/// Parses `<number><unit>` pairs such as `1h 30m` or `7 days` into microseconds.
pub fn parse_duration_us(text: &str) -> Option<u64> {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let (mut total, mut rest) = (0u64, compact.as_str());
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let number: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let unit_us: u64 = match &rest[..unit_len] {
            "us" | "µs" => 1,
            "ms" => 1_000,
            "s" | "sec" | "secs" | "second" | "seconds" => 1_000_000,
            "m" | "min" | "mins" | "minute" | "minutes" => 60_000_000,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3_600_000_000,
            "d" | "day" | "days" => 86_400_000_000,
            "w" | "week" | "weeks" => 604_800_000_000,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total = total.checked_add(number.checked_mul(unit_us)?)?;
    }
    (total > 0).then_some(total)
}

impl TopicSettings {
    /// Applies an options block on top of `self`. Unknown keys are refused with 4041, so a
    /// typo never silently falls back to a default.
    pub fn apply_options(&mut self, block: &[u8], updating: bool) -> Result<(), ErrorCode> {
        let entries = tlv::decode_options(block)?;
        for entry in &entries {
            let key = std::str::from_utf8(entry.key).map_err(|_| ErrorCode::InvalidFormat)?;
            if updating && !matches!(key, "compression_algorithm" | "message_expiry" | "max_topic_size") {
                return Err(ErrorCode::UnsupportedOptionKey);
            }
            self.apply_one(key, entry)?;
        }
        if !updating {
            self.explicit = block.to_vec();
        }
        Ok(())
    }

    /// Sets one key from its TLV entry, checked as a create checks it.
    pub(crate) fn apply_entry(&mut self, key: &str, entry: &Entry<'_>) -> Result<(), ErrorCode> {
        self.apply_one(key, entry)
    }

    fn apply_one(&mut self, key: &str, entry: &Entry<'_>) -> Result<(), ErrorCode> {
        let bad = ErrorCode::InvalidOptionValue;
        match key {
            "compression_algorithm" => {
                self.compression = match as_text(entry).map(str::to_ascii_lowercase).as_deref() {
                    Some("none") => Compression::None,
                    Some("gzip") => Compression::Gzip,
                    _ => return Err(bad),
                }
            }
            "message_expiry" => self.message_expiry_us = as_expiry(entry)?,
            "max_topic_size" => self.max_topic_size_bytes = as_max_size(entry)?,
            "segment_size" => {
                let value = as_u64(entry)?;
                if !(MIN_SEGMENT_SIZE_BYTES..=DEFAULT_SEGMENT_SIZE_BYTES).contains(&value) || value % 512 != 0 {
                    return Err(bad);
                }
                self.segment_size_bytes = value;
            }
            "messages_required_to_save" => {
                let value = as_u64(entry)?;
                if value == 0 || value > u32::MAX as u64 {
                    return Err(bad);
                }
                self.messages_required_to_save = value as u32;
            }
            "size_of_messages_required_to_save" => {
                let value = as_u64(entry)?;
                if value == 0 || value > DEFAULT_SEGMENT_SIZE_BYTES {
                    return Err(bad);
                }
                self.size_required_to_save_bytes = value;
            }
            "durability" => self.enforce_fsync = durability_is_persisted(entry)?,
            "consumer_offset_durability" => self.consumer_offset_fsync = durability_is_persisted(entry)?,
            "enforce_fsync" => self.enforce_fsync = as_bool(entry)?,
            "message_deduplication" => {
                self.deduplicate = match as_text(entry).map(str::trim) {
                    Some(text) if is_server_default(text) => None,
                    _ => Some(as_bool(entry)?),
                }
            }
            "preallocate_segments" => {
                as_bool(entry)?;
            }
            // Checked here against the protocol's bounds, and against the node count by the
            // server before it commits (`replication_factor`); nothing is stored yet.
            "replication_factor" => {
                replication_factor_of(entry)?;
            }
            _ => return Err(ErrorCode::UnsupportedOptionKey),
        }
        Ok(())
    }

    /// The derived option block: every setting the server fills in, as strings.
    pub fn derived_options(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let durability = |fsync: bool| if fsync { "persisted" } else { "replicated" };
        tlv::put(&mut out, "compression_algorithm", tlv::KIND_STRING, self.compression.name().as_bytes());
        tlv::put(
            &mut out,
            "consumer_offset_durability",
            tlv::KIND_STRING,
            durability(self.consumer_offset_fsync).as_bytes(),
        );
        tlv::put(&mut out, "durability", tlv::KIND_STRING, durability(self.enforce_fsync).as_bytes());
        tlv::put(&mut out, "max_topic_size", tlv::KIND_UINT64, &self.max_topic_size_bytes.to_le_bytes());
        if let Some(deduplicate) = self.deduplicate {
            tlv::put(&mut out, "message_deduplication", tlv::KIND_BOOL, &[deduplicate as u8]);
        }
        tlv::put(&mut out, "message_expiry", tlv::KIND_UINT64, &self.message_expiry_us.to_le_bytes());
        tlv::put(
            &mut out,
            "messages_required_to_save",
            tlv::KIND_UINT32,
            &self.messages_required_to_save.to_le_bytes(),
        );
        tlv::put(&mut out, "segment_size", tlv::KIND_UINT64, &self.segment_size_bytes.to_le_bytes());
        tlv::put(
            &mut out,
            "size_of_messages_required_to_save",
            tlv::KIND_UINT64,
            &self.size_required_to_save_bytes.to_le_bytes(),
        );
        out
    }
}

/// The most replicas a topic may ask for (0.12's `replication_factor`).
pub const MAX_REPLICATION_FACTOR: u32 = 32;

fn replication_factor_of(entry: &Entry<'_>) -> Result<u32, ErrorCode> {
    match as_u64(entry) {
        Ok(factor @ 1..=32) => Ok(factor as u32),
        _ => Err(ErrorCode::InvalidReplicationFactor),
    }
}

/// The `replication_factor` a topic's option block asks for (1 to 32), if any.
pub fn replication_factor(options: &[u8]) -> Result<Option<u32>, ErrorCode> {
    let entries = tlv::decode_options(options)?;
    let requested = entries.iter().find(|entry| entry.key == b"replication_factor".as_slice());
    requested.map(replication_factor_of).transpose()
}

/// The scopes DESCRIBE_OPTIONS (code 13) names: whose create command the catalog describes.
pub const SCOPE_TOPIC: u8 = 1;
pub const SCOPE_STREAM: u8 = 2;
pub const SCOPE_USER: u8 = 3;

/// One key a create command accepts, with its canonical value kind, its default encoded in
/// that kind (empty: no default) and a line for people, as DESCRIBE_OPTIONS reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionSpec {
    pub key: &'static str,
    pub kind: u8,
    pub default: Vec<u8>,
    pub description: &'static str,
}

impl OptionSpec {
    /// The 0.12 catalog's flag bits for this key: 1 updatable, 2 resettable (the keys
    /// UPDATE_RESOURCE may set or reset).
    pub fn flags(&self) -> u8 {
        match self.key {
            "name" | "username" | "status" => 1,
            "message_expiry" | "max_topic_size" => 1 | 2,
            _ => 0,
        }
    }
}

/// The option catalog of a scope, sorted by key. Topic defaults are read off
/// `TopicSettings::default()`, so the catalog cannot drift from what a create does without
/// options. Streams and users take no keys: their create commands refuse any (4041).
pub fn option_catalog(scope: u8) -> Vec<OptionSpec> {
    if scope == SCOPE_STREAM {
        return vec![OptionSpec {
            key: crate::stream_options::ENCRYPTION_KEY,
            kind: tlv::KIND_RAW,
            default: Vec::new(),
            description: "the stream's own at-rest key, 32 bytes raw or base64; create-only, never returned; needs the server key ([system.encryption]), which otherwise draws one for every new stream",
        }];
    }
    if scope != SCOPE_TOPIC {
        return Vec::new();
    }
    let d = TopicSettings::default();
    let text = |value: &str| value.as_bytes().to_vec();
    let durability = |fsync: bool| text(if fsync { "persisted" } else { "replicated" });
    let spec = |key, kind, default, description| OptionSpec { key, kind, default, description };
    vec![
        spec(
            "compression_algorithm",
            tlv::KIND_STRING,
            text(d.compression.name()),
            "none or gzip, recorded for clients: payloads are stored as sent",
        ),
        spec(
            "consumer_offset_durability",
            tlv::KIND_STRING,
            durability(d.consumer_offset_fsync),
            "persisted: fsync a stored consumer offset before acknowledging it; replicated: written, synced later",
        ),
        spec(
            "durability",
            tlv::KIND_STRING,
            durability(d.enforce_fsync),
            "persisted: acknowledge a send only after its messages are fsynced; replicated: once they are in the partition journal",
        ),
        spec(
            "enforce_fsync",
            tlv::KIND_BOOL,
            vec![d.enforce_fsync as u8],
            "true is the same as durability = persisted",
        ),
        spec(
            "max_topic_size",
            tlv::KIND_UINT64,
            d.max_topic_size_bytes.to_le_bytes().to_vec(),
            "Bytes the topic may hold, shared equally by its partitions; the oldest sealed segments are deleted past it (0: the server default, [system.topic] max_size; u64::MAX: unlimited)",
        ),
        spec(
            "message_deduplication",
            tlv::KIND_STRING,
            text("server_default"),
            "true: drop a message whose id this partition stored within the dedup window ([system.message_deduplication] max_entries, expiry), so a retried send is stored once; id 0 never is; server_default follows [system.message_deduplication] enabled",
        ),
        spec(
            "message_expiry",
            tlv::KIND_UINT64,
            d.message_expiry_us.to_le_bytes().to_vec(),
            "Microseconds (or a duration such as 7 days) a message is kept; sealed segments whose newest message is older are deleted (0: the server default, [system.topic] message_expiry; u64::MAX: never)",
        ),
        spec(
            "messages_required_to_save",
            tlv::KIND_UINT32,
            d.messages_required_to_save.to_le_bytes().to_vec(),
            "Messages a partition buffers before it writes them to its segment",
        ),
        spec(
            "preallocate_segments",
            tlv::KIND_BOOL,
            vec![0],
            "Accepted for compatibility; segment files are not preallocated",
        ),
        spec(
            "replication_factor",
            tlv::KIND_UINT32,
            1u32.to_le_bytes().to_vec(),
            "Replicas of each partition, 1 to the number of nodes (at most 32); checked at create, partitions are not yet placed by it",
        ),
        spec(
            "segment_size",
            tlv::KIND_UINT64,
            d.segment_size_bytes.to_le_bytes().to_vec(),
            "Bytes a segment holds before it is sealed: a multiple of 512 from 1 MiB to 1 GiB",
        ),
        spec(
            "size_of_messages_required_to_save",
            tlv::KIND_UINT64,
            d.size_required_to_save_bytes.to_le_bytes().to_vec(),
            "Bytes a partition buffers before it writes them to its segment (at most 1 GiB)",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(pairs: &[(&str, u8, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (key, kind, value) in pairs {
            tlv::put(&mut out, key, *kind, value);
        }
        out
    }

    #[test]
    fn accepts_the_iggy_0_11_default_block() {
        let options = block(&[
            ("consumer_offset_durability", tlv::KIND_STRING, b"replicated"),
            ("durability", tlv::KIND_STRING, b"persisted"),
        ]);
        let mut settings = TopicSettings::default();
        settings.apply_options(&options, false).unwrap();
        assert!(settings.enforce_fsync);
        assert!(!settings.consumer_offset_fsync);
        assert_eq!(settings.explicit, options);
    }

    #[test]
    fn accepts_enforce_fsync_and_thresholds() {
        let options = block(&[
            ("enforce_fsync", tlv::KIND_BOOL, &[1]),
            ("messages_required_to_save", tlv::KIND_STRING, b"10"),
            ("segment_size", tlv::KIND_UINT64, &(2u64 << 20).to_le_bytes()),
        ]);
        let mut settings = TopicSettings::default();
        settings.apply_options(&options, false).unwrap();
        assert!(settings.enforce_fsync);
        assert_eq!(settings.messages_required_to_save, 10);
        assert_eq!(settings.segment_size_bytes, 2 << 20);
    }

    #[test]
    fn rejects_unknown_keys_and_bad_values() {
        let mut settings = TopicSettings::default();
        let unknown = block(&[("colour", tlv::KIND_STRING, b"red")]);
        assert_eq!(settings.apply_options(&unknown, false), Err(ErrorCode::UnsupportedOptionKey));
        let bad = block(&[("segment_size", tlv::KIND_UINT64, &5u64.to_le_bytes())]);
        assert_eq!(settings.apply_options(&bad, false), Err(ErrorCode::InvalidOptionValue));
        let zero = block(&[("messages_required_to_save", tlv::KIND_UINT32, &0u32.to_le_bytes())]);
        assert_eq!(settings.apply_options(&zero, false), Err(ErrorCode::InvalidOptionValue));
    }

    #[test]
    fn parses_human_sizes() {
        assert_eq!(parse_size_bytes("128MiB"), Some(128 << 20));
        assert_eq!(parse_size_bytes("15 GB"), Some(15_000_000_000));
        assert_eq!(parse_size_bytes("4096"), Some(4096));
        assert_eq!(parse_size_bytes("unlimited"), Some(0));
        assert_eq!(parse_size_bytes("lots"), None);
    }

    #[test]
    fn parses_human_durations() {
        assert_eq!(parse_duration_us("7 days"), Some(7 * 86_400_000_000));
        assert_eq!(parse_duration_us("1h 30m"), Some(5_400_000_000));
        assert_eq!(parse_duration_us("soon"), None);
    }

    #[test]
    fn the_topic_catalog_names_every_accepted_key_with_a_default_that_applies() {
        let catalog = option_catalog(SCOPE_TOPIC);
        let keys: Vec<&str> = catalog.iter().map(|spec| spec.key).collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        assert_eq!(keys, sorted, "sorted by key");
        assert_eq!(keys.len(), 12);
        // Every key is one a create accepts, and its default, sent back as the client would,
        // leaves the settings exactly at their defaults.
        for spec in &catalog {
            let options = block(&[(spec.key, spec.kind, &spec.default)]);
            let mut settings = TopicSettings::default();
            settings.apply_options(&options, false).unwrap_or_else(|e| panic!("{}: {e:?}", spec.key));
            settings.explicit.clear();
            assert_eq!(settings, TopicSettings::default(), "{}", spec.key);
        }
        let stream: Vec<&str> = option_catalog(SCOPE_STREAM).iter().map(|spec| spec.key).collect();
        assert_eq!(stream, ["encryption_key"]);
        assert!(option_catalog(SCOPE_USER).is_empty());
    }
}
