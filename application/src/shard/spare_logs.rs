//! The shard's side of spare logs (`partition::spares`): its partitions keep their own,
//! within the server's budget; here they are all removed while the volume is short of
//! space, and the directory where an earlier version kept every shard's spares goes.

use std::sync::atomic::Ordering::Relaxed;

use super::{LEGACY_SPARE_LOGS_DIR, Shard};
use crate::ports::{Env, Storage};

impl<E: Env> Shard<E> {
    /// Removes the shared spare directory an earlier version kept (shard 0, at start, before
    /// its partitions open): its files held other partitions' deleted logs.
    pub(super) async fn remove_legacy_spares(&self) {
        if self.shard_id != 0 {
            return;
        }
        let legacy = self.shared.config.data_path.join(LEGACY_SPARE_LOGS_DIR);
        if let Err(error) = self.storage.remove_dir_all(&legacy).await {
            tracing::warn!(%error, dir = %legacy.display(), "cannot remove an earlier version's spare logs");
        }
    }

    /// While the data volume is short of free space (shard 0's last reading, less what was
    /// appended since), keeps no spares and removes those its partitions hold.
    pub(super) async fn fit_spares_to_space(&self) {
        let Some(budget) = &self.spares else { return };
        let data = &self.shared.telemetry.data;
        // Nothing read yet (a shard starting before shard 0's first reading).
        if data.disk_total.load(Relaxed) == 0 {
            return;
        }
        let (available, floor) = (data.disk_available.load(Relaxed), data.disk_floor.load(Relaxed));
        if !budget.note_space(available, floor) || budget.counters().files.load(Relaxed) == 0 {
            return;
        }
        for (_, partition) in self.owned_partitions() {
            let mut log = partition.log.lock().await;
            if log.spare_count() > 0 {
                log.remove_spares(&self.storage).await;
            }
        }
    }

    /// The spare budget a partition it opens draws on.
    pub(super) fn spares_for_partitions(&self) -> Option<crate::partition::SpareBudget> {
        self.spares.clone()
    }
}
