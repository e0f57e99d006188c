//! A clock that moves only when the test moves it.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use rill_application::ports::Clock;

#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now_us: Rc<Cell<u64>>,
    /// Whether a sleep lasts until the test moves the clock past its end; otherwise every
    /// sleep completes at once.
    held: bool,
    sleepers: Rc<RefCell<Vec<Waker>>>,
}

impl ManualClock {
    pub fn new(start_us: u64) -> Self {
        Self { now_us: Rc::new(Cell::new(start_us)), ..Self::default() }
    }

    /// A clock whose sleeps end only when [`ManualClock::advance_us`] reaches their end:
    /// for tests of what waits (deferred polls).
    pub fn with_held_sleeps(start_us: u64) -> Self {
        Self { held: true, ..Self::new(start_us) }
    }

    pub fn advance_us(&self, delta: u64) {
        self.now_us.set(self.now_us.get() + delta);
        self.sleepers.borrow_mut().drain(..).for_each(Waker::wake);
    }
}

/// A sleep on a [`ManualClock`].
pub struct Sleep {
    clock: ManualClock,
    until_us: Option<u64>,
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.until_us {
            Some(until_us) if self.clock.now_us.get() < until_us => {
                self.clock.sleepers.borrow_mut().push(cx.waker().clone());
                Poll::Pending
            }
            _ => Poll::Ready(()),
        }
    }
}

impl Clock for ManualClock {
    fn now_us(&self) -> u64 {
        self.now_us.get()
    }

    fn monotonic_us(&self) -> u64 {
        self.now_us.get()
    }

    /// Completes at once, unless the clock holds sleeps (`with_held_sleeps`).
    fn sleep_us(&self, us: u64) -> impl Future<Output = ()> {
        let until_us = self.held.then(|| self.now_us.get().saturating_add(us));
        Sleep { clock: self.clone(), until_us }
    }
}
