//! Consumer-group membership kept in the metadata log: a member that joins through the
//! metadata primary is listed, with its partitions, by every node's own view; after kill -9
//! of that primary the survivors still hold it, a member joining the new primary shares the
//! partitions with it at a later generation, and once the lost node stays unreachable past
//! the rebalancing timeout its member is dropped and the survivor takes every partition. On
//! one node, a restart drops the members of the previous process. Members are driven with
//! raw frames, so no client redirection hides which node answered.

use std::time::Duration;

use iggy::prelude::*;
use rill_tests::raw::{self, Request};
use rill_tests::{TestServer, connect_root, create_stream_and_topic, free_port, named};

use crate::cluster::{eventually, start_cluster_with};
use crate::partition_groups::client_once_committing;

const TIMEOUT: Duration = Duration::from_secs(40);
const JOIN_CONSUMER_GROUP: u8 = 148;
const GET_CONSUMER_GROUP: u32 = 600;
const SYNC_CONSUMER_GROUP: u32 = 606;

/// A raw session on one node.
struct Member {
    stream: std::net::TcpStream,
    client: u128,
    session: u64,
    request: u64,
}

impl Member {
    fn connect(address: &str) -> anyhow::Result<Self> {
        let mut stream = raw::connect(address)?;
        let client = 0xc3u128 << 120 | u128::from(free_port()) << 16 | u128::from(free_port());
        let session = raw::try_login(&mut stream, client).map_err(anyhow::Error::msg)?;
        Ok(Self { stream, client, session, request: 1 })
    }

    /// One request; the reply's status and body.
    fn exchange(&mut self, operation: u8, code: Option<u32>, body: &[u8]) -> anyhow::Result<(u32, Vec<u8>)> {
        let header = Request {
            size: None,
            command: raw::COMMAND_REQUEST,
            client: self.client,
            request_checksum: 0,
            request: self.request,
            operation,
            session: self.session,
            code,
        };
        self.request += 1;
        raw::send(&mut self.stream, &header.frame(body));
        let reply = raw::read_frame(&mut self.stream).expect_frame("a reply");
        Ok((reply.status(), reply.body().to_vec()))
    }

    /// JOIN_CONSUMER_GROUP: true once the node committed it (a backup refuses with 58).
    fn join(&mut self, group: &[u8]) -> anyhow::Result<bool> {
        let (status, body) = self.exchange(JOIN_CONSUMER_GROUP, None, group)?;
        Ok(status == 0 && body.get(..4) == Some(&[0, 0, 0, 0]))
    }

    /// SYNC_CONSUMER_GROUP: the generation and this member's partitions.
    fn sync(&mut self, group: &[u8]) -> anyhow::Result<(u64, Vec<u32>)> {
        let (status, body) = self.exchange(raw::OP_NON_REPLICATED, Some(SYNC_CONSUMER_GROUP), group)?;
        anyhow::ensure!(status == 0 && body.len() >= 12, "sync: status {status}, {} bytes", body.len());
        let count = raw::u32_at(&body, 8) as usize;
        Ok((raw::u64_at(&body, 0), (0..count).map(|i| raw::u32_at(&body, 12 + 4 * i)).collect()))
    }
}

/// `[stream][topic][group]`, all numeric.
fn group_body(stream: u32, topic: u32, group: u32) -> Vec<u8> {
    [stream, topic, group].iter().flat_map(|id| [&[1u8, 4][..], &id.to_le_bytes()].concat()).collect()
}

/// GET_CONSUMER_GROUP on one node: each member's partitions, from that node's own view.
fn members_on(address: &str, group: &[u8]) -> anyhow::Result<Vec<Vec<u32>>> {
    let mut asker = Member::connect(address)?;
    let (status, body) = asker.exchange(raw::OP_NON_REPLICATED, Some(GET_CONSUMER_GROUP), group)?;
    anyhow::ensure!(status == 0 && body.len() >= 13, "{address}: status {status}");
    let (count, name) = (raw::u32_at(&body, 8) as usize, body[12] as usize);
    let mut at = 13 + name;
    let mut members = Vec::new();
    for _ in 0..count {
        let partitions = raw::u32_at(&body, at + 4) as usize;
        members.push((0..partitions).map(|i| raw::u32_at(&body, at + 8 + 4 * i)).collect());
        at += 8 + 4 * partitions;
    }
    Ok(members)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_is_the_same_on_every_node_and_outlives_the_metadata_primary() -> anyhow::Result<()> {
    let mut cluster = start_cluster_with(&|_| {
        vec![
            ("IGGY_CLUSTER_REPLICATE_PARTITIONS", "true".to_owned()),
            ("IGGY_SYSTEM_SHARDING_CPU_ALLOCATION", "2".to_owned()),
            ("IGGY_CONSUMER_GROUP_REBALANCING_TIMEOUT", "8 s".to_owned()),
        ]
    })?;
    let client = client_once_committing(&cluster).await?;
    let topic = create_stream_and_topic(&client, "members", "events", 4).await?;
    let group = client.create_consumer_group(&rill_tests::id(topic.0), &rill_tests::id(topic.1), "workers").await?;
    let body = group_body(topic.0, topic.1, group.id);
    drop(client);

    let mut first = Member::connect(&cluster.addresses[0])?;
    anyhow::ensure!(first.join(&body)?, "node 0, the metadata primary, commits the join");
    let (before, partitions) = first.sync(&body)?;
    assert_eq!(partitions, vec![0, 1, 2, 3]);
    for address in &cluster.addresses {
        eventually(TIMEOUT, &format!("{address} lists the member"), || async {
            let members = members_on(address, &body)?;
            anyhow::ensure!(members == vec![vec![0, 1, 2, 3]], "{members:?}");
            Ok(())
        })
        .await?;
    }

    // The primary goes. The survivors elect another and still hold the member.
    cluster.nodes[0].kill9()?;
    let survivors = &cluster.addresses[1..];
    let deadline = std::time::Instant::now() + TIMEOUT;
    let mut second = loop {
        let joined = survivors.iter().find_map(|address| {
            let mut member = Member::connect(address).ok()?;
            member.join(&body).ok()?.then_some(member)
        });
        if let Some(member) = joined {
            break member;
        }
        anyhow::ensure!(std::time::Instant::now() < deadline, "no survivor commits a join");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (during, partitions) = second.sync(&body)?;
    assert!(during > before, "generation {during} after {before}: the group's history goes on");
    assert_eq!(partitions, vec![1, 3], "shared with the lost node's member, which the survivors still hold");
    for address in survivors {
        eventually(TIMEOUT, &format!("{address} holds both members"), || async {
            let members = members_on(address, &body)?;
            anyhow::ensure!(members.len() == 2, "{members:?}");
            Ok(())
        })
        .await?;
    }

    // Past the rebalancing timeout the lost node's member is dropped.
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let (after, partitions) = second.sync(&body)?;
        if partitions == vec![0, 1, 2, 3] {
            assert!(after > during, "generation {after} after {during}");
            break;
        }
        anyhow::ensure!(std::time::Instant::now() < deadline, "the survivor still has {partitions:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for address in survivors {
        eventually(TIMEOUT, &format!("{address} lists one member"), || async {
            let members = members_on(address, &body)?;
            anyhow::ensure!(members == vec![vec![0, 1, 2, 3]], "{members:?}");
            Ok(())
        })
        .await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_drops_the_members_of_the_previous_process() -> anyhow::Result<()> {
    let mut server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    let topic = create_stream_and_topic(&client, "members", "events", 2).await?;
    let (s, t) = (rill_tests::id(topic.0), rill_tests::id(topic.1));
    let group = client.create_consumer_group(&s, &t, "workers").await?;
    client.join_consumer_group(&s, &t, &named("workers")).await?;
    let body = group_body(topic.0, topic.1, group.id);
    let mut raw_member = Member::connect(&server.tcp_address())?;
    anyhow::ensure!(raw_member.join(&body)?, "the join commits");
    assert_eq!(members_on(&server.tcp_address(), &body)?.len(), 2);
    // Leaving by closing the connection: the member goes at once.
    drop(raw_member);
    eventually(TIMEOUT, "the closed connection's member is gone", || async {
        let members = members_on(&server.tcp_address(), &body)?;
        anyhow::ensure!(members.len() == 1, "{members:?}");
        Ok(())
    })
    .await?;
    // Killed with the SDK client's member still in: the next process drops it.
    server.kill9()?;
    drop(client);
    server.restart()?;
    eventually(TIMEOUT, "no member of the previous process is left", || async {
        let members = members_on(&server.tcp_address(), &body)?;
        anyhow::ensure!(members.is_empty(), "{members:?}");
        Ok(())
    })
    .await?;
    Ok(())
}
