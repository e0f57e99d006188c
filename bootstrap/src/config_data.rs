//! The data settings of the configuration: topic retention defaults, checksum validation on
//! reads, message-id deduplication, the cleaner, the scrubber and the free-space floor.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use rill_application::config::{DataConfig, FreeSpaceFloor};
use rill_application::partition::{DedupSettings, DirectIo, PartitionDefaults};
use rill_domain::retention::RetentionDefaults;
use rill_domain::topic_options::{NEVER_EXPIRE, UNLIMITED_SIZE, parse_duration_us, parse_size_bytes};
use toml::Value;

pub(crate) fn text<'a>(leaves: &'a BTreeMap<String, Value>, key: &str) -> &'a str {
    leaves[key].as_str().expect("types were checked against the defaults")
}

pub(crate) fn flag(leaves: &BTreeMap<String, Value>, key: &str) -> bool {
    leaves[key].as_bool().expect("types were checked against the defaults")
}

fn duration(leaves: &BTreeMap<String, Value>, key: &str) -> anyhow::Result<u64> {
    let value = text(leaves, key);
    parse_duration_us(value)
        .with_context(|| format!("invalid value for `{key}`: `{value}` (expected a duration such as \"1 m\")"))
}

fn size(leaves: &BTreeMap<String, Value>, key: &str) -> anyhow::Result<u64> {
    let value = text(leaves, key);
    parse_size_bytes(value)
        .filter(|&bytes| bytes > 0)
        .with_context(|| format!("invalid value for `{key}`: `{value}` (expected a size such as \"8 MiB\")"))
}

/// `[system.topic] message_expiry`: a duration, or "none" for never.
fn default_expiry(leaves: &BTreeMap<String, Value>) -> anyhow::Result<u64> {
    let key = "system.topic.message_expiry";
    match text(leaves, key).trim() {
        "none" | "never" | "unlimited" => Ok(NEVER_EXPIRE),
        _ => duration(leaves, key),
    }
}

/// `[system.topic] max_size`: a size, or "unlimited".
fn default_max_size(leaves: &BTreeMap<String, Value>) -> anyhow::Result<u64> {
    let key = "system.topic.max_size";
    match text(leaves, key).trim() {
        "unlimited" | "none" => Ok(UNLIMITED_SIZE),
        _ => size(leaves, key),
    }
}

/// `[system.disk] min_free_space`: bytes, or a percentage of the volume with up to two
/// decimals ("5%", "2.5%").
fn free_space_floor(leaves: &BTreeMap<String, Value>) -> anyhow::Result<FreeSpaceFloor> {
    let key = "system.disk.min_free_space";
    let value = text(leaves, key).trim();
    let Some(percent) = value.strip_suffix('%') else {
        let bytes = parse_size_bytes(value).with_context(|| {
            format!("invalid value for `{key}`: `{value}` (expected a size such as \"64 MiB\" or a percentage such as \"5%\")")
        })?;
        return Ok(FreeSpaceFloor::Bytes(bytes));
    };
    let basis = percent
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|p| (0.0..=100.0).contains(p))
        .map(|p| (p * 100.0).round() as u32)
        .with_context(|| format!("invalid value for `{key}`: `{value}` (expected a percentage from 0% to 100%)"))?;
    Ok(FreeSpaceFloor::Basis(basis))
}

/// A size that may be 0 ("0" or "0 B": none).
fn cache_size(leaves: &BTreeMap<String, Value>, key: &str) -> anyhow::Result<u64> {
    let value = text(leaves, key);
    if value.trim() == "0" {
        return Ok(0);
    }
    parse_size_bytes(value)
        .with_context(|| format!("invalid value for `{key}`: `{value}` (expected a size such as \"256 MiB\", or 0)"))
}

/// `[system.partition] direct_io`: "off", "persisted" or "all".
fn direct_io(leaves: &BTreeMap<String, Value>) -> anyhow::Result<DirectIo> {
    let key = "system.partition.direct_io";
    match text(leaves, key).trim() {
        "off" => Ok(DirectIo::Off),
        "persisted" => Ok(DirectIo::Persisted),
        "all" => Ok(DirectIo::All),
        other => bail!("invalid value for `{key}`: `{other}` (expected \"off\", \"persisted\" or \"all\")"),
    }
}

pub fn data_config(leaves: &BTreeMap<String, Value>) -> anyhow::Result<DataConfig> {
    let max_entries = leaves["system.message_deduplication.max_entries"]
        .as_integer()
        .expect("types were checked against the defaults");
    if !(1..=10_000_000).contains(&max_entries) {
        bail!("invalid value for `system.message_deduplication.max_entries`: `{max_entries}` (expected 1 to 10000000)");
    }
    let partition = PartitionDefaults {
        validate_checksum: flag(leaves, "system.partition.validate_checksum"),
        deduplicate: flag(leaves, "system.message_deduplication.enabled"),
        dedup_window: DedupSettings {
            max_entries: max_entries as usize,
            expiry_us: duration(leaves, "system.message_deduplication.expiry")?,
        },
        direct_io: direct_io(leaves)?,
        producer_expiry_us: duration(leaves, "system.producers.expiry")?,
    };
    let cleaner_interval_us = flag(leaves, "data_maintenance.messages.cleaner_enabled")
        .then(|| duration(leaves, "data_maintenance.messages.interval"))
        .transpose()?;
    let scrub_bytes_per_second = flag(leaves, "data_maintenance.scrubber.enabled")
        .then(|| size(leaves, "data_maintenance.scrubber.rate"))
        .transpose()?;
    Ok(DataConfig {
        partition,
        retention: RetentionDefaults {
            message_expiry_us: default_expiry(leaves)?,
            max_topic_size_bytes: default_max_size(leaves)?,
        },
        cleaner_interval_us,
        scrub_bytes_per_second,
        min_free_space: free_space_floor(leaves)?,
        space_check_interval_us: duration(leaves, "system.disk.check_interval")?,
        direct_io_cache_bytes: cache_size(leaves, "system.partition.direct_io_cache")?,
        spare_logs_bytes: cache_size(leaves, "system.partition.spare_logs")?,
        // A floor is one node's: copies of a replicated partition must stamp alike.
    })
}

#[cfg(test)]
mod tests {
    use crate::config::load;
    use rill_application::config::FreeSpaceFloor;
    use std::collections::BTreeMap;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn defaults_keep_everything_and_verify_reads() {
        let data = load(None, &env(&[])).unwrap().data;
        assert!(data.partition.validate_checksum);
        assert!(!data.partition.deduplicate);
        assert_eq!(data.retention, Default::default());
        assert_eq!(data.cleaner_interval_us, Some(60_000_000));
        assert_eq!(data.min_free_space, FreeSpaceFloor::Bytes(64 << 20));
    }

    #[test]
    fn iggy_keys_set_the_server_defaults() {
        let data = load(
            None,
            &env(&[
                ("IGGY_SYSTEM_TOPIC_MESSAGE_EXPIRY", "2 s"),
                ("IGGY_SYSTEM_TOPIC_MAX_SIZE", "1 GiB"),
                ("IGGY_DATA_MAINTENANCE_MESSAGES_INTERVAL", "500 ms"),
                ("IGGY_DATA_MAINTENANCE_SCRUBBER_ENABLED", "false"),
                ("IGGY_SYSTEM_MESSAGE_DEDUPLICATION_ENABLED", "true"),
                ("IGGY_SYSTEM_DISK_MIN_FREE_SPACE", "2.5%"),
            ]),
        )
        .unwrap()
        .data;
        assert_eq!(data.retention.message_expiry_us, 2_000_000);
        assert_eq!(data.retention.max_topic_size_bytes, 1 << 30);
        assert_eq!(data.cleaner_interval_us, Some(500_000));
        assert_eq!(data.scrub_bytes_per_second, None);
        assert!(data.partition.deduplicate);
        assert_eq!(data.min_free_space, FreeSpaceFloor::Basis(250));
        assert_eq!(data.min_free_space.bytes(10_000), 250);
    }

    #[test]
    fn direct_io_names_which_topics_bypass_the_page_cache() {
        use rill_application::partition::DirectIo;
        let defaults = load(None, &env(&[])).unwrap().data;
        assert_eq!(defaults.partition.direct_io, DirectIo::Persisted);
        assert_eq!(defaults.direct_io_cache_bytes, 256 << 20);
        assert_eq!(defaults.spare_logs_bytes, 512 << 20);
        let none = load(None, &env(&[("IGGY_SYSTEM_PARTITION_DIRECT_IO_CACHE", "0")])).unwrap().data;
        assert_eq!(none.direct_io_cache_bytes, 0);
        let spares = load(None, &env(&[("IGGY_SYSTEM_PARTITION_SPARE_LOGS", "0")])).unwrap().data;
        assert_eq!(spares.spare_logs_bytes, 0);
        for (value, expected) in [("off", DirectIo::Off), ("persisted", DirectIo::Persisted), ("all", DirectIo::All)] {
            let data = load(None, &env(&[("IGGY_SYSTEM_PARTITION_DIRECT_IO", value)])).unwrap().data;
            assert_eq!(data.partition.direct_io, expected, "{value}");
        }
    }

    #[test]
    fn bad_data_values_stop_the_start() {
        for (key, value) in [
            ("IGGY_SYSTEM_TOPIC_MESSAGE_EXPIRY", "soon"),
            ("IGGY_SYSTEM_TOPIC_MAX_SIZE", "big"),
            ("IGGY_SYSTEM_DISK_MIN_FREE_SPACE", "150%"),
            ("IGGY_SYSTEM_MESSAGE_DEDUPLICATION_MAX_ENTRIES", "0"),
            ("IGGY_DATA_MAINTENANCE_SCRUBBER_RATE", "fast"),
            ("IGGY_SYSTEM_PARTITION_DIRECT_IO", "sometimes"),
            ("IGGY_SYSTEM_PARTITION_DIRECT_IO_CACHE", "lots"),
        ] {
            let error = load(None, &env(&[(key, value)])).unwrap_err().to_string();
            assert!(error.contains(value), "{key}: {error}");
        }
    }
}
