//! A clock that moves only when the test moves it.

use std::cell::Cell;
use std::rc::Rc;

use rill_application::ports::Clock;

#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now_us: Rc<Cell<u64>>,
}

impl ManualClock {
    pub fn new(start_us: u64) -> Self {
        Self { now_us: Rc::new(Cell::new(start_us)) }
    }

    pub fn advance_us(&self, delta: u64) {
        self.now_us.set(self.now_us.get() + delta);
    }
}

impl Clock for ManualClock {
    fn now_us(&self) -> u64 {
        self.now_us.get()
    }

    fn monotonic_us(&self) -> u64 {
        self.now_us.get()
    }

    /// Completes at once: simulated time moves only when the test moves it.
    fn sleep_us(&self, _us: u64) -> impl std::future::Future<Output = ()> {
        std::future::ready(())
    }
}
