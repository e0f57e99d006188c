//! `rill-bench`: drives a rill-server through the official iggy 0.11.0 client and prints
//! throughput (MB/s, messages/s) and per-request latency (p50/p99/p999). By default it
//! starts the release binary on a temporary data directory; `--address` targets a running
//! server instead.
//!
//! Scenario (issue 2): P producers each send B batches of M messages of S bytes to their
//! own stream, then P consumers read every message back with offset polls of M messages.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use iggy::prelude::*;
use rill_tests::{TestServer, connect_root, id};

#[derive(Debug, Clone)]
struct Options {
    address: Option<String>,
    producers: u32,
    batches: u32,
    messages_per_batch: u32,
    message_size: usize,
    persisted: bool,
    /// Shards of the server the benchmark starts (ignored with `--address`).
    shards: Option<u32>,
    /// `KEY=VALUE` settings for the server the benchmark starts (`IGGY_...`).
    server_env: Vec<(String, String)>,
}

fn parse_options() -> anyhow::Result<Options> {
    let mut options = Options {
        address: None,
        producers: 2,
        batches: 500,
        messages_per_batch: 1000,
        message_size: 1000,
        persisted: false,
        shards: None,
        server_env: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--address" => options.address = Some(value()?),
            "--producers" => options.producers = value()?.parse()?,
            "--batches" => options.batches = value()?.parse()?,
            "--messages-per-batch" => options.messages_per_batch = value()?.parse()?,
            "--message-size" => options.message_size = value()?.parse()?,
            "--persisted" => options.persisted = true,
            "--shards" => options.shards = Some(value()?.parse()?),
            "--server-env" => {
                let setting = value()?;
                let (key, val) =
                    setting.split_once('=').with_context(|| format!("--server-env {setting}: KEY=VALUE"))?;
                options.server_env.push((key.to_owned(), val.to_owned()));
            }
            other => bail!(
                "unknown flag {other}; flags: --address A --producers N --batches N --messages-per-batch N --message-size BYTES --persisted --shards N --server-env KEY=VALUE"
            ),
        }
    }
    Ok(options)
}

/// What one phase measured.
struct Report {
    name: String,
    messages: u64,
    bytes: u64,
    elapsed: Duration,
    latencies: Vec<Duration>,
    /// CPU time the server process spent in the phase, when the benchmark started it.
    server_cpu: Option<Duration>,
}

/// User plus system CPU time of a process, from `/proc/<pid>/stat` (clock ticks of 10 ms,
/// Linux's USER_HZ).
fn process_cpu(pid: Option<u32>) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid?)).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 * fraction).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

impl Report {
    fn print(&mut self) {
        self.latencies.sort_unstable();
        let seconds = self.elapsed.as_secs_f64();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        println!(
            "{:<10} {:>10} msgs {:>9.1} MB/s {:>11.0} msgs/s   latency per request p50 {:>7.3} ms  p99 {:>7.3} ms  p999 {:>7.3} ms  ({} requests, {:.2} s{})",
            self.name,
            self.messages,
            self.bytes as f64 / 1_000_000.0 / seconds,
            self.messages as f64 / seconds,
            ms(percentile(&self.latencies, 0.50)),
            ms(percentile(&self.latencies, 0.99)),
            ms(percentile(&self.latencies, 0.999)),
            self.latencies.len(),
            seconds,
            self.server_cpu.map(|cpu| format!(", server CPU {:.2} s", cpu.as_secs_f64())).unwrap_or_default(),
        );
    }
}

fn batch(options: &Options, first: u64) -> Vec<IggyMessage> {
    (0..options.messages_per_batch as u64)
        .map(|i| {
            let mut payload = vec![b'r'; options.message_size];
            payload[..8].copy_from_slice(&(first + i).to_le_bytes());
            IggyMessage::builder().id(u128::from(first + i) + 1).payload(payload.into()).build().expect("valid message")
        })
        .collect()
}

async fn produce(address: String, options: Options, stream: u32) -> anyhow::Result<Vec<Duration>> {
    let client = connect_root(&address).await?;
    let mut latencies = Vec::with_capacity(options.batches as usize);
    for number in 0..options.batches {
        let mut messages = batch(&options, u64::from(number) * u64::from(options.messages_per_batch));
        let started = Instant::now();
        client.send_messages(&id(stream), &id(0), &Partitioning::partition_id(0), &mut messages).await?;
        latencies.push(started.elapsed());
    }
    Ok(latencies)
}

async fn consume(address: String, options: Options, stream: u32) -> anyhow::Result<(Vec<Duration>, u64)> {
    let client = connect_root(&address).await?;
    let total = u64::from(options.batches) * u64::from(options.messages_per_batch);
    let consumer = Consumer::new(id(1));
    let (mut next, mut bytes, mut latencies) = (0u64, 0u64, Vec::new());
    while next < total {
        let started = Instant::now();
        let polled = client
            .poll_messages(
                &id(stream),
                &id(0),
                Some(0),
                &consumer,
                &PollingStrategy::offset(next),
                options.messages_per_batch,
                false,
            )
            .await?;
        latencies.push(started.elapsed());
        let Some(last) = polled.messages.last() else { bail!("stream {stream}: nothing at offset {next} of {total}") };
        if polled.messages[0].header.offset != next {
            bail!("stream {stream}: asked for offset {next}, got {}", polled.messages[0].header.offset);
        }
        bytes += polled.messages.iter().map(|m| m.payload.len() as u64).sum::<u64>();
        next = last.header.offset + 1;
    }
    Ok((latencies, bytes))
}

async fn prepare(address: &str, options: &Options) -> anyhow::Result<()> {
    let client = connect_root(address).await?;
    for stream in 0..options.producers {
        let name = format!("bench-{stream}");
        client.create_stream(&name).await.with_context(|| format!("creating stream {name} (is the server empty?)"))?;
        let durability = if options.persisted { Durability::Persisted } else { Durability::default() };
        let topic_options = TopicCreateOptions { partitions_count: Some(1), durability, ..Default::default() };
        client.create_topic(&id(stream), "bench", &topic_options).await?;
    }
    Ok(())
}

async fn run(address: String, options: Options, server_pid: Option<u32>) -> anyhow::Result<()> {
    prepare(&address, &options).await?;
    let per_producer = u64::from(options.batches) * u64::from(options.messages_per_batch);
    println!(
        "rill-bench: {} producers x {} batches x {} messages x {} B{} against {address}{}",
        options.producers,
        options.batches,
        options.messages_per_batch,
        options.message_size,
        if options.persisted { ", durability=persisted" } else { "" },
        options.server_env.iter().map(|(k, v)| format!(" {k}={v}")).collect::<String>(),
    );
    let cpu_before = process_cpu(server_pid);
    let started = Instant::now();
    let producers: Vec<_> =
        (0..options.producers).map(|s| tokio::spawn(produce(address.clone(), options.clone(), s))).collect();
    let mut latencies = Vec::new();
    for producer in producers {
        latencies.extend(producer.await??);
    }
    let messages = per_producer * u64::from(options.producers);
    let bytes = messages * options.message_size as u64;
    let elapsed = started.elapsed();
    let cpu_after = process_cpu(server_pid);
    let server_cpu = cpu_before.zip(cpu_after).map(|(before, after)| after.saturating_sub(before));
    Report { name: "send".into(), messages, bytes, elapsed, latencies, server_cpu }.print();
    let started = Instant::now();
    let consumers: Vec<_> =
        (0..options.producers).map(|s| tokio::spawn(consume(address.clone(), options.clone(), s))).collect();
    let (mut latencies, mut bytes) = (Vec::new(), 0);
    for consumer in consumers {
        let (polled, read) = consumer.await??;
        latencies.extend(polled);
        bytes += read;
    }
    if bytes != messages * options.message_size as u64 {
        bail!("read back {bytes} payload bytes, expected {}", messages * options.message_size as u64);
    }
    let elapsed = started.elapsed();
    let server_cpu = cpu_after.zip(process_cpu(server_pid)).map(|(before, after)| after.saturating_sub(before));
    Report { name: "poll".into(), messages, bytes, elapsed, latencies, server_cpu }.print();
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let options = parse_options()?;
    if let Some(address) = options.address.clone() {
        return run(address, options, None).await;
    }
    if std::env::var_os("RILL_SERVER_BIN").is_none() {
        let release = rill_tests::workspace_dir().join("target/release/rill-server");
        if !release.exists() {
            bail!("{} is missing: run `cargo build --release -p rill-bootstrap` first", release.display());
        }
        rill_tests::use_server_binary(release);
    }
    let shards = options.shards.map(|shards| shards.to_string());
    let mut env: Vec<(&str, &str)> = options.server_env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    if let Some(shards) = &shards {
        env.push(("IGGY_SYSTEM_SHARDING_CPU_ALLOCATION", shards.as_str()));
    }
    let server = TestServer::start_with_env(&env)?;
    println!("server: {}", server.logs().lines().find(|l| l.contains("listening on")).unwrap_or("?").trim());
    run(server.tcp_address(), options, server.pid()).await
}
