//! Consumer groups through the official 0.11.0 client: create, get, list, delete, join and leave, round-robin partition assignment in join order, ownership on polls, membership ending with the connection, and groups and group offsets surviving a graceful restart.

use iggy::prelude::*;
use rill_tests::{
    TestServer, connect_root, create_stream_and_topic, error_code, eventually, id, message, named, sync_consumer_group,
    topic_options,
};
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::time::Instant;

const STREAM_ID_NOT_FOUND: u32 = 1009;
const TOPIC_ID_NOT_FOUND: u32 = 2010;
const GROUP_ID_NOT_FOUND: u32 = 5000;
const GROUP_NAME_NOT_FOUND: u32 = 5003;
const GROUP_NAME_ALREADY_EXISTS: u32 = 5004;
const GROUP_MEMBER_NOT_FOUND: u32 = 5006;

/// A group's members as their sorted partition lists, sorted (member ids left out).
async fn member_partitions(client: &IggyClient, group: &str) -> anyhow::Result<Vec<Vec<u32>>> {
    let details = client.get_consumer_group(&named("s"), &named("t"), &named(group)).await?.expect("group exists");
    assert_eq!(details.members_count as usize, details.members.len(), "members_count matches the list");
    let mut members: Vec<Vec<u32>> = details
        .members
        .into_iter()
        .map(|member| {
            assert_eq!(member.partitions_count as usize, member.partitions.len(), "partitions_count matches");
            let mut partitions = member.partitions;
            partitions.sort_unstable();
            partitions
        })
        .collect();
    members.sort();
    Ok(members)
}

/// The caller's assignment in group `group` of s/t, from SYNC_CONSUMER_GROUP.
async fn assignment(client: &IggyClient, group: &str) -> Result<Option<Vec<u32>>, IggyError> {
    sync_consumer_group(client, &named("s"), &named("t"), &named(group)).await
}

fn sorted(mut lists: Vec<Vec<u32>>) -> Vec<Vec<u32>> {
    lists.sort();
    lists
}

fn is_group_missing(code: u32) -> bool {
    code == GROUP_ID_NOT_FOUND || code == GROUP_NAME_NOT_FOUND
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_are_created_found_listed_and_deleted() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    create_stream_and_topic(&client, "s", "t", 3).await?;
    client.create_topic(&named("s"), "u", &topic_options(1)).await?;
    let (s, t) = (named("s"), named("t"));

    let alpha = client.create_consumer_group(&s, &t, "alpha").await?;
    assert_eq!((alpha.id, alpha.name.as_str(), alpha.partitions_count), (0, "alpha", 3));
    assert_eq!((alpha.members_count, alpha.members.len()), (0, 0));
    let beta = client.create_consumer_group(&s, &t, "beta").await?;
    assert_eq!(beta.id, 1);
    let duplicate = client.create_consumer_group(&s, &t, "alpha").await;
    assert_eq!(error_code(duplicate, "duplicate group name"), GROUP_NAME_ALREADY_EXISTS);
    let elsewhere = client.create_consumer_group(&s, &named("u"), "alpha").await?;
    assert_eq!((elsewhere.id, elsewhere.partitions_count), (0, 1), "ids start at 0 in every topic");

    let by_id = client.get_consumer_group(&s, &t, &id(1)).await?.expect("beta by id");
    assert_eq!((by_id.id, by_id.name.as_str()), (1, "beta"));
    let by_name = client.get_consumer_group(&s, &t, &named("alpha")).await?.expect("alpha by name");
    assert_eq!((by_name.id, by_name.partitions_count, by_name.members_count), (0, 3, 0));
    assert!(client.get_consumer_group(&s, &t, &id(9)).await?.is_none(), "missing id");
    assert!(client.get_consumer_group(&s, &t, &named("nope")).await?.is_none(), "missing name");

    let listed: Vec<(u32, String, u32, u32)> = client
        .get_consumer_groups(&s, &t)
        .await?
        .into_iter()
        .map(|g| (g.id, g.name, g.partitions_count, g.members_count))
        .collect();
    assert_eq!(listed, vec![(0, "alpha".to_owned(), 3, 0), (1, "beta".to_owned(), 3, 0)]);

    client.delete_consumer_group(&s, &t, &named("alpha")).await?;
    assert!(client.get_consumer_group(&s, &t, &named("alpha")).await?.is_none(), "deleted");
    let names: Vec<String> = client.get_consumer_groups(&s, &t).await?.into_iter().map(|g| g.name).collect();
    assert_eq!(names, vec!["beta".to_owned()]);
    assert!(client.get_consumer_group(&s, &named("u"), &named("alpha")).await?.is_some(), "other topic's alpha");

    let again = client.delete_consumer_group(&s, &t, &named("alpha")).await;
    assert!(is_group_missing(error_code(again, "delete a deleted group")));
    let missing_id = client.delete_consumer_group(&s, &t, &id(42)).await;
    assert!(is_group_missing(error_code(missing_id, "delete a missing id")));
    let no_topic = client.get_consumer_group(&s, &id(7), &id(0)).await;
    assert_eq!(error_code(no_topic, "group of a missing topic"), TOPIC_ID_NOT_FOUND);
    let no_stream = client.create_consumer_group(&id(7), &id(0), "x").await;
    assert_eq!(error_code(no_stream, "group in a missing stream"), STREAM_ID_NOT_FOUND);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_and_leave_change_the_membership() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let address = server.tcp_address();
    let first = connect_root(&address).await?;
    let second = connect_root(&address).await?;
    create_stream_and_topic(&first, "s", "t", 3).await?;
    let (s, t) = (named("s"), named("t"));
    first.create_consumer_group(&s, &t, "g").await?;

    first.join_consumer_group(&s, &t, &named("g")).await?;
    assert_eq!(member_partitions(&first, "g").await?, vec![vec![0, 1, 2]], "the only member holds everything");
    assert_eq!(assignment(&first, "g").await?, Some(vec![0, 1, 2]));
    assert_eq!(assignment(&second, "g").await?, None, "a non-member syncs to nothing");

    let not_member = second.leave_consumer_group(&s, &t, &named("g")).await;
    assert_eq!(error_code(not_member, "leave without joining"), GROUP_MEMBER_NOT_FOUND);

    first.leave_consumer_group(&s, &t, &id(0)).await?;
    assert!(member_partitions(&first, "g").await?.is_empty(), "no members after leaving");
    assert_eq!(assignment(&first, "g").await?, None);
    let twice = first.leave_consumer_group(&s, &t, &named("g")).await;
    assert_eq!(error_code(twice, "leave twice"), GROUP_MEMBER_NOT_FOUND);

    let missing = first.join_consumer_group(&s, &t, &named("nope")).await;
    assert!(is_group_missing(error_code(missing, "join a missing group")));

    let me = first.get_me().await?;
    assert_eq!(me.consumer_groups_count, 0, "get_me after leaving: {me:?}");
    Ok(())
}

/// Syncs every member (in join order) until their assignments are `expected`, checking on
/// every round that no partition is held by two members. A handoff may be cooperative: a
/// partition moving between members stays with its old owner until that owner has synced,
/// so the target is reached only after a round or two.
async fn converge(members: &[&IggyClient], group: &str, expected: &[Vec<u32>]) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut current = Vec::new();
        for member in members {
            current.push(assignment(member, group).await?.expect("a member"));
        }
        let mut seen = BTreeSet::new();
        for partition in current.iter().flatten() {
            assert!(seen.insert(*partition), "partition {partition} held by two members: {current:?}");
        }
        if current == expected {
            return Ok(());
        }
        if Instant::now() >= deadline {
            anyhow::bail!("assignments {current:?} never became {expected:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_are_assigned_round_robin_in_join_order() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let address = server.tcp_address();
    let (a, b, c) = (connect_root(&address).await?, connect_root(&address).await?, connect_root(&address).await?);
    create_stream_and_topic(&a, "s", "t", 6).await?;
    let (s, t, g) = (named("s"), named("t"), named("g"));
    a.create_consumer_group(&s, &t, "g").await?;

    a.join_consumer_group(&s, &t, &g).await?;
    converge(&[&a], "g", &[vec![0, 1, 2, 3, 4, 5]]).await?;
    b.join_consumer_group(&s, &t, &g).await?;
    converge(&[&a, &b], "g", &[vec![0, 2, 4], vec![1, 3, 5]]).await?;
    c.join_consumer_group(&s, &t, &g).await?;
    let expected = vec![vec![0, 3], vec![1, 4], vec![2, 5]];
    converge(&[&a, &b, &c], "g", &expected).await?;
    assert_eq!(member_partitions(&a, "g").await?, expected, "the group details agree");

    // The middle member's connection goes away: its membership ends with it.
    b.shutdown().await?;
    drop(b);
    eventually(Duration::from_secs(20), "the disconnected member leaves the group", || async {
        Ok(member_partitions(&a, "g").await?.len() == 2)
    })
    .await?;
    converge(&[&a, &c], "g", &[vec![0, 2, 4], vec![1, 3, 5]]).await?;
    assert_eq!(member_partitions(&a, "g").await?, vec![vec![0, 2, 4], vec![1, 3, 5]]);

    a.leave_consumer_group(&s, &t, &g).await?;
    converge(&[&c], "g", &[vec![0, 1, 2, 3, 4, 5]]).await?;
    assert_eq!(member_partitions(&c, "g").await?, vec![vec![0, 1, 2, 3, 4, 5]]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_partition_is_held_by_two_members_of_a_group() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let address = server.tcp_address();
    let admin = connect_root(&address).await?;
    create_stream_and_topic(&admin, "s", "t", 5).await?;
    let (s, t) = (named("s"), named("t"));
    admin.create_consumer_group(&s, &t, "g").await?;
    let mut members = Vec::new();
    for _ in 0..4 {
        let member = connect_root(&address).await?;
        member.join_consumer_group(&s, &t, &named("g")).await?;
        members.push(member);
    }
    let expected = vec![vec![0, 4], vec![1], vec![2], vec![3]];
    let refs: Vec<&IggyClient> = members.iter().collect();
    converge(&refs, "g", &expected).await?;
    assert_eq!(member_partitions(&admin, "g").await?, sorted(expected));
    Ok(())
}

/// `per_partition` messages into every partition of s/t, ids numbered from 1 across all.
async fn fill(client: &IggyClient, partitions: u32, per_partition: u64) -> anyhow::Result<()> {
    for partition in 0..partitions {
        let first = u128::from(partition) * u128::from(per_partition);
        let mut batch: Vec<IggyMessage> = (0..per_partition)
            .map(|n| {
                let message_id = first + u128::from(n) + 1;
                message(message_id, format!("m{message_id}").into_bytes(), None)
            })
            .collect();
        client.send_messages(&named("s"), &named("t"), &Partitioning::partition_id(partition), &mut batch).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_members_poll_only_their_own_partitions() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let address = server.tcp_address();
    let (a, b) = (connect_root(&address).await?, connect_root(&address).await?);
    create_stream_and_topic(&a, "s", "t", 4).await?;
    fill(&a, 4, 25).await?;
    let (s, t) = (named("s"), named("t"));
    let group = Consumer::group(named("g"));
    a.create_consumer_group(&s, &t, "g").await?;
    a.join_consumer_group(&s, &t, &named("g")).await?;

    // A non-member naming a partition gets nothing from it.
    let stolen = b.poll_messages(&s, &t, Some(1), &group, &PollingStrategy::offset(0), 10, false).await;
    if let Ok(polled) = stolen {
        assert!(polled.messages.is_empty(), "a non-member read {} messages", polled.messages.len());
    }
    b.join_consumer_group(&s, &t, &named("g")).await?;
    let owned_by_a = b.poll_messages(&s, &t, Some(0), &group, &PollingStrategy::offset(0), 10, false).await;
    if let Ok(polled) = owned_by_a {
        assert!(polled.messages.is_empty(), "a member read {} messages of another's partition", polled.messages.len());
    }

    let mut ids = BTreeSet::new();
    let mut partitions_of = [BTreeSet::new(), BTreeSet::new()];
    for _ in 0..200 {
        for (member, client) in [&a, &b].into_iter().enumerate() {
            let polled = client.poll_messages(&s, &t, None, &group, &PollingStrategy::next(), 10, true).await?;
            for polled_message in &polled.messages {
                assert!(ids.insert(polled_message.header.id), "message {} polled twice", polled_message.header.id);
                partitions_of[member].insert(polled.partition_id);
            }
        }
        if ids.len() == 100 {
            break;
        }
    }
    assert_eq!(ids, (1..=100).collect(), "every message was polled once");
    assert_eq!(partitions_of[0], BTreeSet::from([0, 2]), "the first member's partitions");
    assert_eq!(partitions_of[1], BTreeSet::from([1, 3]), "the second member's partitions");
    let stored = a.get_consumer_offset(&group, &s, &t, Some(2)).await?.expect("auto-committed");
    assert_eq!(stored.stored_offset, 24, "auto-commit stored the last polled offset");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_and_group_offsets_survive_a_graceful_restart() -> anyhow::Result<()> {
    let mut server = TestServer::start()?;
    let address = server.tcp_address();
    let (s, t) = (named("s"), named("t"));
    let group = Consumer::group(named("alpha"));
    {
        let client = connect_root(&address).await?;
        create_stream_and_topic(&client, "s", "t", 3).await?;
        fill(&client, 3, 10).await?;
        client.create_consumer_group(&s, &t, "alpha").await?;
        client.create_consumer_group(&s, &t, "beta").await?;
        client.join_consumer_group(&s, &t, &named("alpha")).await?;
        client.store_consumer_offset(&group, &s, &t, Some(0), 4).await?;
        client.store_consumer_offset(&group, &s, &t, Some(2), 7).await?;
        let stored = client.get_consumer_offset(&group, &s, &t, Some(2)).await?.expect("stored");
        assert_eq!(stored.stored_offset, 7);
    }
    server.restart()?;

    let client = connect_root(&address).await?;
    let listed = || async {
        let groups = client.get_consumer_groups(&s, &t).await?;
        Ok::<_, anyhow::Error>(
            groups.into_iter().map(|g| (g.id, g.name, g.partitions_count, g.members_count)).collect::<Vec<_>>(),
        )
    };
    let expected = vec![(0, "alpha".to_owned(), 3, 0), (1, "beta".to_owned(), 3, 0)];
    // The old client's member may still be in the group when the server stops (its
    // connection's close can arrive after the stop began); the restarted server drops
    // members whose connections are gone on its membership pass.
    eventually(Duration::from_secs(10), "groups come back, without the members of the old connections", || async {
        Ok(listed().await? == expected)
    })
    .await?;

    client.join_consumer_group(&s, &t, &named("alpha")).await?;
    let p0 = client.get_consumer_offset(&group, &s, &t, Some(0)).await?.expect("partition 0 offset");
    assert_eq!((p0.partition_id, p0.stored_offset), (0, 4));
    let p2 = client.get_consumer_offset(&group, &s, &t, Some(2)).await?.expect("partition 2 offset");
    assert_eq!((p2.partition_id, p2.stored_offset), (2, 7));
    assert!(client.get_consumer_offset(&group, &s, &t, Some(1)).await?.is_none(), "nothing stored for 1");
    let other = Consumer::group(named("beta"));
    assert!(client.get_consumer_offset(&other, &s, &t, Some(0)).await?.is_none(), "beta has its own offsets");

    let polled = client.poll_messages(&s, &t, Some(0), &group, &PollingStrategy::next(), 100, false).await?;
    assert_eq!(polled.messages.first().map(|m| m.header.offset), Some(5), "next resumes after the stored offset");
    let gamma = client.create_consumer_group(&s, &t, "gamma").await?;
    assert_eq!(gamma.id, 2, "group ids continue after the restart");
    Ok(())
}
