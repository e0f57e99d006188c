//! The 0.11 SDK's multi-node routing, which it switches on once cluster metadata names more
//! than one node. An auto-commit poll asks its coordinator connection where to run
//! (GET_POLL_ROUTING), opens a separate data connection there, attaches it to the
//! coordinator's session (ATTACH_CONSUMER_SESSION) and polls on it
//! (POLL_MESSAGES_ON_PRIMARY) with the coordinator's consumer-group identity; offset stores
//! and deletes go the same way (GET_CONSUMER_OFFSET_ROUTING, then the usual 121/122).
//!
//! Without replicated partitions, partition data lives on the metadata primary, where the
//! SDK's leader check sends every client at connect, so the primary names itself; a backup
//! answers 58 (not accepted here, retry), which the SDK retries while a view change elects a
//! new primary. With `replicate_partitions` every node holds every partition and a
//! consumer's group membership lives on the node its coordinator connection is on, so every
//! node names itself, whatever its metadata role.

use rill_domain::answer::{Answer, Routing};
use rill_domain::error::ErrorCode;
use rill_domain::wire::command::TopicRef;

use crate::connection::{Caller, Connection};
use crate::ports::{Env, ShardReply};
use crate::shard::Shard;

impl<E: Env> Shard<E> {
    /// Partition requests of the routing codes run only where the data is: the metadata
    /// primary in normal status (any single node, and any node of a cluster that replicates
    /// its partitions).
    pub(crate) fn require_primary(&self) -> Result<(), ErrorCode> {
        let membership = self.shared.config.membership;
        if !membership.clustered() || self.group.get().is_some() {
            return Ok(());
        }
        let role = self.shared.replica.role();
        match role.normal && role.primary == membership.replica_id {
            true => Ok(()),
            false => Err(ErrorCode::TransientNotAccepted),
        }
    }

    /// GET_POLL_ROUTING / GET_CONSUMER_OFFSET_ROUTING: this node (the primary) with the
    /// caller's identity to attach to, once the topic and partition are known to exist.
    pub(crate) fn routing(&self, caller: &Caller, topic: &TopicRef, partition_id: Option<u32>) -> ShardReply {
        self.metadata_view(|m| {
            let found = m.topic(topic)?;
            match partition_id {
                Some(id) if id as usize >= found.partitions.len() => Err(ErrorCode::PartitionNotFound),
                _ => Ok(()),
            }
        })?;
        self.require_primary()?;
        let own = self.shared.config.membership.replica_id as usize;
        let node = self.cluster_nodes().into_iter().nth(own).ok_or(ErrorCode::TransientNotAccepted)?;
        let (client, session, metadata_watermark) = (caller.client, caller.session, self.commit());
        Ok(Answer::Routing(Box::new(Routing { client, session, metadata_watermark, node })))
    }

    /// The coordinator a data connection polls for. Without an attachment, or once the
    /// coordinator's login ended (the attachment is dropped then), 58: the SDK attaches again.
    pub(crate) fn attached_coordinator(&self, connection: Option<&Connection>) -> Result<u128, ErrorCode> {
        let connection = connection.ok_or(ErrorCode::TransientNotAccepted)?;
        let (client, session) = connection.attachment().ok_or(ErrorCode::TransientNotAccepted)?;
        if self.shared.sessions.clients.session_user(client, session).is_none() {
            connection.detach();
            return Err(ErrorCode::TransientNotAccepted);
        }
        Ok(client)
    }

    /// ATTACH_CONSUMER_SESSION: binds `connection` to the live login `(client, session)` of
    /// the same user, whose group membership its polls then use. An ended or foreign
    /// session is StaleClient (the SDK routes and attaches again).
    pub(crate) fn attach_consumer_session(
        &self,
        connection: &Connection,
        user_id: u32,
        client: u128,
        session: u64,
    ) -> ShardReply {
        self.require_primary()?;
        match self.shared.sessions.clients.session_user(client, session) {
            Some(owner) if owner == user_id => {
                connection.attach(client, session);
                Ok(Answer::Nothing)
            }
            _ => Err(ErrorCode::StaleClient),
        }
    }
}
