//! The 0.11 SDK's multi-node routing on one shard: the routing reply names the node and the
//! coordinator's identity; a data connection attaches to a live login of the same user only,
//! then polls with the coordinator's consumer-group membership, and keeps no idle deadline
//! while its coordinator is logged in.

mod common;

use common::shards::*;
use std::rc::Rc;

use rill_adapter_sim::SimStorage;
use rill_application::Shard;
use rill_domain::identifier::Identifier;
use rill_domain::permissions::Permissions;
use rill_domain::polling::PollingStrategy;
use rill_domain::wire::codes::{code, operation};
use rill_domain::wire::command::{Command, Consumer, MetadataOp, PollRequest, TopicRef};

const TRANSIENT_NOT_ACCEPTED: u32 = 58;
const STALE_CLIENT: u32 = 30;

fn topic() -> TopicRef {
    TopicRef { stream: Identifier::Numeric(0), topic: Identifier::Numeric(0) }
}

fn run(client: &mut Client, command: Command<'_>) -> Result<Vec<u8>, u32> {
    let request = command.encode().expect("encodable");
    client.call(request.operation, request.code, &request.body)
}

/// A group poll body of partition 0 with auto-commit, as the SDK routes it.
fn group_poll() -> Vec<u8> {
    let request = PollRequest {
        consumer: Consumer::Group(Identifier::Numeric(0)),
        topic: topic(),
        partition_id: Some(0),
        strategy: PollingStrategy::Next,
        count: 10,
        auto_commit: true,
        deferred: None,
    };
    Command::PollMessages(request).encode().expect("encodable").body
}

/// Shards on `storage` and a logged-in coordinator that made a one-partition topic.
fn coordinator_with_topic(storage: &SimStorage) -> (Vec<Rc<Shard<SimEnv>>>, Client) {
    let (shards, _) = start(storage);
    let mut coordinator = Client::login(&shards[0]);
    create_stream_and_topic(&mut coordinator, "routed", 1);
    (shards, coordinator)
}

fn attach_body(client: u128, session: u64) -> Vec<u8> {
    let mut body = client.to_le_bytes().to_vec();
    body.extend_from_slice(&session.to_le_bytes());
    body.extend_from_slice(&0u64.to_le_bytes());
    body
}

#[test]
fn a_data_connection_polls_with_its_coordinators_group_identity() {
    let storage = SimStorage::new();
    let (shards, mut coordinator) = coordinator_with_topic(&storage);
    send(&mut coordinator, 0, 0, &[b"one", b"two"]).expect("send");
    run(&mut coordinator, Command::Metadata(MetadataOp::CreateConsumerGroup { topic: topic(), name: "g".into() }))
        .expect("create group");
    run(&mut coordinator, Command::JoinConsumerGroup { topic: topic(), group: Identifier::Numeric(0) }).expect("join");

    // The routing reply: the coordinator's client id and session, a watermark, this node.
    let route = coordinator.call(operation::NON_REPLICATED, code::GET_POLL_ROUTING, &group_poll()).expect("route");
    let session = coordinator.connection.bound().expect("logged in").session;
    assert_eq!(u128::from_le_bytes(route[..16].try_into().unwrap()), coordinator.vsr_client);
    assert_eq!(u64::from_le_bytes(route[16..24].try_into().unwrap()), session);
    assert!(route[32..].windows(9).any(|w| w == b"rill-node"), "the node entry names this node");

    let mut data = Client::login(&shards[1]);
    let poll_on_primary =
        |client: &mut Client| client.call(operation::NON_REPLICATED, code::POLL_MESSAGES_ON_PRIMARY, &group_poll());
    assert_eq!(poll_on_primary(&mut data).unwrap_err(), TRANSIENT_NOT_ACCEPTED, "not attached yet");
    let wrong = attach_body(coordinator.vsr_client, session + 1);
    assert_eq!(data.call(operation::NON_REPLICATED, code::ATTACH_CONSUMER_SESSION, &wrong).unwrap_err(), STALE_CLIENT);
    // The data connection, not a member itself, gets nothing of the group's partition.
    let own = data.call(operation::NON_REPLICATED, code::POLL_MESSAGES, &group_poll());
    assert!(own.is_err() || own.as_ref().is_ok_and(|r| r[12..16] == [0, 0, 0, 0]), "a non-member read: {own:?}");

    let right = attach_body(coordinator.vsr_client, session);
    data.call(operation::NON_REPLICATED, code::ATTACH_CONSUMER_SESSION, &right).expect("attach");
    let polled = poll_on_primary(&mut data).expect("poll on primary");
    assert_eq!(u32::from_le_bytes(polled[12..16].try_into().unwrap()), 2, "both messages, as the member");
    assert_eq!(data.system.header_deadline(&data.connection, 0), None, "no idle limit while attached");

    // Once the coordinator logs out, its session cannot be attached to, the data
    // connection's polls are refused until it attaches again, and its idle limit is back.
    coordinator.call(operation::LOGOUT, 0, &[]).expect("logout");
    assert!(data.system.header_deadline(&data.connection, 0).is_some());
    assert_eq!(poll_on_primary(&mut data).unwrap_err(), TRANSIENT_NOT_ACCEPTED, "a gone coordinator");
    assert_eq!(data.call(operation::NON_REPLICATED, code::ATTACH_CONSUMER_SESSION, &right).unwrap_err(), STALE_CLIENT);
}

#[test]
fn a_new_login_on_a_data_connection_drops_its_attachment() {
    let storage = SimStorage::new();
    let (shards, coordinator) = coordinator_with_topic(&storage);
    let session = coordinator.connection.bound().expect("logged in").session;
    let mut data = Client::login(&shards[0]);
    let attach = attach_body(coordinator.vsr_client, session);
    data.call(operation::NON_REPLICATED, code::ATTACH_CONSUMER_SESSION, &attach).expect("attach");
    data.log_in(b"\x04iggy\x04iggy").expect("log in again");
    let polled = data.call(operation::NON_REPLICATED, code::POLL_MESSAGES_ON_PRIMARY, &group_poll());
    assert_eq!(polled.unwrap_err(), TRANSIENT_NOT_ACCEPTED, "the earlier login's attachment is gone");
}

#[test]
fn a_data_connection_cannot_attach_to_another_users_session() {
    let storage = SimStorage::new();
    let (shards, _) = start(&storage);
    let mut root = Client::login(&shards[0]);
    let create = Command::CreateUser {
        username: "other".into(),
        password: "other-pass".into(),
        status: 1,
        permissions: Some(Permissions::all()),
    };
    run(&mut root, create).expect("create user");
    let mut other = Client::login_as(&shards[0], "other", "other-pass");
    let session = root.connection.bound().expect("logged in").session;
    let attach = attach_body(root.vsr_client, session);
    let refused = other.call(operation::NON_REPLICATED, code::ATTACH_CONSUMER_SESSION, &attach);
    assert_eq!(refused.unwrap_err(), STALE_CLIENT, "a session of another user");
}
