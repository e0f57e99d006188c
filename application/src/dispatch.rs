//! Request dispatch: header checks, decoding in the connection's dialect (the first login
//! or session binding picks it), the session rules, routing to a use case, and the reply
//! frame in the dialect's layout. Transports call `handle` once per request frame,
//! which they read into one pooled buffer and hand over by value: a send's batch moves on
//! as a range of it, and a poll's reply comes back as the frame its batches were read into.

use rill_domain::constants::HEADER_SIZE;

use rill_domain::error::ErrorCode;
use rill_domain::version::{self, Dialect};
use rill_domain::wire::codes::{code, operation};
use rill_domain::wire::command::{Command, Credentials, DecodeError};
use rill_domain::wire::encode::EncodedRequest;
use rill_domain::wire::header::{
    EvictionReason, RequestHeader, encode_eviction, encode_reply, mark_committed, write_reply, write_reply_header,
};
use rill_domain::wire::response;

use crate::connection::{BoundSession, Caller, Connection, Outcome};
use crate::memory_pool::{PoolBuf, PoolSlice};
use crate::ports::{BusReply, Env, Reply, ShardReply};
use crate::session_replies::{Arrival, SessionReplies};
use crate::shard::Shard;

/// Whether the frame is a 0.12 BIND_SESSION, which like a login announces its dialect.
fn is_bind(header: &RequestHeader) -> bool {
    header.operation == operation::NON_REPLICATED && header.code == code::BIND_SESSION
}

/// The dialect a frame is read in: the one its body announces for a login or a session
/// binding (the frames that choose a connection's dialect), else the connection's. `None`
/// for a login or binding announcing a version not served; one too short to announce any is
/// read in the connection's and refused as malformed.
fn frame_dialect(connection: &Connection, header: &RequestHeader, body: &[u8]) -> Option<Dialect> {
    let announcing = header.operation == operation::REGISTER || is_bind(header);
    if !announcing || body.len() < 4 {
        return Some(connection.dialect());
    }
    version::announced(body)
}

/// The header rules every request obeys: a non-zero client; Register carries no session
/// and request number; every other non-read operation carries both.
fn fields_valid(header: &RequestHeader) -> bool {
    match header.operation {
        _ if header.client == 0 => false,
        operation::REGISTER => header.session == 0 && header.request == 0,
        operation::NON_REPLICATED | operation::LOGOUT | 0 => true,
        _ => header.session > 0 && header.request > 0,
    }
}

impl<E: Env> Shard<E> {
    /// Serves one request frame (header and body, at least the 256 header bytes, as the
    /// transport checked) and records how long it took, by command.
    pub async fn handle(&self, connection: &Connection, frame: PoolBuf) -> Outcome {
        let started_us = self.monotonic_us();
        let header_bytes: &[u8; HEADER_SIZE] = frame[..HEADER_SIZE].try_into().expect("a frame holds its header");
        let header = RequestHeader::parse(header_bytes);
        // Decoding the target twice costs only when tracing is on.
        let traced = self.shared.telemetry.request_traces.get().map(|sink| {
            (sink, crate::tracing_target::target(header.operation, header.code, &frame[HEADER_SIZE..]), self.now_us())
        });
        let outcome = self.serve(connection, &header, frame).await;
        // The reply's status (an eviction: 1000 + its reason), read once for both uses.
        let status = match &outcome {
            Outcome::Reply(reply) => {
                reply.get(216..220).map_or(0, |s| u32::from_le_bytes(s.try_into().expect("four bytes")))
            }
            Outcome::Evict(frame) => 1000 + frame.get(255).copied().unwrap_or(0) as u32,
        };
        if matches!(outcome, Outcome::Reply(_)) && status != 0 {
            self.shared.telemetry.errors.count(status);
        }
        if let Some((sink, (stream, topic, partition), start_unix_us)) = traced {
            let command = rill_domain::wire::codes::command_name(header.operation, header.code);
            let duration_us = self.monotonic_us().saturating_sub(started_us);
            let trace = crate::shared::RequestTrace {
                command,
                stream,
                topic,
                partition,
                status,
                start_unix_us,
                duration_us,
                shard: self.shard_id(),
            };
            // Never waits: a full exporter queue drops the span, not the request.
            let _ = sink.try_send(trace);
        }
        let command = rill_domain::wire::codes::command_name(header.operation, header.code);
        self.shared.telemetry.latency.record_binary(command, self.monotonic_us().saturating_sub(started_us));
        outcome
    }

    async fn serve(&self, connection: &Connection, header: &RequestHeader, frame: PoolBuf) -> Outcome {
        let reply = |status: ErrorCode| Outcome::reply(encode_reply(header, self.commit(), status.code(), &[]));
        let evict = |reason| Outcome::evict(encode_eviction(header.client, reason, (0, 0)));
        let body = &frame[HEADER_SIZE..];
        let Some(dialect) = frame_dialect(connection, header, body) else {
            // Refused before its checksum is read: which kind of checksum an unserved
            // generation stamps is unknown.
            return Outcome::evict(encode_eviction(
                header.client,
                EvictionReason::IncompatibleProtocol,
                version::window(),
            ));
        };
        // 0.12 clients put a random request identifier where 0.11 ones put the body's XXH3.
        if !dialect.random_request_checksum() && !header.checksum_matches(body) {
            return reply(ErrorCode::InvalidFormat);
        }
        if !fields_valid(header) {
            return evict(EvictionReason::InvalidRequestBody);
        }
        if header.operation == 0 || !operation::is_known(header.operation) {
            return evict(EvictionReason::InvalidRequestOperation);
        }
        let command = match Command::decode_in(dialect, header.operation, header.code, body) {
            Ok(command) => command,
            Err(DecodeError::UnknownOperation(_)) => return evict(EvictionReason::InvalidRequestOperation),
            Err(DecodeError::UnknownCode(_)) => return reply(ErrorCode::InvalidCommand),
            Err(DecodeError::Body(_)) if header.operation == operation::REGISTER || is_bind(header) => {
                return evict(EvictionReason::MalformedLogin);
            }
            // Before login a malformed read is still just unauthenticated, and a malformed
            // write still has no session: authentication is checked before the body.
            Err(DecodeError::Body(_))
                if connection.bound().is_none() && header.operation == operation::NON_REPLICATED =>
            {
                return reply(ErrorCode::Unauthenticated);
            }
            Err(DecodeError::Body(_)) if connection.bound().is_none() && header.operation != operation::LOGOUT => {
                return evict(EvictionReason::NoSession);
            }
            Err(DecodeError::Body(code)) => return reply(code),
        };
        match command {
            Command::Ping => Outcome::reply(encode_reply(header, self.commit(), 0, &[])),
            // Both announce a served version: `frame_dialect` evicted the others.
            Command::Register { credentials, bind_secret, .. } => {
                self.register(connection, header, dialect, &credentials, bind_secret).await
            }
            Command::BindSession { client, session, bind_secret, .. } => {
                connection.set_dialect(dialect);
                self.bind_session(connection, header, dialect, (client, session), &bind_secret)
            }
            Command::Logout => {
                connection.detach();
                if let Some(bound) = connection.unbind() {
                    self.shared.sessions.retained.close(bound.session);
                    self.shared.sessions.clients.set_user(connection.client_id, None);
                    self.shared.sessions.clients.set_session(connection.client_id, None);
                }
                Outcome::reply(encode_reply(header, self.commit(), 0, &[]))
            }
            _ if connection.bound().is_none() => {
                if header.operation == operation::NON_REPLICATED {
                    reply(ErrorCode::Unauthenticated)
                } else {
                    evict(EvictionReason::NoSession)
                }
            }
            _ => {
                let bound = connection.bound().expect("checked above");
                let caller = Caller {
                    client: bound.client,
                    client_id: connection.client_id,
                    user_id: bound.user_id,
                    session: bound.session,
                    dialect,
                };
                // A 0.12 session's replicated request sent again gets its first reply.
                let replies = connection.replies().filter(|_| operation::is_replicated(header.operation));
                // Held until the reply is made: a copy of the request waits for it.
                let _attempt = match &replies {
                    None => None,
                    Some(kept) => loop {
                        match kept.arrive(header.request, header.request_checksum) {
                            Arrival::Replay(body) => return Outcome::reply(self.committed_reply(header, &body)),
                            Arrival::Wait(first_attempt) => first_attempt.await,
                            Arrival::Run(attempt) => break Some(attempt),
                        }
                    },
                };
                let direct = connection.reply_socket().map(|socket| crate::ports::DirectReply {
                    socket,
                    header: *header,
                    dialect,
                    replies: replies.clone(),
                });
                let request = (header.operation, header.code, frame, HEADER_SIZE);
                let result = self.run(caller, Some(connection), request, header, direct).await;
                Outcome::Reply(self.reply_frame(header, dialect, result, replies.as_deref()))
            }
        }
    }

    /// The reply frame of a request's result in `dialect`'s layout: a body framed in a
    /// pooled buffer, or a poll's frame built in place, whose prefix is laid out for the
    /// dialect and whose header is written where it was left room for. With `replies` (a
    /// 0.12 session's replicated request) a success is marked committed and kept.
    pub(crate) fn reply_frame(
        &self,
        header: &RequestHeader,
        dialect: Dialect,
        result: BusReply,
        replies: Option<&SessionReplies>,
    ) -> PoolSlice {
        match result {
            Ok(Reply::Sent(rest)) => rest.unwrap_or_else(|| PoolSlice::plain(Vec::new())),
            Ok(Reply::Answer(answer)) => {
                let mut body = Vec::new();
                response::encode(dialect, &answer, &mut body);
                let mut frame = self.shared.pool.acquire(HEADER_SIZE + body.len());
                write_reply(&mut frame, header, self.commit(), 0, &body);
                if let Some(replies) = replies {
                    mark_committed(&mut frame, self.commit());
                    replies.keep(header.request, header.request_checksum, &body);
                }
                frame.whole()
            }
            Ok(Reply::Frame(frame)) => {
                let mut frame = crate::partition::poll_frame_for(frame, dialect);
                write_reply_header(&mut frame, header, self.commit(), 0);
                frame
            }
            Err(code) => PoolSlice::plain(encode_reply(header, self.commit(), code.code(), &[])),
        }
    }

    /// A kept reply sent again, marked as the committed result it is.
    fn committed_reply(&self, header: &RequestHeader, body: &[u8]) -> Vec<u8> {
        let mut frame = encode_reply(header, self.commit(), 0, body);
        mark_committed(&mut frame, self.commit());
        frame
    }

    async fn register(
        &self,
        connection: &Connection,
        header: &RequestHeader,
        dialect: Dialect,
        credentials: &Credentials,
        bind_secret: Option<[u8; 32]>,
    ) -> Outcome {
        connection.set_dialect(dialect);
        let user_id = match self.authenticate(credentials).await {
            Ok(user_id) => user_id,
            Err(code) => {
                let reason = match (credentials, code) {
                    (Credentials::Password { .. }, _) => EvictionReason::InvalidCredentials,
                    (Credentials::Token(_), _) => EvictionReason::InvalidToken,
                };
                return Outcome::evict(encode_eviction(header.client, reason, (0, 0)));
            }
        };
        let Some(session) = self.next_session() else {
            return Outcome::evict(encode_eviction(header.client, EvictionReason::SessionError, (0, 0)));
        };
        let replies = bind_secret.map(|secret| {
            let now_us = self.now_us();
            self.shared.sessions.retained.open(session, header.client, user_id, secret, connection.client_id, now_us)
        });
        connection.set_replies(replies);
        self.start_session(connection, header, dialect, BoundSession { client: header.client, session, user_id })
    }

    /// Binds `bound` to the connection and answers with the login body.
    fn start_session(
        &self,
        connection: &Connection,
        header: &RequestHeader,
        dialect: Dialect,
        bound: BoundSession,
    ) -> Outcome {
        connection.bind(bound);
        // A new login starts unattached: an attachment was the previous login's to use.
        connection.detach();
        let clients = &self.shared.sessions.clients;
        clients.set_user(connection.client_id, Some(bound.user_id));
        clients.set_protocol(connection.client_id, dialect);
        clients.set_session(connection.client_id, Some((bound.client, bound.session)));
        let mut body = Vec::new();
        match header.operation {
            operation::REGISTER => response::login(dialect, &mut body, bound.user_id, bound.session),
            _ => response::session_binding(dialect, &mut body, bound.user_id, bound.session),
        }
        Outcome::reply(encode_reply(header, self.commit(), 0, &body))
    }

    /// BIND_SESSION: a 0.12 client goes on with its session on this connection, when the
    /// session is retained (`retained_sessions`), its client id and secret match and its
    /// user may still log in. Otherwise Unauthenticated, and the client registers again.
    fn bind_session(
        &self,
        connection: &Connection,
        header: &RequestHeader,
        dialect: Dialect,
        (client, session): (u128, u64),
        secret: &[u8; 32],
    ) -> Outcome {
        let refused = || Outcome::reply(encode_reply(header, self.commit(), ErrorCode::Unauthenticated.code(), &[]));
        let retained = &self.shared.sessions.retained;
        let Some((user_id, replies)) = retained.bind(session, client, secret, connection.client_id, self.now_us())
        else {
            tracing::debug!(
                session,
                client_id = connection.client_id,
                "a session bind proved nothing: registering again"
            );
            return refused();
        };
        tracing::debug!(session, client_id = connection.client_id, "session bound again");
        if !self.metadata_view(|m| m.user(user_id).is_some_and(|user| user.is_active())) {
            retained.close(session);
            return refused();
        }
        connection.set_replies(Some(replies));
        self.start_session(connection, header, dialect, BoundSession { client, session, user_id })
    }

    /// Runs an authenticated request as `caller` from the request bytes in `buf` (the body
    /// starts at `body_start`): authorization, then the use case. A send takes its batch as
    /// the range of `buf` it lies in.
    async fn run(
        &self,
        caller: Caller,
        connection: Option<&Connection>,
        (operation, code, buf, body_start): (u8, u32, PoolBuf, usize),
        header: &RequestHeader,
        direct: Option<crate::ports::DirectReply>,
    ) -> BusReply {
        let body = &buf[body_start..];
        let dialect = connection.map_or(Dialect::V11, Connection::dialect);
        let command = Command::decode_in(dialect, operation, code, body).map_err(|error| match error {
            DecodeError::Body(code) => code,
            DecodeError::UnknownOperation(_) | DecodeError::UnknownCode(_) => ErrorCode::InvalidCommand,
        })?;
        if let Some(access) = self.metadata_view(|m| crate::authz::required(m, caller.user_id, &command)) {
            self.authorize(caller.user_id, access)?;
        }
        self.check_incarnation(header.partition_incarnation, &command)?;
        if let Some(connection) = connection
            && let Some(owner) = self.route_hint(&command)
        {
            connection.record_route(self.shard_id(), owner);
        }
        match command {
            Command::SendMessages { topic, partitioning, messages_count, batch } => {
                let start = batch.as_ptr() as usize - buf.as_ptr() as usize;
                let range = start..start + batch.len();
                self.send_messages(&topic, &partitioning, messages_count, buf.slice(range), direct).await
            }
            // Multi-node routing: both need the connection itself.
            Command::AttachConsumerSession { client, session, .. } => {
                let connection = connection.ok_or(ErrorCode::FeatureUnavailable)?;
                self.attach_consumer_session(connection, caller.user_id, client, session).map(Reply::Answer)
            }
            Command::PollMessages(request) if request.deferred.is_some_and(|terms| terms.wait_us > 0) => {
                let Some(connection) = connection else { return self.poll_messages(caller.client, &request).await };
                let cancel = connection.start_waiting(header.request);
                let reply = self.poll_deferred(caller.client, &request, Some(cancel)).await;
                connection.stop_waiting(header.request);
                reply
            }
            Command::FetchMessages(request) => {
                let Some(connection) = connection else {
                    return self.fetch_messages(caller.client, &request, None).await;
                };
                let cancel = connection.start_waiting(header.request);
                let reply = self.fetch_messages(caller.client, &request, Some(cancel)).await;
                connection.stop_waiting(header.request);
                reply
            }
            Command::CancelDeferred => {
                if let Some(connection) = connection {
                    connection.cancel_waiting(header.request);
                }
                // The cancelled poll answers; the cancel itself never does.
                Ok(Reply::Sent(None))
            }
            Command::PollMessagesOnPrimary(request) => {
                let coordinator = self.attached_coordinator(connection)?;
                self.require_primary()?;
                self.poll_messages(coordinator, &request).await
            }
            command => self.execute(caller, operation, body, command).await,
        }
    }

    /// The shard owning the one partition a send or poll goes to, for the connection's
    /// affinity. Balanced sends to a topic of several partitions spread by design and are
    /// not counted.
    fn route_hint(&self, command: &Command<'_>) -> Option<u16> {
        match command {
            Command::SendMessages { topic, partitioning, .. } => self.send_owner(topic, partitioning),
            Command::PollMessages(request) => self.partition_owner(&request.topic, request.partition_id.unwrap_or(0)),
            _ => None,
        }
    }

    /// Runs an authorized command other than a send.
    async fn execute(&self, caller: Caller, operation: u8, body: &[u8], command: Command<'_>) -> BusReply {
        let client = caller.client;
        match command {
            Command::DeleteSegments { topic, partition_id, segments_count } => {
                self.delete_segments(&topic, partition_id, segments_count).await
            }
            Command::PollMessages(request) => self.poll_messages(client, &request).await,
            Command::FlushUnsavedBuffer { topic, partition_id, fsync } => {
                self.flush_unsaved_buffer(&topic, partition_id, fsync).await
            }
            Command::GetConsumerOffset { consumer, topic, partition_id } => {
                self.get_consumer_offset(&consumer, &topic, partition_id).await
            }
            Command::StoreConsumerOffset { consumer, topic, partition_id, offset } => {
                self.store_consumer_offset(&consumer, &topic, partition_id, offset).await
            }
            Command::DeleteConsumerOffset { consumer, topic, partition_id } => {
                self.delete_consumer_offset(&consumer, &topic, partition_id).await
            }
            command => self.execute_control(caller, operation, body, command).await.map(Reply::Answer),
        }
    }

    /// The commands that answer with a small body: metadata, users, tokens, groups, queries.
    async fn execute_control(&self, caller: Caller, operation: u8, body: &[u8], command: Command<'_>) -> ShardReply {
        let Caller { client, client_id, user_id, .. } = caller;
        match command {
            Command::GetStats => Ok(self.get_stats()),
            Command::GetClusterMetadata => Ok(self.get_cluster_metadata(caller.dialect)),
            Command::GetPartitionRoute { topic, partition_id } => self.partition_route(&topic, partition_id),
            Command::GetMetadataChanges(query) => self.metadata_changes(query).await,
            Command::GetPollRouting(request) => self.routing(&caller, &request.topic, request.partition_id),
            Command::GetConsumerOffsetRouting { topic, partition_id, .. } => {
                self.routing(&caller, &topic, partition_id)
            }
            Command::DescribeOptions { scope } => Ok(self.describe_options(scope)),
            Command::GetSnapshot { compression, types } => self.get_snapshot(compression, types).await,
            Command::GetMe => Ok(self.get_client(client_id)),
            Command::GetClient { client_id } => Ok(self.get_client(client_id)),
            Command::GetClients => Ok(self.get_clients()),
            Command::GetStream { stream } => Ok(self.get_stream(&stream)),
            Command::GetStreams => Ok(self.get_streams()),
            Command::GetTopic(topic) => Ok(self.get_topic(&topic)),
            Command::GetTopics { stream } => Ok(self.get_topics(&stream)),
            Command::Metadata(op) => self.execute_metadata(operation, body, &op).await,
            Command::GetUser { user } => Ok(self.get_user(&user)),
            Command::GetUsers => Ok(self.get_users()),
            Command::CreateUser { username, password, status, permissions } => {
                self.create_user(&username, &password, status, permissions).await
            }
            Command::ChangePassword { user, current, new } => {
                self.change_password(user_id, &user, &current, &new).await
            }
            Command::GetTokens => Ok(self.get_tokens(user_id)),
            Command::CreateToken { name, expiry_us } => self.create_token(user_id, &name, expiry_us).await,
            Command::DeleteToken { name } => self.delete_token(user_id, &name).await,
            Command::GetConsumerGroup { topic, group } => self.get_consumer_group(&topic, &group),
            Command::GetConsumerGroups { topic } => self.get_consumer_groups(&topic),
            Command::JoinConsumerGroup { topic, group } => {
                self.join_consumer_group(client, client_id, &topic, &group).await
            }
            Command::LeaveConsumerGroup { topic, group } => self.leave_consumer_group(client, &topic, &group).await,
            Command::SyncConsumerGroup { topic, group } => self.sync_consumer_group(client, &topic, &group).await,
            Command::Unsupported { .. } => Err(ErrorCode::FeatureUnavailable),
            Command::Ping | Command::Register { .. } | Command::BindSession { .. } | Command::Logout => {
                unreachable!("handled before dispatch")
            }
            Command::SendMessages { .. }
            | Command::DeleteSegments { .. }
            | Command::PollMessages(_)
            | Command::FlushUnsavedBuffer { .. }
            | Command::GetConsumerOffset { .. }
            | Command::StoreConsumerOffset { .. }
            | Command::DeleteConsumerOffset { .. }
            | Command::AttachConsumerSession { .. }
            | Command::CancelDeferred
            | Command::FetchMessages(_)
            | Command::PollMessagesOnPrimary(_) => unreachable!("partition and connection commands are executed above"),
        }
    }
}

impl<E: Env> Shard<E> {
    /// Runs a request that arrived through a connectionless gateway (HTTP) for a user the
    /// gateway authenticated. It takes the same decoder, authorization and use cases as a
    /// binary request; commands that need a connection (its session, its group
    /// memberships) are refused.
    pub async fn execute_for_user(&self, user_id: u32, request: EncodedRequest) -> BusReply {
        if !self.metadata_view(|m| m.user(user_id).is_some_and(|user| user.is_active())) {
            return Err(ErrorCode::Unauthenticated);
        }
        let command = Command::decode(request.operation, request.code, &request.body).map_err(|error| match error {
            DecodeError::Body(code) => code,
            DecodeError::UnknownOperation(_) | DecodeError::UnknownCode(_) => ErrorCode::InvalidCommand,
        })?;
        match command {
            Command::Ping | Command::Register { .. } | Command::BindSession { .. } | Command::Logout => {
                Err(ErrorCode::InvalidCommand)
            }
            Command::GetMe
            | Command::JoinConsumerGroup { .. }
            | Command::LeaveConsumerGroup { .. }
            | Command::SyncConsumerGroup { .. } => Err(ErrorCode::FeatureUnavailable),
            _ => {
                let caller = Caller { client: 0, client_id: 0, user_id, session: 0, dialect: Dialect::V11 };
                let (operation, code) = (request.operation, request.code);
                let header = RequestHeader::default();
                self.run(caller, None, (operation, code, PoolBuf::plain(request.body), 0), &header, None).await
            }
        }
    }

    /// Handles one complete frame, as message-based transports (WebSocket, QUIC) deliver
    /// them; `None` when the bytes are not a well-formed frame (the transport closes).
    pub async fn handle_frame(&self, connection: &Connection, frame: PoolBuf) -> Option<Outcome> {
        rill_domain::wire::header::whole_frame_header(&frame)?;
        Some(self.handle(connection, frame).await)
    }
}
