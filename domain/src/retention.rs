//! Retention: which sealed segments of a partition a cleaning pass deletes, from the topic's
//! message expiry and its size cap. Only whole sealed segments go, oldest first; the active
//! segment is never deleted.

use crate::topic_options::{NEVER_EXPIRE, SERVER_DEFAULT, TopicSettings, UNLIMITED_SIZE};

/// What the decision needs to know of one sealed segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealedSegment {
    pub size_bytes: u64,
    /// Append time (µs) of the segment's newest batch.
    pub newest_timestamp_us: u64,
}

/// A partition's retention limits, with server defaults already resolved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Messages older than this (µs) may go; `None` keeps them forever.
    pub expiry_us: Option<u64>,
    /// The partition's share of the topic's size cap; `None` is unlimited.
    pub max_partition_bytes: Option<u64>,
}

impl RetentionPolicy {
    pub fn is_unlimited(&self) -> bool {
        self.expiry_us.is_none() && self.max_partition_bytes.is_none()
    }
}

/// The server-wide values a topic's `server default` (0) stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionDefaults {
    pub message_expiry_us: u64,
    pub max_topic_size_bytes: u64,
}

impl Default for RetentionDefaults {
    fn default() -> Self {
        Self { message_expiry_us: NEVER_EXPIRE, max_topic_size_bytes: UNLIMITED_SIZE }
    }
}

/// A topic value, or the server default it stands for; then `None` for "no limit".
fn resolve(value: u64, default: u64, none: u64) -> Option<u64> {
    let resolved = if value == SERVER_DEFAULT { default } else { value };
    (resolved != none && resolved != SERVER_DEFAULT).then_some(resolved)
}

impl RetentionPolicy {
    /// The policy of one of a topic's `partitions`: the expiry as is, and an equal share of
    /// the size cap (each partition is cleaned by its own shard, so none holds a total).
    pub fn for_partition(topic: &TopicSettings, partitions: u32, defaults: RetentionDefaults) -> Self {
        let expiry_us = resolve(topic.message_expiry_us, defaults.message_expiry_us, NEVER_EXPIRE);
        let max_partition_bytes = resolve(topic.max_topic_size_bytes, defaults.max_topic_size_bytes, UNLIMITED_SIZE)
            .map(|cap| cap / u64::from(partitions.max(1)));
        Self { expiry_us, max_partition_bytes }
    }
}

/// How many of the oldest sealed segments (`sealed`, oldest first) to delete at `now_us`:
/// every leading one whose newest message has expired, then more while the partition
/// (sealed plus `active_bytes`) is above its size share.
pub fn segments_to_delete(sealed: &[SealedSegment], active_bytes: u64, now_us: u64, policy: RetentionPolicy) -> usize {
    let mut count = 0;
    if let Some(expiry) = policy.expiry_us {
        count = sealed.iter().take_while(|s| s.newest_timestamp_us.saturating_add(expiry) <= now_us).count();
    }
    if let Some(budget) = policy.max_partition_bytes {
        let mut total: u64 = active_bytes + sealed[count..].iter().map(|s| s.size_bytes).sum::<u64>();
        while count < sealed.len() && total > budget {
            total -= sealed[count].size_bytes;
            count += 1;
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(size_bytes: u64, newest_timestamp_us: u64) -> SealedSegment {
        SealedSegment { size_bytes, newest_timestamp_us }
    }

    #[test]
    fn expired_segments_go_oldest_first_and_stop_at_the_first_fresh_one() {
        let sealed = [segment(10, 100), segment(10, 200), segment(10, 300)];
        let policy = RetentionPolicy { expiry_us: Some(50), max_partition_bytes: None };
        assert_eq!(segments_to_delete(&sealed, 0, 149, policy), 0);
        assert_eq!(segments_to_delete(&sealed, 0, 150, policy), 1);
        assert_eq!(segments_to_delete(&sealed, 0, 260, policy), 2);
        assert_eq!(segments_to_delete(&sealed, 0, u64::MAX, policy), 3, "the active one is not in the list");
    }

    #[test]
    fn the_size_share_deletes_until_the_partition_fits() {
        let sealed = [segment(10, 1), segment(10, 2), segment(10, 3)];
        let policy = RetentionPolicy { expiry_us: None, max_partition_bytes: Some(25) };
        assert_eq!(segments_to_delete(&sealed, 5, 0, policy), 1, "35 bytes, 25 after one");
        assert_eq!(segments_to_delete(&sealed, 0, 0, policy), 1);
        assert_eq!(segments_to_delete(&sealed, 100, 0, policy), 3, "never the active segment");
        let roomy = RetentionPolicy { max_partition_bytes: Some(1000), ..policy };
        assert_eq!(segments_to_delete(&sealed, 5, 0, roomy), 0);
    }

    #[test]
    fn both_limits_add_up() {
        let sealed = [segment(10, 1), segment(10, 2), segment(10, 300)];
        let policy = RetentionPolicy { expiry_us: Some(100), max_partition_bytes: Some(10) };
        assert_eq!(segments_to_delete(&sealed, 0, 150, policy), 2);
        assert_eq!(segments_to_delete(&sealed, 1, 150, policy), 3);
        assert_eq!(segments_to_delete(&[], 1000, 150, policy), 0);
    }

    #[test]
    fn server_defaults_fill_in_and_the_cap_is_shared() {
        let mut topic = TopicSettings::default();
        assert!(RetentionPolicy::for_partition(&topic, 1, RetentionDefaults::default()).is_unlimited());
        let defaults = RetentionDefaults { message_expiry_us: 7, max_topic_size_bytes: 300 };
        let policy = RetentionPolicy::for_partition(&topic, 3, defaults);
        assert_eq!(policy, RetentionPolicy { expiry_us: Some(7), max_partition_bytes: Some(100) });
        topic.message_expiry_us = NEVER_EXPIRE;
        topic.max_topic_size_bytes = 90;
        let policy = RetentionPolicy::for_partition(&topic, 3, defaults);
        assert_eq!(policy, RetentionPolicy { expiry_us: None, max_partition_bytes: Some(30) });
        let policy = RetentionPolicy::for_partition(&topic, 0, defaults);
        assert_eq!(policy.max_partition_bytes, Some(90), "no partitions: no share to split");
    }
}
