//! Request latency histograms, keyed by transport family and request name, shared by
//! every shard and the HTTP thread. Recording is a few relaxed atomic adds; the key set is
//! bounded by the finite set of command names and HTTP routes.

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the buckets, in microseconds; a last, implicit bucket is +Inf.
pub const BUCKET_BOUNDS_US: [u64; 14] =
    [100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 5_000_000];

/// Keys beyond this many are folded into one "other" histogram, so a client cannot grow
/// the table (HTTP routes are matched patterns, never raw paths, but the bound holds
/// regardless).
const MAX_KEYS: usize = 512;

/// One histogram: a count per bucket (not cumulative), the sum and the total.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKET_BOUNDS_US.len() + 1],
    sum_us: AtomicU64,
}

/// A consistent-enough copy of a histogram for rendering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Cumulative counts per bound, then the +Inf count (= total).
    pub cumulative: Vec<u64>,
    pub sum_us: u64,
}

impl Histogram {
    pub fn record(&self, elapsed_us: u64) {
        let bucket = BUCKET_BOUNDS_US.iter().position(|&bound| elapsed_us <= bound).unwrap_or(BUCKET_BOUNDS_US.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(elapsed_us, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut running = 0;
        let cumulative = self
            .buckets
            .iter()
            .map(|count| {
                running += count.load(Ordering::Relaxed);
                running
            })
            .collect();
        HistogramSnapshot { cumulative, sum_us: self.sum_us.load(Ordering::Relaxed) }
    }
}

/// Histograms of the binary protocol (TCP, QUIC, WebSocket) by command name, and of
/// HTTP by matched route. Lookups borrow the key, so recording does not allocate.
#[derive(Debug, Default)]
pub struct RequestLatency {
    binary: papaya::HashMap<&'static str, Histogram>,
    http: papaya::HashMap<String, Histogram>,
}

impl RequestLatency {
    pub fn record_binary(&self, command: &'static str, elapsed_us: u64) {
        self.binary.pin().get_or_insert_with(command, Histogram::default).record(elapsed_us);
    }

    pub fn record_http(&self, route: &str, elapsed_us: u64) {
        let table = self.http.pin();
        if let Some(histogram) = table.get(route) {
            return histogram.record(elapsed_us);
        }
        let key = if table.len() < MAX_KEYS { route } else { "other" };
        table.get_or_insert_with(key.to_owned(), Histogram::default).record(elapsed_us);
    }

    /// Every histogram as `(transport, request, snapshot)`, sorted.
    pub fn snapshot(&self) -> Vec<(&'static str, String, HistogramSnapshot)> {
        let mut out: Vec<_> = self
            .binary
            .pin()
            .iter()
            .map(|(name, histogram)| ("binary", (*name).to_owned(), histogram.snapshot()))
            .chain(self.http.pin().iter().map(|(route, histogram)| ("http", route.clone(), histogram.snapshot())))
            .collect();
        out.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_into_cumulative_buckets() {
        let latency = RequestLatency::default();
        latency.record_binary("ping", 50);
        latency.record_binary("ping", 300);
        latency.record_binary("ping", 10_000_000);
        let snapshot = latency.snapshot();
        assert_eq!(snapshot.len(), 1);
        let (transport, name, histogram) = &snapshot[0];
        assert_eq!((*transport, name.as_str()), ("binary", "ping"));
        assert_eq!(histogram.cumulative[0], 1, "<= 100 us");
        assert_eq!(histogram.cumulative[2], 2, "<= 500 us");
        assert_eq!(*histogram.cumulative.last().unwrap(), 3, "+Inf counts all");
        assert_eq!(histogram.sum_us, 10_000_350);
    }

    #[test]
    fn the_key_set_is_bounded() {
        let latency = RequestLatency::default();
        for index in 0..MAX_KEYS + 10 {
            latency.record_http(&format!("route-{index}"), 1);
        }
        assert!(latency.snapshot().len() <= MAX_KEYS + 1);
    }
}
