//! Deferred flushes. A send to a topic without fsync that reaches a flush threshold is
//! acknowledged once journaled, which is all such a send promises, and its flush runs in
//! the shard's flusher task right after; the partition's lock orders it with the sends that
//! follow, so the acknowledgement goes out while the write is under way instead of after
//! it. The flusher writes a chunk (about 1 MiB) at a time and lets the partition go in
//! between, so a send that arrives meanwhile waits for one chunk, not the whole journal. A
//! flush that fails leaves the partition read-only with its batches still journaled, as a
//! failed flush of acknowledged batches always has (the retry loop writes them once the
//! disk takes writes). Without a flusher running (a shard driven by hand in tests), sends
//! flush themselves.

use rill_domain::namespace::Namespace;

use super::partition::Partition;
use super::store::PartitionStore;
use crate::ports::Env;
use crate::yield_now::yield_now;

impl<E: Env> PartitionStore<E> {
    /// Runs this shard's deferred flushes, for as long as the shard runs.
    pub async fn run_flusher(&self) {
        let queue = &self.flush_queue;
        queue.running.set(true);
        loop {
            queue.ready.acquire().await.forget();
            let Some(namespace) = queue.due.borrow_mut().pop_front() else { continue };
            queue.queued.borrow_mut().remove(&namespace);
            let Ok(partition) = self.owned(namespace) else { continue };
            self.flush_deferred(namespace, &partition).await;
        }
    }

    /// Writes what `namespace` has journaled when it starts, a chunk at a time, letting the
    /// partition go between chunks: a send arriving meanwhile waits for one chunk's write,
    /// not the whole flush's (on a cold page cache a 2 MB write took 3-4 ms). Batches
    /// journaled after the start go only where they fit in the last chunk; the rest wait
    /// for their own threshold.
    async fn flush_deferred(&self, namespace: Namespace, partition: &Partition<E::Storage>) {
        let mut log = partition.log.lock().await;
        // Queued by a send that counted batches a flush was already writing: what is left
        // waits for its own threshold, as it would have without that send.
        if partition.closed() || !log.threshold_reached() {
            return;
        }
        log.take_on_deferred();
        loop {
            let was_read_only = log.write_failure().is_some();
            let batches = log.next_chunk_batches();
            let result = log.flush_front(&self.storage, false, batches).await;
            self.note_write(namespace, was_read_only, log.write_failure().is_some(), result.as_ref().err());
            partition.refresh(&log);
            if result.is_err() {
                log.end_deferred();
                return;
            }
            if !log.deferring() {
                return;
            }
            drop(log);
            yield_now().await;
            log = partition.log.lock().await;
            // Removed, purged, or written meanwhile by a send far past the thresholds.
            if partition.closed() || !log.deferring() {
                return;
            }
        }
    }
}
