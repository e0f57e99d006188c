//! Giving the executor a turn: `yield_now` is pending once, having woken itself, so every
//! task already woken runs before the caller goes on. The flusher yields between chunks so
//! a send woken by the partition's lock takes it first; the simulated adapters yield to
//! let requests interleave.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Pending once (waking itself), then ready.
pub async fn yield_now() {
    YieldOnce(false).await;
}

struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
