//! `rill-failover`: measures how long a replicated partition stops taking sends when the
//! primary of its group dies. Against a running cluster with `replicate_partitions` (node
//! `--address` leads the metadata and stays up), one sender per partition sends one-message
//! batches back to back; after `--warm-up` seconds the benchmark kill -9s `--kill-pid` (a
//! node that leads a partition group), and after `--after` more seconds it prints, per
//! partition, the longest pause between two acknowledgements around the kill: the failover
//! time (kill -9 to the next acknowledged send) of the partitions whose primary died.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use iggy::prelude::*;
use rill_tests::{connect_root, id, message};

struct Options {
    address: String,
    kill_pid: u32,
    partitions: u32,
    warm_up: Duration,
    after: Duration,
}

fn parse_options() -> anyhow::Result<Options> {
    let (mut address, mut kill_pid) = (None, None);
    let mut options = (4, Duration::from_secs(2), Duration::from_secs(6));
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--address" => address = Some(value),
            "--kill-pid" => kill_pid = Some(value.parse()?),
            "--partitions" => options.0 = value.parse()?,
            "--warm-up" => options.1 = Duration::from_secs_f64(value.parse()?),
            "--after" => options.2 = Duration::from_secs_f64(value.parse()?),
            other => {
                bail!("unknown flag {other}; flags: --address A --kill-pid PID --partitions N --warm-up S --after S")
            }
        }
    }
    let (partitions, warm_up, after) = options;
    Ok(Options {
        address: address.context("--address is required")?,
        kill_pid: kill_pid.context("--kill-pid is required")?,
        partitions,
        warm_up,
        after,
    })
}

/// Sends one-message batches to `partition` until told to stop; the instant of every ack.
async fn sender(address: String, topic: (u32, u32), partition: u32, stop: Arc<AtomicBool>) -> Vec<Instant> {
    let Ok(client) = connect_root(&address).await else { return Vec::new() };
    let mut acks = Vec::new();
    let mut next_id = u128::from(partition) << 64 | 1;
    while !stop.load(Ordering::Relaxed) {
        let mut batch = vec![message(next_id, b"failover".to_vec(), None)];
        next_id += 1;
        let (stream, topic_id) = (id(topic.0), id(topic.1));
        let partitioning = Partitioning::partition_id(partition);
        if client.send_messages(&stream, &topic_id, &partitioning, &mut batch).await.is_ok() {
            acks.push(Instant::now());
        }
    }
    acks
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let options = parse_options()?;
    let client = connect_root(&options.address).await?;
    let stream =
        client.create_stream("failover").await.context("creating stream `failover` (is the cluster fresh?)")?;
    let topic_options = TopicCreateOptions { partitions_count: Some(options.partitions), ..Default::default() };
    let topic = client.create_topic(&id(stream.id), "sends", &topic_options).await?;
    let topic = (stream.id, topic.id);
    let stop = Arc::new(AtomicBool::new(false));
    let senders: Vec<_> = (0..options.partitions)
        .map(|p| tokio::spawn(sender(options.address.clone(), topic, p, stop.clone())))
        .collect();
    tokio::time::sleep(options.warm_up).await;
    let killed_at = Instant::now();
    let status = std::process::Command::new("kill").args(["-9", &options.kill_pid.to_string()]).status()?;
    if !status.success() {
        bail!("kill -9 {} failed", options.kill_pid);
    }
    tokio::time::sleep(options.after).await;
    stop.store(true, Ordering::Relaxed);
    println!("rill-failover: kill -9 of pid {} with {} partitions sending", options.kill_pid, options.partitions);
    let mut worst = Duration::ZERO;
    for (partition, sender) in senders.into_iter().enumerate() {
        let acks = sender.await?;
        let before = acks.iter().rev().find(|&&at| at < killed_at).copied();
        let first_after = acks.iter().find(|&&at| at >= killed_at).copied();
        let gap = match (before, first_after) {
            (_, None) => bail!("partition {partition}: no send acknowledged within {:?} of the kill", options.after),
            (Some(before), Some(after)) => after.duration_since(before),
            (None, Some(after)) => after.duration_since(killed_at),
        };
        let to_next = first_after.map_or(Duration::ZERO, |after| after.duration_since(killed_at));
        println!(
            "partition {partition}: {} acks, kill to next ack {:>8.1} ms, longest pause around the kill {:>8.1} ms",
            acks.len(),
            to_next.as_secs_f64() * 1000.0,
            gap.as_secs_f64() * 1000.0
        );
        worst = worst.max(to_next);
    }
    println!(
        "failover (kill -9 to the next acknowledged send, worst partition): {:.1} ms",
        worst.as_secs_f64() * 1000.0
    );
    Ok(())
}
