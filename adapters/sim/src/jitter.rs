//! Seeded pauses for the shard simulation: a simulated bus hop or disk call may yield to
//! the executor a few times before it takes effect, so the seeded executor can run other
//! requests in between, as io_uring completions and channel hops let them interleave on a
//! real shard. Off (never yields) unless seeded.

use std::cell::Cell;
use std::rc::Rc;

use rill_application::yield_now::yield_now;

#[derive(Debug, Clone, Default)]
pub struct Jitter {
    /// xorshift state, shared by every clone; 0 means off.
    state: Rc<Cell<u64>>,
    /// Chance in percent of one more yield.
    percent: u64,
}

impl Jitter {
    /// Yields again with `percent` chance each time, from `seed`.
    pub fn seeded(seed: u64, percent: u64) -> Self {
        Self { state: Rc::new(Cell::new(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1)), percent: percent.min(90) }
    }

    fn next(&self) -> u64 {
        let mut x = self.state.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.state.set(x);
        x
    }

    /// Yields a seeded number of times (none when off).
    pub async fn pause(&self) {
        if self.state.get() == 0 {
            return;
        }
        while self.next() % 100 < self.percent {
            yield_now().await;
        }
    }
}
