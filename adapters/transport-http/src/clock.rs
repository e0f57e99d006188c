//! Wall-clock time on the HTTP thread.

/// Wall-clock microseconds, for token expiry checks and batch timestamps.
pub(crate) fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}
