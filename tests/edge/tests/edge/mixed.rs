//! Both generations at once: the official 0.11 Python SDK (apache-iggy 0.9.0) and the 0.12
//! Rust client on one server, one topic and one consumer group, each reading what the other
//! wrote and the group's offsets shared.

use iggy::prelude::*;
use rill_edge_tests::id;
use rill_edge_tests::{TestServer, repository_dir};
use std::str::FromStr;

/// Runs the 0.11 client's half (tests/edge/python/mixed_0_11.py) and returns its report.
async fn python_half(address: &str) -> anyhow::Result<serde_json_lite::Report> {
    let script = repository_dir().join("tests/edge/python/mixed_0_11.py");
    let output = tokio::process::Command::new("python3").arg(&script).arg(address).output().await.map_err(|error| {
        anyhow::anyhow!("python3 did not start ({error}); scripts/test.sh installs apache-iggy 0.9.0")
    })?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success(),
        "the 0.11 Python SDK failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json_lite::Report::parse(stdout.lines().last().unwrap_or_default())
}

#[tokio::test]
async fn clients_of_both_generations_share_a_topic_and_a_group() -> anyhow::Result<()> {
    // The 0.12 member never polls, so a partition it hands over comes at the end of the
    // rebalancing grace: a short one.
    let server = TestServer::start_with_env(&[("IGGY_CONSUMER_GROUP_REBALANCING_TIMEOUT", "1 s")])?;
    let client = server.root_client().await?;
    client.create_stream("mixed", &StreamCreateOptions::default()).await?;
    let options = TopicCreateOptions { partitions_count: Some(2), ..Default::default() };
    client.create_topic(&id("mixed"), "events", &options).await?;
    client.create_consumer_group(&id("mixed"), &id("events"), "workers").await?;
    client.join_consumer_group(&id("mixed"), &id("events"), &id("workers")).await?;
    let mut batch: Vec<IggyMessage> =
        (0..10).map(|i| IggyMessage::from_str(&format!("edge-{i}")).expect("a message")).collect();
    client.send_messages(&id("mixed"), &id("events"), &Partitioning::partition_id(1), &mut batch).await?;

    let report = python_half(&server.tcp_address()).await?;
    let edge: Vec<String> = (0..10).map(|i| format!("edge-{i}")).collect();
    assert_eq!(report.read, edge, "the 0.11 client reads what the 0.12 client wrote");
    assert_eq!(report.members, 2, "both clients are members of the group at once");
    assert_eq!(report.group_partitions.len(), 1, "the 0.11 member holds one of the two partitions");

    let consumer = Consumer::new(Identifier::numeric(9)?);
    let options = PollOptions { count: 100, ..Default::default() };
    let polled =
        client.poll_messages(&id("mixed"), &id("events"), 0, &consumer, &PollingStrategy::offset(0), options).await?;
    let read: Vec<String> = polled.messages.iter().map(|m| String::from_utf8_lossy(&m.payload).into_owned()).collect();
    assert_eq!(read, (0..10).map(|i| format!("py-{i}")).collect::<Vec<_>>(), "and the reverse");

    // The 0.11 member's auto-commit is the group's offset, as the 0.12 client reads it.
    let partition = report.group_partitions[0];
    let group = Consumer::group(id("workers"));
    let stored = client.get_consumer_offset(&group, &id("mixed"), &id("events"), Some(partition)).await?;
    assert_eq!(report.group_payloads.len(), 10, "the 0.11 member polled its whole partition");
    assert_eq!(stored.map(|offset| offset.stored_offset), Some(9));
    Ok(())
}

/// The report line, read without a JSON dependency: four known keys.
mod serde_json_lite {
    pub struct Report {
        pub read: Vec<String>,
        pub members: u32,
        pub group_partitions: Vec<u32>,
        pub group_payloads: Vec<String>,
    }

    fn field<'a>(line: &'a str, key: &str) -> anyhow::Result<&'a str> {
        let start = line.find(&format!("\"{key}\": ")).ok_or_else(|| anyhow::anyhow!("no {key} in {line}"))?;
        let rest = &line[start + key.len() + 4..];
        let end = if rest.starts_with('[') { rest.find(']').map(|i| i + 1) } else { rest.find([',', '}']) };
        Ok(&rest[..end.unwrap_or(rest.len())])
    }

    fn list(text: &str) -> Vec<String> {
        let inner = text.trim_start_matches('[').trim_end_matches(']');
        inner.split(',').map(|item| item.trim().trim_matches('"').to_owned()).filter(|item| !item.is_empty()).collect()
    }

    impl Report {
        pub fn parse(line: &str) -> anyhow::Result<Self> {
            Ok(Self {
                read: list(field(line, "read")?),
                members: field(line, "members")?.trim().parse()?,
                group_partitions: list(field(line, "group_partitions")?)
                    .iter()
                    .map(|p| p.parse())
                    .collect::<Result<_, _>>()?,
                group_payloads: list(field(line, "group_payloads")?),
            })
        }
    }
}
