//! Clock port: the only source of time for the use cases.
//!
//! Contract: `now_us` is wall-clock time in microseconds since the Unix epoch and is what
//! messages and resources are stamped with; `monotonic_us` never goes backwards and is used
//! for durations only; `sleep_us` completes once at least that many microseconds passed (a
//! simulated clock may complete it at once: a use case must not rely on it to advance time).

use std::future::Future;

pub trait Clock {
    fn now_us(&self) -> u64;
    fn monotonic_us(&self) -> u64;
    fn sleep_us(&self, us: u64) -> impl Future<Output = ()>;
}
