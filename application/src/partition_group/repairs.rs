//! Damaged batches repaired from a peer: every replica of a partition group holds the same
//! bytes, so a stored batch that fails its checksums here is asked of the peers (one at a
//! time, the primary first) and, once an intact copy comes, written over it in place.

use rill_domain::Namespace;
use rill_domain::constants::MAX_FRAME_SIZE;
use rill_domain::vsr::Message;

use super::core::{GroupCore, Reach};
use super::records::{PeerBatches, Repair, unanswered};
use crate::partition::DamagedBatch;
use crate::partitions::label;
use crate::ports::Env;

/// Peers asked for an intact copy of a damaged batch before giving up (until it is found
/// damaged again).
const REPAIR_ATTEMPTS: u32 = 10;

impl<E: Env> GroupCore<E> {
    /// A batch stored here failed its checksums: an intact copy is asked of the peers (one
    /// at a time, the primary first), unless one is asked already.
    pub fn ask_repair(&mut self, reach: &Reach<'_, E>, namespace: Namespace, damaged: &DamagedBatch) {
        let key = (namespace, damaged.first_offset);
        if damaged.length as usize > MAX_FRAME_SIZE || self.repairs.contains_key(&key) {
            return;
        }
        let repair = Repair { damaged: damaged.clone(), asked_tick: 0, attempts: 0 };
        self.repairs.insert(key, repair);
        self.ask_for_copy(reach, key);
    }

    fn ask_for_copy(&mut self, reach: &Reach<'_, E>, key: (Namespace, u64)) {
        let Some(attempts) = self.repairs.get(&key).map(|repair| repair.attempts) else { return };
        let Some(peer) = self.peer_to_ask(reach.membership, attempts) else { return };
        let (ticks, incarnation) = (self.ticks, self.copy(key.0).incarnation);
        let Some(repair) = self.repairs.get_mut(&key) else { return };
        repair.attempts += 1;
        repair.asked_tick = ticks;
        if reach.store.owned(key.0).is_err() {
            return;
        }
        let message = Message::RequestBatches {
            replica: reach.membership.replica_id,
            partition: key.0.packed(),
            incarnation,
            from_offset: repair.damaged.first_offset,
            to_offset: repair.damaged.last_offset + 1,
        };
        reach.network.send(peer, message);
    }

    /// Asks the next peer for every copy unanswered for a second; gives up on a batch no
    /// peer sent an intact copy of in `REPAIR_ATTEMPTS` tries.
    pub fn chase_repairs(&mut self, reach: &Reach<'_, E>) {
        let due = unanswered(&self.repairs, self.ticks, |r| (r.asked_tick, r.attempts));
        for (key, attempts) in due {
            if attempts >= REPAIR_ATTEMPTS {
                self.repairs.remove(&key);
                tracing::error!(partition = %label(key.0), first_offset = key.1, "no peer sent an intact copy of a damaged batch; it stays unserved here");
                continue;
            }
            self.ask_for_copy(reach, key);
        }
    }

    /// A peer's answer to a repair asked at its first offset: its copy written over the
    /// damaged batch when intact. False when no repair was asked there (a gap's batches).
    pub async fn repair_with(&mut self, reach: &Reach<'_, E>, namespace: Namespace, answer: &PeerBatches<'_>) -> bool {
        let PeerBatches { peer: from, incarnation, from_offset, bytes, .. } = *answer;
        let Some(damaged) = self.repairs.get(&(namespace, from_offset)).map(|r| r.damaged.clone()) else {
            return false;
        };
        let Ok(partition) = reach.store.owned(namespace) else { return true };
        let mut log = partition.log.lock().await;
        if self.copy(namespace).incarnation != incarnation {
            return true;
        }
        let copy = bytes.get(..damaged.length as usize).unwrap_or_default();
        // Not intact, or not written: the next peer is asked at the next chase.
        match log.repair_batch(&reach.store.storage, &damaged, copy).await {
            Ok(true) => {
                self.repairs.remove(&(namespace, from_offset));
                tracing::info!(partition = %label(namespace), peer = from, first_offset = from_offset, file = %damaged.file.display(), "repaired a damaged batch with a peer's copy");
            }
            Ok(false) => {}
            Err(error) => {
                tracing::error!(%error, partition = %label(namespace), "cannot write a peer's copy of a damaged batch")
            }
        }
        true
    }
}
