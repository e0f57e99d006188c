//! A shard's spare logs (`partition::spares`): taken up at start, filled from the logs of
//! the partitions and segments it removes, drawn on by its partitions' new direct segments.

use std::sync::atomic::Ordering::Relaxed;

use super::{Partition, SPARE_LOGS_DIR, Shard};
use crate::partition::MIN_SPARE_BYTES;
use crate::ports::{Env, Storage};

impl<E: Env> Shard<E> {
    /// Takes up the spares an earlier run left, within the budget (none when it is 0);
    /// shard 0 also removes those of shards the server no longer runs.
    pub(super) async fn recover_spares(&self) {
        if let Err(error) = self.spares.recover(&self.storage).await {
            tracing::warn!(%error, "cannot take up the spare logs an earlier run left; removing them");
            let _ = self.spares.clear(&self.storage).await;
        }
        if self.shard_id != 0 {
            return;
        }
        let root = self.shared.config.data_path.join(SPARE_LOGS_DIR);
        for name in self.storage.list_dir(&root).await.unwrap_or_default() {
            if name.parse::<u16>().is_ok_and(|shard| shard >= self.shard_count()) {
                let _ = self.storage.remove_dir_all(&root.join(name)).await;
            }
        }
    }

    /// Waits for the operations in flight on a removed (closed) partition, then keeps its
    /// logs as spares, unless its files belong to a creation
    /// after the deletion (`deleted_at`): a deletion a restart's metadata recovery commits
    /// again leaves the files a later creation opens.
    pub(super) async fn keep_spares(&self, partition: &Partition<E::Storage>, deleted_at: u64) {
        let log = partition.log.lock().await;
        if partition.incarnation.get() <= deleted_at {
            log.keep_as_spares(&self.storage).await;
        }
    }

    /// Removes the spares, and keeps none, while the data volume is short of free space
    /// (shard 0's last reading, less what was appended since).
    pub(super) async fn fit_spares_to_space(&self) {
        let data = &self.shared.telemetry.data;
        // Nothing read yet (a shard starting before shard 0's first reading).
        if data.disk_total.load(Relaxed) == 0 {
            return;
        }
        let (available, floor) = (data.disk_available.load(Relaxed), data.disk_floor.load(Relaxed));
        self.spares.fit_to_space(&self.storage, available, floor).await;
    }

    /// For a new partition whose buffered log found no spare: the log of this shard with the
    /// most of a spare's old bytes past its end gives up half of them
    /// (`PartitionLog::give_up_half_spare_room`). Where the host takes freed guest memory
    /// back, a write into a fresh page costs several times one into a page just freed
    /// (docs/direct-io.md). A log busy with an operation is passed over.
    pub(super) async fn share_spare_room(&self) {
        let roomiest = self
            .partitions
            .borrow()
            .values()
            .filter_map(|partition| Some((partition.log.try_lock()?.spare_room(), partition)))
            .filter(|(room, _)| *room >= MIN_SPARE_BYTES)
            .max_by_key(|(room, _)| *room)
            .map(|(_, partition)| partition.clone());
        // Nothing ran since the scan (no await): the lock is still free.
        let Some(partition) = roomiest else { return };
        let Some(mut log) = partition.log.try_lock() else { return };
        if partition.closed.get() {
            return;
        }
        if let Err(error) = log.give_up_half_spare_room().await {
            tracing::debug!(%error, "a log cannot give up its spare room");
        }
    }

    /// The shard's spares for a partition it opens: none when the budget is 0.
    pub(super) fn spares_for_partitions(&self) -> Option<std::rc::Rc<crate::partition::SpareLogs>> {
        (self.shared.config.data.spare_logs_bytes > 0).then(|| self.spares.clone())
    }
}
