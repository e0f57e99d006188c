//! The system clock adapter: wall time from `SystemTime`, monotonic time from `Instant`,
//! sleeps on the shard's compio runtime.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use rill_application::ports::Clock;

#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: Instant,
}

impl Default for SystemClock {
    fn default() -> Self {
        Self { origin: Instant::now() }
    }
}

impl Clock for SystemClock {
    fn now_us(&self) -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
    }

    fn monotonic_us(&self) -> u64 {
        self.origin.elapsed().as_micros() as u64
    }

    fn sleep_us(&self, us: u64) -> impl std::future::Future<Output = ()> {
        compio::time::sleep(std::time::Duration::from_micros(us))
    }
}
