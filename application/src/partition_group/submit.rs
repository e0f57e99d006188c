//! Submitting ops to the group: here when this replica is the primary, forwarded to the
//! primary otherwise (again to each new primary), each waiting until it commits or times
//! out, each on one of the shard's lanes (`lanes.rs`).

use futures_channel::oneshot;
use rill_domain::error::ErrorCode;
use rill_domain::vsr::{Message, Status};

use super::core::{GroupCore, OpResult, Reach, Waiter};
use super::group::PartitionGroup;
use crate::partitions::PartitionStore;
use crate::ports::Env;

impl<E: Env> PartitionGroup<E> {
    /// Submits one op and waits until it commits or times out: a send's base offset, nothing
    /// for another op.
    pub(super) async fn submit(&self, store: &PartitionStore<E>, operation: u8, body: Vec<u8>) -> OpResult {
        if self.core.lock().await.halted.is_some() {
            return Err(ErrorCode::IoError);
        }
        let lane = self.lanes.take().await;
        let answer = {
            let reach = self.reach(store);
            let mut core = self.core.lock().await;
            if core.halted.is_some() {
                return Err(ErrorCode::IoError);
            }
            core.next_request += 1;
            let (reply, answer) = oneshot::channel();
            let since_tick = core.ticks;
            let waiter = Waiter {
                request_number: core.next_request,
                since_tick,
                operation,
                body,
                sent_in: None,
                sent_tick: since_tick,
                reply,
                held: None,
            };
            core.waiters.insert(lane.client_id, waiter);
            // Not normal (a view change under way): the tick hands it on once a view runs.
            core.hand_to_primary(&reach, lane.client_id).await;
            answer
        };
        let result = answer.await.unwrap_or(Err(ErrorCode::TransientNotCommitted));
        drop(lane);
        result
    }
}

impl<E: Env> GroupCore<E> {
    /// Hands a waiting request to the current primary, when the group runs normally: this
    /// replica itself, or the primary over the plane.
    pub async fn hand_to_primary(&mut self, reach: &Reach<'_, E>, client_id: u128) {
        let view = self.replica.view();
        let (primary, normal) = (self.replica.primary_index(view), self.replica.status() == Status::Normal);
        let ticks = self.ticks;
        let request = self.waiters.get_mut(&client_id).filter(|_| normal).map(|waiter| {
            waiter.sent_in = Some(view);
            waiter.sent_tick = ticks;
            (waiter.request_number, waiter.operation, waiter.body.clone())
        });
        let Some((request_number, operation, body)) = request else { return };
        if primary == reach.membership.replica_id {
            let now = reach.store.now_us();
            self.drive(reach, |replica, effects| {
                replica.on_request(now, client_id, request_number, operation, body, effects)
            })
            .await;
        } else {
            reach.network.send(primary, Message::Request { client_id, request_number, operation, body });
        }
    }
}
