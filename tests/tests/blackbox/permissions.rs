//! Permissions: every command of the official 0.11.0 client run by seven kinds of caller (not logged in, no permissions, stream-scoped, topic-scoped, global read, global manage, root) and checked against an allow/deny table, plus what a user without permissions can still do and permission changes taking effect.

use iggy::prelude::*;
use rill_tests::{
    ROOT_PASSWORD, ROOT_USERNAME, TestServer, connect_anonymous, connect_root, connect_user, error_code, id,
    identifier_bytes, message, named, topic_options,
};
use std::collections::BTreeMap;

const UNAUTHENTICATED: u32 = 40;
const UNAUTHORIZED: u32 = 41;
const FEATURE_UNAVAILABLE: u32 = 5;

const ANONYMOUS: usize = 0;
const STREAM_SCOPED: usize = 2;
const TOPIC_SCOPED: usize = 3;
const ROOT: usize = 6;
const ACTOR_NAMES: [&str; 7] =
    ["not logged in", "no permissions", "stream-scoped", "topic-scoped", "global read", "global manage", "root"];
/// Usernames and passwords of the actors (the first is never used: it does not log in).
const CREDENTIALS: [(&str, &str); 7] = [
    ("", ""),
    ("no-perms", "no-perms-pass"),
    ("stream-admin", "stream-admin-pass"),
    ("topic-admin", "topic-admin-pass"),
    ("reader", "reader-pass"),
    ("manager", "manager-pass"),
    (ROOT_USERNAME, ROOT_PASSWORD),
];

const S0: &str = "perm-s0";
const S1: &str = "perm-s1";
const T0: &str = "t0";
const T1: &str = "t1";
const GROUP: &str = "g";
const TARGET: &str = "perm-target";
const TARGET_PASSWORD: &str = "perm-target-pass";
const PAT_NEW: &str = "perm-pat-new";
const PAT_DOOMED: &str = "perm-pat-doomed";

const T: bool = true;
const F: bool = false;

/// Whether each command is allowed for [not logged in, no permissions, stream-scoped
/// (manage_stream on stream 0 only), topic-scoped (manage_topic on stream 0 / topic 0
/// only), global read (read_servers, read_users, read_streams, read_topics, poll_messages),
/// global manage (manage_servers, manage_users, manage_streams, manage_topics, send and
/// poll), root]. "Stream 0" and "topic 0" are the fixture's `perm-s0` and its `t0`;
/// `perm-s0/t1` is the sibling topic and `perm-s1` the other stream.
///
/// Choices that are not obvious from the rules (Iggy's own definitions are the doc comments
/// of its `GlobalPermissions`, `StreamPermissions` and `TopicPermissions`):
/// - Grants cascade downward and manage implies read, so the stream-scoped user reads and
///   manages every topic of stream 0 (listing them included), but not the stream list,
///   which needs a global grant; the topic-scoped user cannot read stream 0 itself nor list
///   its topics.
/// - Read on a topic includes polling it (Iggy: read_topic "includes all the permissions of
///   poll_messages", read_stream likewise), and with polling the consumer offsets. So both
///   scoped users poll, and store, get and delete offsets, in their own topics.
/// - Sending is a grant of its own: no manage or read grant includes it (Iggy documents none
///   that does), so neither scoped user may send; the global manager has send_messages.
/// - Consumer groups need read on the topic (Iggy: read_topics allows get, list, create,
///   delete, join and leave of consumer groups), so the global reader may create and delete
///   groups and the scoped users may join and leave.
/// - The snapshot is server diagnostics like stats: read_servers is enough. A server without
///   snapshots may answer FeatureUnavailable (5) to every logged-in caller instead.
/// - describe_options and get_cluster_metadata only need a login.
/// - change_password on another user needs manage_users; on oneself nothing.
const MATRIX: [(&str, [bool; 7]); 51] = [
    ("ping", [T, T, T, T, T, T, T]),
    ("get_me", [F, T, T, T, T, T, T]),
    ("get_cluster_metadata", [F, T, T, T, T, T, T]),
    ("describe_options", [F, T, T, T, T, T, T]),
    ("get_stats", [F, F, F, F, T, T, T]),
    ("get_clients", [F, F, F, F, T, T, T]),
    ("get_client", [F, F, F, F, T, T, T]),
    ("snapshot", [F, F, F, F, T, T, T]),
    ("get_user", [F, F, F, F, T, T, T]),
    ("get_users", [F, F, F, F, T, T, T]),
    ("create_user", [F, F, F, F, F, T, T]),
    ("update_user", [F, F, F, F, F, T, T]),
    ("update_permissions", [F, F, F, F, F, T, T]),
    ("change_password", [F, F, F, F, F, T, T]),
    ("change_own_password", [F, T, T, T, T, T, T]),
    ("delete_user", [F, F, F, F, F, T, T]),
    ("get_personal_access_tokens", [F, T, T, T, T, T, T]),
    ("create_personal_access_token", [F, T, T, T, T, T, T]),
    ("delete_personal_access_token", [F, T, T, T, T, T, T]),
    ("get_stream", [F, F, T, F, T, T, T]),
    ("get_other_stream", [F, F, F, F, T, T, T]),
    ("get_streams", [F, F, F, F, T, T, T]),
    ("create_stream", [F, F, F, F, F, T, T]),
    ("update_stream", [F, F, T, F, F, T, T]),
    ("update_other_stream", [F, F, F, F, F, T, T]),
    ("purge_stream", [F, F, T, F, F, T, T]),
    ("get_topic", [F, F, T, T, T, T, T]),
    ("get_sibling_topic", [F, F, T, F, T, T, T]),
    ("get_other_stream_topic", [F, F, F, F, T, T, T]),
    ("get_topics", [F, F, T, F, T, T, T]),
    ("create_topic", [F, F, T, F, F, T, T]),
    ("update_topic", [F, F, T, T, F, T, T]),
    ("update_sibling_topic", [F, F, T, F, F, T, T]),
    ("purge_topic", [F, F, T, T, F, T, T]),
    ("create_partitions", [F, F, T, T, F, T, T]),
    ("delete_partitions", [F, F, T, T, F, T, T]),
    ("delete_segments", [F, F, T, T, F, T, T]),
    ("send_messages", [F, F, F, F, F, T, T]),
    ("poll_messages", [F, F, T, T, T, T, T]),
    ("store_consumer_offset", [F, F, T, T, T, T, T]),
    ("get_consumer_offset", [F, F, T, T, T, T, T]),
    ("delete_consumer_offset", [F, F, T, T, T, T, T]),
    ("get_consumer_group", [F, F, T, T, T, T, T]),
    ("get_consumer_groups", [F, F, T, T, T, T, T]),
    ("get_sibling_consumer_groups", [F, F, T, F, T, T, T]),
    ("create_consumer_group", [F, F, T, T, T, T, T]),
    ("join_consumer_group", [F, F, T, T, T, T, T]),
    ("leave_consumer_group", [F, F, T, T, T, T, T]),
    ("delete_consumer_group", [F, F, T, T, T, T, T]),
    ("delete_topic", [F, F, T, T, F, T, T]),
    ("delete_stream", [F, F, T, F, F, T, T]),
];

/// A length-prefixed name as on the wire.
fn wire_name(name: &str) -> Vec<u8> {
    let mut out = vec![name.len() as u8];
    out.extend_from_slice(name.as_bytes());
    out
}

fn ident(value: u32) -> Vec<u8> {
    identifier_bytes(&id(value))
}

/// Code and body of the system, user and token commands as the 0.11 client encodes them.
fn raw_session_request(command: &str) -> Option<(u32, Vec<u8>)> {
    let target = identifier_bytes(&named(TARGET));
    let (code, body): (u32, Vec<u8>) = match command {
        "get_stats" => (10, Vec::new()),
        // Deflated, one type: Test.
        "snapshot" => (11, vec![2, 1, 4]),
        "get_cluster_metadata" => (12, Vec::new()),
        // Scope: topic.
        "describe_options" => (13, vec![1]),
        "get_me" => (20, Vec::new()),
        "get_client" => (21, 1u32.to_le_bytes().to_vec()),
        "get_clients" => (22, Vec::new()),
        "get_user" => (31, target),
        "get_users" => (32, Vec::new()),
        // Name, password, status active, no permissions, no options.
        "create_user" => (33, [wire_name("perm-new-user"), wire_name("new-user-pass"), vec![1, 0]].concat()),
        "delete_user" => (34, target),
        // Neither a new name nor a new status.
        "update_user" => (35, [target, vec![0, 0]].concat()),
        "update_permissions" => (36, [target, vec![0]].concat()),
        "change_password" | "change_own_password" => {
            (37, [target, wire_name(TARGET_PASSWORD), wire_name(TARGET_PASSWORD)].concat())
        }
        "get_personal_access_tokens" => (41, Vec::new()),
        "create_personal_access_token" => (42, [wire_name(PAT_NEW), u64::MAX.to_le_bytes().to_vec()].concat()),
        "delete_personal_access_token" => (43, wire_name(PAT_DOOMED)),
        _ => return None,
    };
    Some((code, body))
}

/// Code and body of the stream, topic, message, offset and group commands as the 0.11
/// client encodes them. SEND_MESSAGES goes out with an empty body: its batch format is
/// beside the point for a caller that is not logged in.
fn raw_resource_request(command: &str, w: &World) -> (u32, Vec<u8>) {
    let (s0, t00) = (ident(w.s0), ident(w.t00));
    let topic = [s0.clone(), t00.clone()].concat();
    // Consumer kind 1 with id 1, then stream and topic, then partition Some(0).
    let partition_read = [vec![1], ident(1), topic.clone(), vec![1, 0, 0, 0, 0]].concat();
    let group = identifier_bytes(&named(GROUP));
    match command {
        // Strategy offset 0, count 10, no auto-commit.
        "poll_messages" => (100, [partition_read, vec![1], vec![0; 8], 10u32.to_le_bytes().to_vec(), vec![0]].concat()),
        "send_messages" => (101, Vec::new()),
        "get_consumer_offset" => (120, partition_read),
        "store_consumer_offset" => (121, [partition_read, vec![0; 8], vec![1]].concat()),
        "delete_consumer_offset" => (122, [partition_read, vec![1]].concat()),
        "get_stream" => (200, s0),
        "get_other_stream" => (200, ident(w.s1)),
        "get_streams" => (201, Vec::new()),
        "create_stream" => (202, wire_name("perm-new-stream")),
        "delete_stream" => (203, s0),
        "update_stream" => (204, [s0, wire_name(S0)].concat()),
        "update_other_stream" => (204, [ident(w.s1), wire_name(S1)].concat()),
        "purge_stream" => (205, s0),
        "get_topic" => (300, topic),
        "get_sibling_topic" => (300, [s0, ident(w.t01)].concat()),
        "get_other_stream_topic" => (300, [ident(w.s1), ident(w.t10)].concat()),
        "get_topics" => (301, s0),
        "create_topic" => (302, [s0, 1u32.to_le_bytes().to_vec(), wire_name("perm-new-topic")].concat()),
        "delete_topic" => (303, topic),
        "update_topic" => (304, [topic, wire_name(T0)].concat()),
        "update_sibling_topic" => (304, [s0, ident(w.t01), wire_name(T1)].concat()),
        "purge_topic" => (305, topic),
        "create_partitions" => (402, [topic, 1u32.to_le_bytes().to_vec()].concat()),
        "delete_partitions" => (403, [topic, 1u32.to_le_bytes().to_vec()].concat()),
        "delete_segments" => (503, [topic, 0u32.to_le_bytes().to_vec(), 1u32.to_le_bytes().to_vec()].concat()),
        "get_consumer_group" => (600, [topic, group].concat()),
        "get_consumer_groups" => (601, topic),
        "get_sibling_consumer_groups" => (601, [s0, ident(w.t01)].concat()),
        "create_consumer_group" => (602, [topic, wire_name("perm-new-group")].concat()),
        "delete_consumer_group" => (603, [topic, group].concat()),
        "join_consumer_group" => (604, [topic, group].concat()),
        "leave_consumer_group" => (605, [topic, group].concat()),
        other => panic!("no raw request for {other}"),
    }
}

/// The ids of the fixture, which can change when a deleted stream or topic is recreated.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct World {
    s0: u32,
    t00: u32,
    t01: u32,
    s1: u32,
    t10: u32,
    root_client_id: u32,
}

fn permissions_of(actor: usize, world: &World) -> Option<Permissions> {
    let stream0 = world.s0 as usize;
    match actor {
        STREAM_SCOPED => {
            let stream = StreamPermissions { manage_stream: true, ..StreamPermissions::default() };
            Some(Permissions {
                global: GlobalPermissions::default(),
                streams: Some(BTreeMap::from([(stream0, stream)])),
            })
        }
        TOPIC_SCOPED => {
            let topic = TopicPermissions { manage_topic: true, ..TopicPermissions::default() };
            let topics = Some(BTreeMap::from([(world.t00 as usize, topic)]));
            let stream = StreamPermissions { topics, ..StreamPermissions::default() };
            Some(Permissions {
                global: GlobalPermissions::default(),
                streams: Some(BTreeMap::from([(stream0, stream)])),
            })
        }
        4 => Some(Permissions {
            global: GlobalPermissions {
                read_servers: true,
                read_users: true,
                read_streams: true,
                read_topics: true,
                poll_messages: true,
                ..GlobalPermissions::default()
            },
            streams: None,
        }),
        5 => Some(Permissions {
            global: GlobalPermissions {
                manage_servers: true,
                manage_users: true,
                manage_streams: true,
                manage_topics: true,
                poll_messages: true,
                send_messages: true,
                ..GlobalPermissions::default()
            },
            streams: None,
        }),
        _ => None,
    }
}

/// The id of stream `name`, created if missing; true when it was created.
async fn ensure_stream(admin: &IggyClient, name: &str) -> anyhow::Result<(u32, bool)> {
    match admin.get_stream(&named(name)).await? {
        Some(stream) => Ok((stream.id, false)),
        None => Ok((admin.create_stream(name).await?.id, true)),
    }
}

/// Makes stream `stream` hold exactly the topics `wanted` (name, partitions); returns
/// their ids in order, each with whether it was created.
async fn ensure_topics(admin: &IggyClient, stream: u32, wanted: &[(&str, u32)]) -> anyhow::Result<Vec<(u32, bool)>> {
    let s = id(stream);
    for topic in admin.get_topics(&s).await? {
        if !wanted.iter().any(|(name, _)| *name == topic.name) {
            admin.delete_topic(&s, &id(topic.id)).await?;
        }
    }
    let mut ids = Vec::new();
    for (name, partitions) in wanted {
        let (topic, created) = match admin.get_topic(&s, &named(name)).await? {
            Some(topic) => (topic, false),
            None => (admin.create_topic(&s, name, &topic_options(*partitions)).await?, true),
        };
        let t = id(topic.id);
        if topic.partitions_count < *partitions {
            admin.create_partitions(&s, &t, partitions - topic.partitions_count).await?;
        } else if topic.partitions_count > *partitions {
            admin.delete_partitions(&s, &t, topic.partitions_count - partitions).await?;
        }
        ids.push((topic.id, created));
    }
    Ok(ids)
}

/// Streams perm-s0 (topics t0 with 2 partitions, t1) and perm-s1 (topic t0) and no other;
/// true when stream 0 or its topic 0 had to be created.
async fn ensure_streams_and_topics(admin: &IggyClient, world: &mut World) -> anyhow::Result<bool> {
    for stream in admin.get_streams().await? {
        if stream.name != S0 && stream.name != S1 {
            admin.delete_stream(&id(stream.id)).await?;
        }
    }
    let (s0, s0_created) = ensure_stream(admin, S0).await?;
    let (s1, _) = ensure_stream(admin, S1).await?;
    let s0_topics = ensure_topics(admin, s0, &[(T0, 2), (T1, 1)]).await?;
    let s1_topics = ensure_topics(admin, s1, &[(T0, 1)]).await?;
    (world.s0, world.s1) = (s0, s1);
    (world.t00, world.t01, world.t10) = (s0_topics[0].0, s0_topics[1].0, s1_topics[0].0);
    Ok(s0_created || s0_topics[0].1)
}

/// A message in partition 0 of perm-s0/t0, group g as its only group, the actors and the
/// target user as the only users besides root.
async fn ensure_contents_and_users(admin: &IggyClient, world: &World) -> anyhow::Result<()> {
    let (s, t) = (id(world.s0), id(world.t00));
    let topic = admin.get_topic(&s, &t).await?.expect("topic t0");
    if topic.partitions.iter().find(|p| p.id == 0).is_some_and(|p| p.messages_count == 0) {
        let mut one = vec![message(1, b"fixture".to_vec(), None)];
        admin.send_messages(&s, &t, &Partitioning::partition_id(0), &mut one).await?;
    }
    for group in admin.get_consumer_groups(&s, &t).await? {
        if group.name != GROUP {
            admin.delete_consumer_group(&s, &t, &id(group.id)).await?;
        }
    }
    if admin.get_consumer_group(&s, &t, &named(GROUP)).await?.is_none() {
        admin.create_consumer_group(&s, &t, GROUP).await?;
    }
    let mut present = Vec::new();
    for user in admin.get_users().await? {
        if user.username != TARGET && !CREDENTIALS.iter().any(|(name, _)| *name == user.username) {
            admin.delete_user(&id(user.id)).await?;
        } else {
            present.push(user.username);
        }
    }
    for (actor, &(username, password)) in CREDENTIALS.iter().enumerate().take(ROOT).skip(1) {
        if !present.iter().any(|name| name == username) {
            admin.create_user(username, password, UserStatus::Active, permissions_of(actor, world)).await?;
        }
    }
    if !present.iter().any(|name| name == TARGET) {
        admin.create_user(TARGET, TARGET_PASSWORD, UserStatus::Active, None).await?;
    }
    Ok(())
}

/// Restores the fixture (see the helpers above) and nothing else. Returns true when stream
/// 0 or its topic 0 was recreated: the scoped actors' permissions are then granted again
/// on the (possibly new) ids, and their sessions should be renewed.
async fn ensure_world(admin: &IggyClient, world: &mut World) -> anyhow::Result<bool> {
    let recreated = ensure_streams_and_topics(admin, world).await?;
    ensure_contents_and_users(admin, world).await?;
    if recreated {
        for actor in [STREAM_SCOPED, TOPIC_SCOPED] {
            admin.update_permissions(&named(CREDENTIALS[actor].0), permissions_of(actor, world)).await?;
        }
    }
    Ok(recreated)
}

/// Everything a denied command could have changed, as comparable lines.
async fn fingerprint(admin: &IggyClient, world: &World) -> anyhow::Result<Vec<String>> {
    let mut lines = Vec::new();
    for stream in admin.get_streams().await? {
        lines.push(format!("stream {} {} topics={}", stream.id, stream.name, stream.topics_count));
        for topic in admin.get_topics(&id(stream.id)).await? {
            let (name, partitions, messages) = (topic.name, topic.partitions_count, topic.messages_count);
            lines.push(format!("  topic {} {name} partitions={partitions} messages={messages}", topic.id));
        }
    }
    for group in admin.get_consumer_groups(&id(world.s0), &id(world.t00)).await? {
        lines.push(format!("group {} {} members={}", group.id, group.name, group.members_count));
    }
    for user in admin.get_users().await? {
        let details = admin.get_user(&id(user.id)).await?.expect("listed user");
        lines.push(format!("user {} {} {} {:?}", user.id, user.username, user.status, details.permissions));
    }
    let offset = admin.get_consumer_offset(&Consumer::new(id(1)), &id(world.s0), &id(world.t00), Some(0)).await?;
    lines.push(format!("offset {:?}", offset.map(|o| o.stored_offset)));
    Ok(lines)
}

/// Setup a command needs besides the fixture: done by the admin, or by the actor itself
/// for what only the actor can do. Failures are fine (the actor may be denied).
async fn prepare(command: &str, admin: &IggyClient, actor: Option<&IggyClient>, world: &World) {
    let (s, t) = (id(world.s0), id(world.t00));
    match (command, actor) {
        ("delete_consumer_offset", _) => {
            let _ = admin.store_consumer_offset(&Consumer::new(id(1)), &s, &t, Some(0), 0).await;
        }
        ("delete_personal_access_token", Some(client)) => {
            let _ = client.create_personal_access_token(PAT_DOOMED, IggyExpiry::NeverExpire).await;
        }
        ("create_personal_access_token", Some(client)) => {
            let _ = client.delete_personal_access_token(PAT_NEW).await;
        }
        ("leave_consumer_group", Some(client)) => {
            let _ = client.join_consumer_group(&s, &t, &named(GROUP)).await;
        }
        _ => {}
    }
}

fn unit<T>(result: Result<T, IggyError>) -> Result<(), IggyError> {
    result.map(|_| ())
}

async fn run_system_or_users(
    command: &str,
    client: &IggyClient,
    actor: usize,
    w: &World,
) -> Option<Result<(), IggyError>> {
    let (me, my_password) = CREDENTIALS[actor];
    let keep = UserUpdateOptions::default();
    let result = match command {
        "ping" => client.ping().await,
        "get_me" => unit(client.get_me().await),
        "get_cluster_metadata" => unit(client.get_cluster_metadata().await),
        "describe_options" => unit(client.describe_options(OptionsScope::Topic).await),
        "get_stats" => unit(client.get_stats().await),
        "get_clients" => unit(client.get_clients().await),
        "get_client" => unit(client.get_client(w.root_client_id).await),
        "snapshot" => unit(client.snapshot(SnapshotCompression::Deflated, vec![SystemSnapshotType::Test]).await),
        "get_user" => unit(client.get_user(&named(TARGET)).await),
        "get_users" => unit(client.get_users().await),
        "create_user" => unit(client.create_user("perm-new-user", "new-user-pass", UserStatus::Active, None).await),
        "update_user" => client.update_user(&named(TARGET), Some(TARGET), None, &keep).await,
        "update_permissions" => client.update_permissions(&named(TARGET), None).await,
        "change_password" => client.change_password(&named(TARGET), TARGET_PASSWORD, TARGET_PASSWORD).await,
        "change_own_password" => client.change_password(&named(me), my_password, my_password).await,
        "delete_user" => client.delete_user(&named(TARGET)).await,
        "get_personal_access_tokens" => unit(client.get_personal_access_tokens().await),
        "create_personal_access_token" => {
            unit(client.create_personal_access_token(PAT_NEW, IggyExpiry::NeverExpire).await)
        }
        "delete_personal_access_token" => client.delete_personal_access_token(PAT_DOOMED).await,
        _ => return None,
    };
    Some(result)
}

async fn run_streams_or_topics(command: &str, client: &IggyClient, w: &World) -> Option<Result<(), IggyError>> {
    let (s0, s1, t00, t01, t10) = (id(w.s0), id(w.s1), id(w.t00), id(w.t01), id(w.t10));
    let keep_stream = StreamUpdateOptions::default();
    let keep_topic = TopicUpdateOptions::default();
    let result = match command {
        "get_stream" => unit(client.get_stream(&s0).await),
        "get_other_stream" => unit(client.get_stream(&s1).await),
        "get_streams" => unit(client.get_streams().await),
        "create_stream" => unit(client.create_stream("perm-new-stream").await),
        "update_stream" => client.update_stream(&s0, S0, &keep_stream).await,
        "update_other_stream" => client.update_stream(&s1, S1, &keep_stream).await,
        "purge_stream" => client.purge_stream(&s0).await,
        "delete_stream" => client.delete_stream(&s0).await,
        "get_topic" => unit(client.get_topic(&s0, &t00).await),
        "get_sibling_topic" => unit(client.get_topic(&s0, &t01).await),
        "get_other_stream_topic" => unit(client.get_topic(&s1, &t10).await),
        "get_topics" => unit(client.get_topics(&s0).await),
        "create_topic" => unit(client.create_topic(&s0, "perm-new-topic", &topic_options(1)).await),
        "update_topic" => client.update_topic(&s0, &t00, T0, &keep_topic).await,
        "update_sibling_topic" => client.update_topic(&s0, &t01, T1, &keep_topic).await,
        "purge_topic" => client.purge_topic(&s0, &t00).await,
        "delete_topic" => client.delete_topic(&s0, &t00).await,
        "create_partitions" => client.create_partitions(&s0, &t00, 1).await,
        "delete_partitions" => client.delete_partitions(&s0, &t00, 1).await,
        "delete_segments" => client.delete_segments(&s0, &t00, 0, 1).await,
        _ => return None,
    };
    Some(result)
}

async fn run_messages_or_groups(command: &str, client: &IggyClient, w: &World) -> Option<Result<(), IggyError>> {
    let (s, t, sibling, g) = (id(w.s0), id(w.t00), id(w.t01), named(GROUP));
    let consumer = Consumer::new(id(1));
    let result = match command {
        "send_messages" => {
            let mut one = vec![message(2, b"matrix".to_vec(), None)];
            unit(client.send_messages(&s, &t, &Partitioning::partition_id(0), &mut one).await)
        }
        "poll_messages" => {
            let first = PollingStrategy::offset(0);
            unit(client.poll_messages(&s, &t, Some(0), &consumer, &first, 10, false).await)
        }
        "store_consumer_offset" => client.store_consumer_offset(&consumer, &s, &t, Some(0), 0).await,
        "get_consumer_offset" => unit(client.get_consumer_offset(&consumer, &s, &t, Some(0)).await),
        "delete_consumer_offset" => client.delete_consumer_offset(&consumer, &s, &t, Some(0)).await,
        "get_consumer_group" => unit(client.get_consumer_group(&s, &t, &g).await),
        "get_consumer_groups" => unit(client.get_consumer_groups(&s, &t).await),
        "get_sibling_consumer_groups" => unit(client.get_consumer_groups(&s, &sibling).await),
        "create_consumer_group" => unit(client.create_consumer_group(&s, &t, "perm-new-group").await),
        "delete_consumer_group" => client.delete_consumer_group(&s, &t, &g).await,
        "join_consumer_group" => client.join_consumer_group(&s, &t, &g).await,
        "leave_consumer_group" => client.leave_consumer_group(&s, &t, &g).await,
        _ => return None,
    };
    Some(result)
}

/// Runs `command` as a logged-in actor through the typed client API.
async fn run(command: &str, client: &IggyClient, actor: usize, world: &World) -> Result<(), IggyError> {
    if let Some(result) = run_system_or_users(command, client, actor, world).await {
        return result;
    }
    if let Some(result) = run_streams_or_topics(command, client, world).await {
        return result;
    }
    if let Some(result) = run_messages_or_groups(command, client, world).await {
        return result;
    }
    panic!("no runner for {command}")
}

/// Runs `command` on a fresh connection that never logged in. The typed API refuses most
/// commands locally before login, so the command goes out by its code, with the body the
/// client would send.
async fn run_anonymously(command: &str, address: &str, world: &World) -> Result<(), IggyError> {
    let client = connect_anonymous(address).await.expect("connect");
    if command == "ping" {
        return client.ping().await;
    }
    let (code, body) = raw_session_request(command).unwrap_or_else(|| raw_resource_request(command, world));
    unit(client.send_binary_request(code, body.into()).await)
}

/// A failure description unless `result` matches the table: allowed means success or an
/// error other than 40/41; denied means 40 before login and 41 after it (40 to a logged-in
/// client would also make the SDK reconnect and log in again).
fn judge(command: &str, actor: usize, allowed: bool, result: &Result<(), IggyError>) -> Option<String> {
    let code = result.as_ref().err().map(IggyError::as_code);
    let denial = if actor == ANONYMOUS { UNAUTHENTICATED } else { UNAUTHORIZED };
    let fine = match (allowed, code) {
        // The snapshot is optional for a server: refusing it as unavailable to every
        // logged-in caller reveals nothing and does nothing.
        (_, Some(FEATURE_UNAVAILABLE)) if command == "snapshot" && actor != ANONYMOUS => true,
        (true, None) => true,
        (true, Some(code)) => code != UNAUTHENTICATED && code != UNAUTHORIZED,
        (false, Some(code)) => code == denial,
        (false, None) => false,
    };
    let expected = if allowed { "allowed".to_owned() } else { format!("denied with {denial}") };
    let got = match result {
        Ok(()) => "success".to_owned(),
        Err(error) => format!("error {} ({error})", error.as_code()),
    };
    (!fine).then(|| format!("{command} as {}: expected {expected}, got {got}", ACTOR_NAMES[actor]))
}

async fn connect_actor(address: &str, actor: usize) -> anyhow::Result<IggyClient> {
    let (username, password) = CREDENTIALS[actor];
    connect_user(address, username, password).await
}

/// One command as one actor: setup, the call, the verdict, and for a denial a check that
/// nothing changed.
async fn check(
    command: &str,
    actor: usize,
    allowed: bool,
    admin: &IggyClient,
    clients: &[Option<IggyClient>],
    world: &World,
    address: &str,
) -> anyhow::Result<Vec<String>> {
    let client = clients[actor].as_ref();
    prepare(command, admin, client, world).await;
    let before = if allowed { None } else { Some(fingerprint(admin, world).await?) };
    let result = match client {
        None => run_anonymously(command, address, world).await,
        Some(client) => run(command, client, actor, world).await,
    };
    let mut failures: Vec<String> = judge(command, actor, allowed, &result).into_iter().collect();
    if let Some(before) = before {
        let after = fingerprint(admin, world).await?;
        if before != after {
            failures
                .push(format!("{command} as {} was denied but changed {before:?} into {after:?}", ACTOR_NAMES[actor]));
        }
    }
    Ok(failures)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_is_allowed_or_denied_as_the_table_says() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let address = server.tcp_address();
    let admin = connect_root(&address).await?;
    let mut world = World::default();
    ensure_world(&admin, &mut world).await?;
    world.root_client_id = admin.get_me().await?.client_id;
    let mut clients: Vec<Option<IggyClient>> = vec![None];
    for actor in 1..=ROOT {
        clients.push(Some(connect_actor(&address, actor).await?));
    }

    let mut failures = Vec::new();
    for (command, allowed) in MATRIX {
        for (actor, &allowed) in allowed.iter().enumerate() {
            if ensure_world(&admin, &mut world).await? {
                for scoped in [STREAM_SCOPED, TOPIC_SCOPED] {
                    clients[scoped] = Some(connect_actor(&address, scoped).await?);
                }
            }
            failures.extend(check(command, actor, allowed, &admin, &clients, &world, &address).await?);
        }
    }
    let checks = MATRIX.len() * (ROOT + 1);
    assert!(failures.is_empty(), "{} of {checks} checks failed:\n{}", failures.len(), failures.join("\n"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_permissions_keeps_its_session_tools() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let address = server.tcp_address();
    let root = connect_root(&address).await?;
    let plain = root.create_user("plain", "plain-pass", UserStatus::Active, None).await?;
    let client = connect_user(&address, "plain", "plain-pass").await?;

    client.ping().await?;
    assert_eq!(client.get_me().await?.user_id, Some(plain.id));
    assert_eq!(client.get_cluster_metadata().await?.nodes.len(), 1);
    client.create_personal_access_token("own", IggyExpiry::NeverExpire).await?;
    assert_eq!(client.get_personal_access_tokens().await?.len(), 1);
    client.delete_personal_access_token("own").await?;
    client.change_password(&id(plain.id), "plain-pass", "plain-pass-2").await?;
    connect_user(&address, "plain", "plain-pass-2").await?;

    // Everything else is refused, including reading itself as a user record.
    let streams = client.get_streams().await;
    assert_eq!(error_code(streams, "get_streams"), UNAUTHORIZED);
    let users = client.get_users().await;
    assert_eq!(error_code(users, "get_users"), UNAUTHORIZED);
    let other = client.change_password(&id(0), ROOT_PASSWORD, "hijacked").await;
    assert_eq!(error_code(other, "change root's password"), UNAUTHORIZED);
    connect_root(&address).await?;

    client.logout_user().await?;
    client.ping().await?;
    let after = client.send_binary_request(201, Vec::new().into()).await;
    assert_eq!(error_code(after, "get_streams after logout"), UNAUTHENTICATED);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_changes_apply_to_users_already_logged_in() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let address = server.tcp_address();
    let root = connect_root(&address).await?;
    let stream = root.create_stream("live").await?;
    root.create_user("grantee", "grantee-pass", UserStatus::Active, None).await?;
    let client = connect_user(&address, "grantee", "grantee-pass").await?;
    assert_eq!(error_code(client.get_stream(&id(stream.id)).await, "before the grant"), UNAUTHORIZED);

    let read = StreamPermissions { read_stream: true, ..StreamPermissions::default() };
    let granted = Permissions {
        global: GlobalPermissions::default(),
        streams: Some(BTreeMap::from([(stream.id as usize, read)])),
    };
    root.update_permissions(&named("grantee"), Some(granted)).await?;
    let seen = client.get_stream(&id(stream.id)).await?.expect("stream");
    assert_eq!(seen.name, "live", "the grant applies to the open session");
    assert_eq!(error_code(client.get_streams().await, "list without a global grant"), UNAUTHORIZED);

    root.update_permissions(&named("grantee"), None).await?;
    assert_eq!(error_code(client.get_stream(&id(stream.id)).await, "after the revoke"), UNAUTHORIZED);
    Ok(())
}
