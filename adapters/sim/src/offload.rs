//! Offload for simulation: the work runs inline, so a test stays single-threaded and
//! deterministic.

use rill_application::ports::Offload;

#[derive(Debug, Clone, Copy, Default)]
pub struct InlineOffload;

impl Offload for InlineOffload {
    async fn run<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> T {
        work()
    }
}
