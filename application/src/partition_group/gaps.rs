//! State transfer of partition data within a partition group (docs/vsr.md, "Partition
//! groups"). A replica that fell further behind than its peers' journals reach gets the
//! group's state by `NewState`: the next offset of every partition and the stored consumer
//! offsets, but not the batches below them. Its partition logs then have a gap: offsets the
//! group assigned that this node never wrote. A gap is found three ways (a committed send
//! past its log's end, the state a checkpoint installed, and a check every second of each
//! log against the state once every commit is applied), and filled from a peer: the
//! batches are asked for (`RequestBatches`), each one is checked by checksum and offset,
//! and written at its offset with its own timestamp, so the log ends up byte-identical to
//! the peer's. Committed sends to that partition wait until the gap is filled; the replica
//! goes on voting meanwhile, since its journal is whole.

use rill_domain::Namespace;
use rill_domain::batch::{self, BatchHeader};
use rill_domain::constants::BATCH_HEADER_SIZE;
use rill_domain::vsr::Message;

use super::apply::{Target, group_partition};
use super::core::{GroupCore, Reach};
use super::records::{GAP_ATTEMPTS, Gap, PeerBatches, unanswered};
use crate::memory_pool::PoolSlice;
use crate::partitions::label;
use crate::ports::Env;
use crate::replication::TICK_MS;

/// How often every log is checked against the group's state (1 s).
pub(super) const CHECK_TICKS: u64 = 1_000 / TICK_MS;

impl<E: Env> GroupCore<E> {
    /// Notes the gap below `target` (`note_gap`) for an op that needs it filled first; true
    /// once it is given up (no peer sent the batches for a minute): the op goes on without.
    pub fn gap_given_up(&mut self, reach: &Reach<'_, E>, namespace: Namespace, next: u64, target: u64) -> bool {
        self.note_gap(reach, namespace, next, target);
        self.gaps.get(&namespace).is_some_and(Gap::exhausted)
    }

    /// Records that `namespace`'s log (now ending at `next_offset`) must reach `target`, and
    /// asks a peer for the batches if this gap is new.
    pub fn note_gap(&mut self, reach: &Reach<'_, E>, namespace: Namespace, next_offset: u64, target: u64) {
        if let Some(gap) = self.gaps.get_mut(&namespace) {
            gap.target = gap.target.max(target);
            return;
        }
        self.gaps.insert(namespace, Gap { target, asked_tick: self.ticks, attempts: 0 });
        tracing::warn!(
            partition = %label(namespace),
            group = reach.group(),
            from = next_offset,
            to = target,
            "this node lacks batches its partition group committed; fetching them from a peer"
        );
        self.ask_for_batches(reach, namespace, next_offset);
    }

    /// Sends one `RequestBatches` for the gap of `namespace` from `from_offset`, to the
    /// primary first, then to each other peer in turn.
    fn ask_for_batches(&mut self, reach: &Reach<'_, E>, namespace: Namespace, from_offset: u64) {
        if reach.store.owned(namespace).is_err() {
            return;
        }
        let incarnation = self.copy(namespace).incarnation;
        let Some(attempts) = self.gaps.get(&namespace).map(|gap| gap.attempts) else { return };
        let Some(peer) = self.peer_to_ask(reach.membership, attempts) else { return };
        let ticks = self.ticks;
        let Some(gap) = self.gaps.get_mut(&namespace) else { return };
        gap.attempts += 1;
        gap.asked_tick = ticks;
        let message = Message::RequestBatches {
            replica: reach.membership.replica_id,
            partition: namespace.packed(),
            incarnation,
            from_offset,
            to_offset: gap.target,
        };
        reach.network.send(peer, message);
    }

    /// Asks again for every gap whose last request went unanswered (every tick).
    pub async fn chase_gaps(&mut self, reach: &Reach<'_, E>) {
        let due = unanswered(&self.gaps, self.ticks, |gap| (gap.asked_tick, gap.attempts));
        for (namespace, attempts) in due {
            let Ok(partition) = reach.store.owned(namespace) else {
                self.gaps.remove(&namespace);
                continue;
            };
            // The group has started the partition again since this copy's incarnation (the
            // reset waits behind this gap, and no peer serves the old incarnation's batches):
            // the copy goes into the new one, and the gap with it.
            let known = self.replica.state_machine().state().incarnation(namespace.packed());
            if known > self.copy(namespace).incarnation {
                self.start_again(reach, namespace, &partition, known).await;
                continue;
            }
            if attempts == GAP_ATTEMPTS {
                tracing::error!(partition = %label(namespace), attempts, "no peer sent the batches this node lacks; committed sends to the partition are skipped here until one does");
            }
            let next_offset = partition.log.lock().await.next_offset();
            if attempts % 10 == 9 {
                tracing::warn!(partition = %label(namespace), attempts, from = next_offset, "no peer has sent the batches this node lacks yet; asking again");
            }
            self.ask_for_batches(reach, namespace, next_offset);
        }
    }

    /// Checks every partition log of the group against its state, once nothing committed
    /// waits, when each log must end where the state says.
    pub async fn find_gaps(&mut self, reach: &Reach<'_, E>) {
        let expected: Vec<(u64, u64)> = self.replica.state_machine().state().next_offsets().collect();
        for (key, target) in expected {
            let Target::Open(namespace, partition) = group_partition(reach, key) else { continue };
            let Some(log) = partition.log.try_lock() else { continue };
            let next_offset = log.next_offset();
            drop(log);
            if next_offset < target {
                self.note_gap(reach, namespace, next_offset, target);
            }
        }
    }

    /// Batches a peer sent: the copy of a damaged batch asked for at `from_offset`, or
    /// batches for a gap; ignored unless of the incarnation this node's copy is in (an
    /// answer to a request made before a purge or a recreation holds the old one's).
    pub async fn receive_batches(&mut self, reach: &Reach<'_, E>, answer: PeerBatches<'_>) {
        let Some(namespace) = Namespace::from_packed(answer.key) else { return };
        if !self.repair_with(reach, namespace, &answer).await {
            self.fill_gap(reach, &answer).await;
        }
    }

    /// Batches a peer sent for a gap: each is checked (checksums, and that it starts where
    /// the log ends) and written at its offset; the rest is asked for at once. Runs under the
    /// pump lock, so no committed send is written into the partition meanwhile.
    async fn fill_gap(&mut self, reach: &Reach<'_, E>, answer: &PeerBatches<'_>) {
        let PeerBatches { peer: from, key, incarnation, from_offset, log_start, bytes } = *answer;
        let Target::Open(namespace, partition) = group_partition(reach, key) else { return };
        let Some(target) = self.gaps.get(&namespace).map(|gap| gap.target) else { return };
        let mut log = partition.log.lock().await;
        if partition.closed() || self.copy(namespace).incarnation != incarnation || log.next_offset() != from_offset {
            return;
        }
        // The peer's copy starts past this one's: committed deletions (DELETE_SEGMENTS ops,
        // which this copy may never apply: a state installed from a peer covers them) took
        // that prefix. This copy drops it too, or goes on from there if it lacks it all.
        if log_start > from_offset && !super::deletions::follow_deletions(reach, namespace, &mut log, log_start).await {
            return;
        }
        let mut at = 0;
        while log.next_offset() < target && at + BATCH_HEADER_SIZE <= bytes.len() {
            let header = BatchHeader::read(&bytes[at..]);
            let end = usize::try_from(header.batch_length).ok().and_then(|len| at.checked_add(len));
            let Some(stored) = end.and_then(|end| bytes.get(at..end)) else { break };
            if header.base_offset != log.next_offset() || !batch::verify_stored(stored) {
                tracing::warn!(partition = %label(namespace), peer = from, offset = header.base_offset, expected = log.next_offset(), "a peer sent a batch that does not fit the gap; asking another");
                break;
            }
            let storage = &reach.store.storage;
            let batch = PoolSlice::plain(stored.to_vec());
            let written = log.append_replicated(storage, batch, header.base_offset, header.base_timestamp).await;
            if let Err(error) = written {
                tracing::error!(%error, partition = %label(namespace), "cannot write a batch fetched from a peer");
                break;
            }
            at += stored.len();
        }
        // Once the fetched batches are in, the segment holding what the peer's copy no longer
        // has may be sealed here too.
        if log_start > log.first_offset() {
            super::deletions::follow_deletions(reach, namespace, &mut log, log_start).await;
        }
        let next_offset = log.next_offset();
        partition.refresh(&log);
        drop(log);
        self.dirty.insert(namespace);
        if next_offset >= target {
            self.gaps.remove(&namespace);
            tracing::info!(partition = %label(namespace), offset = next_offset, "the partition caught up from its peers");
        } else if next_offset > from_offset {
            // Progress: the next chunk from the same peer, without waiting for a tick.
            if let Some(gap) = self.gaps.get_mut(&namespace) {
                gap.attempts = gap.attempts.saturating_sub(1);
            }
            self.ask_for_batches(reach, namespace, next_offset);
        }
    }
}
