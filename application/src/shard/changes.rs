//! GET_METADATA_CHANGES (17): pages of the metadata change feed, which lives beside the
//! metadata state machine on shard 0; every other shard asks shard 0 over the bus.

use rill_domain::answer::Answer;
use rill_domain::change_feed::ChangesQuery;

use crate::ports::{Env, ShardBus, ShardReply, ShardRequest};
use crate::shard::Shard;

impl<E: Env> Shard<E> {
    /// A page of the change feed or of the current state, read at the newest commit.
    pub(crate) async fn metadata_changes(&self, query: ChangesQuery) -> ShardReply {
        let Some(writer) = &self.writer else {
            return self.bus.call(0, ShardRequest::MetadataChanges { query }).await?.into_answer();
        };
        let replica = writer.replication.replica.borrow();
        let machine = replica.state_machine();
        machine.feed().page(&query, machine.metadata(), replica.commit()).map(Answer::MetadataChanges)
    }
}
