//! `rill-edge-bench`: `rill-bench`'s scenario through the official 0.12-line client (`iggy`
//! 0.11.1-edge.9) against a running server (`--address`): P producers each send B batches
//! of M messages of S bytes to their own stream, then P consumers read every message back
//! with offset polls of M messages. `--idempotent` sends each batch as an idempotent
//! producer's (one producer per stream, sequences counted per batch). Prints throughput and
//! per-request latency in `rill-bench`'s format, so the two generations compare line by line.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use iggy::prelude::*;

#[derive(Debug, Clone)]
struct Options {
    address: String,
    producers: u32,
    batches: u32,
    messages_per_batch: u32,
    message_size: usize,
    idempotent: bool,
    /// Stream names are `<prefix>-<n>`, so a run can share a server with another one.
    prefix: String,
}

fn parse_options() -> anyhow::Result<Options> {
    let mut options = Options {
        address: "127.0.0.1:8090".into(),
        producers: 2,
        batches: 500,
        messages_per_batch: 1000,
        message_size: 1000,
        idempotent: false,
        prefix: "edge".into(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--address" => options.address = value()?,
            "--producers" => options.producers = value()?.parse()?,
            "--batches" => options.batches = value()?.parse()?,
            "--messages-per-batch" => options.messages_per_batch = value()?.parse()?,
            "--message-size" => options.message_size = value()?.parse()?,
            "--idempotent" => options.idempotent = true,
            "--prefix" => options.prefix = value()?,
            other => bail!(
                "unknown flag {other}; flags: --address A --producers N --batches N --messages-per-batch N --message-size BYTES --idempotent --prefix NAME"
            ),
        }
    }
    Ok(options)
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    let rank = ((sorted.len() as f64 * fraction).ceil() as usize).clamp(1, sorted.len().max(1));
    sorted.get(rank - 1).copied().unwrap_or_default()
}

fn print(name: &str, messages: u64, bytes: u64, elapsed: Duration, mut latencies: Vec<Duration>) {
    latencies.sort_unstable();
    let seconds = elapsed.as_secs_f64();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{name:<10} {messages:>10} msgs {:>9.1} MB/s {:>11.0} msgs/s   latency per request p50 {:>7.3} ms  p99 {:>7.3} ms  p999 {:>7.3} ms  ({} requests, {seconds:.2} s)",
        bytes as f64 / 1_000_000.0 / seconds,
        messages as f64 / seconds,
        ms(percentile(&latencies, 0.50)),
        ms(percentile(&latencies, 0.99)),
        ms(percentile(&latencies, 0.999)),
        latencies.len(),
    );
}

async fn connect(address: &str) -> anyhow::Result<IggyClient> {
    let client = IggyClient::builder().with_tcp().with_server_address(address.to_owned()).build()?;
    client.connect().await?;
    client.login_user("iggy", "iggy").await?;
    Ok(client)
}

fn name(options: &Options, stream: u32) -> Identifier {
    Identifier::named(&format!("{}-{stream}", options.prefix)).expect("a valid name")
}

fn batch(options: &Options, first: u64) -> Vec<IggyMessage> {
    (0..u64::from(options.messages_per_batch))
        .map(|i| {
            let mut payload = vec![b'r'; options.message_size];
            payload[..8].copy_from_slice(&(first + i).to_le_bytes());
            IggyMessage::builder().id(u128::from(first + i) + 1).payload(payload.into()).build().expect("a message")
        })
        .collect()
}

async fn produce(options: Options, stream: u32) -> anyhow::Result<Vec<Duration>> {
    let client = connect(&options.address).await?;
    let (stream_id, topic_id) = (name(&options, stream), Identifier::named("bench")?);
    let mut producer = match options.idempotent {
        true => BatchProducer::new(client.next_producer_id().await?, 0, 0),
        false => None,
    };
    let mut latencies = Vec::with_capacity(options.batches as usize);
    for number in 0..options.batches {
        let mut messages = batch(&options, u64::from(number) * u64::from(options.messages_per_batch));
        let started = Instant::now();
        match producer {
            Some(current) => {
                client.send_producer_messages(&stream_id, &topic_id, 0, current, &mut messages).await?;
                producer = Some(current.next(options.messages_per_batch));
            }
            None => {
                client.send_messages(&stream_id, &topic_id, &Partitioning::partition_id(0), &mut messages).await?;
            }
        }
        latencies.push(started.elapsed());
    }
    Ok(latencies)
}

async fn consume(options: Options, stream: u32) -> anyhow::Result<(Vec<Duration>, u64)> {
    let client = connect(&options.address).await?;
    let (stream_id, topic_id) = (name(&options, stream), Identifier::named("bench")?);
    let total = u64::from(options.batches) * u64::from(options.messages_per_batch);
    let consumer = Consumer::new(Identifier::numeric(1)?);
    let (mut next, mut bytes, mut latencies) = (0u64, 0u64, Vec::new());
    while next < total {
        let poll = PollOptions { count: options.messages_per_batch, max_bytes: 64 << 20, ..Default::default() };
        let started = Instant::now();
        let polled =
            client.poll_messages(&stream_id, &topic_id, 0, &consumer, &PollingStrategy::offset(next), poll).await?;
        latencies.push(started.elapsed());
        let Some(last) = polled.messages.last() else { bail!("stream {stream}: nothing at offset {next} of {total}") };
        bytes += polled.messages.iter().map(|m| m.payload.len() as u64).sum::<u64>();
        next = last.header.offset + 1;
    }
    Ok((latencies, bytes))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let options = parse_options()?;
    let client = connect(&options.address).await?;
    for stream in 0..options.producers {
        let stream_name = format!("{}-{stream}", options.prefix);
        client.create_stream(&stream_name, &StreamCreateOptions::default()).await?;
        let topic = TopicCreateOptions { partitions_count: Some(1), ..Default::default() };
        client.create_topic(&name(&options, stream), "bench", &topic).await?;
    }
    println!(
        "rill-edge-bench (0.12 client{}): {} producers x {} batches x {} messages x {} B against {}",
        if options.idempotent { ", idempotent producers" } else { "" },
        options.producers,
        options.batches,
        options.messages_per_batch,
        options.message_size,
        options.address
    );
    let started = Instant::now();
    let producers: Vec<_> = (0..options.producers).map(|s| tokio::spawn(produce(options.clone(), s))).collect();
    let mut latencies = Vec::new();
    for producer in producers {
        latencies.extend(producer.await??);
    }
    let messages = u64::from(options.batches) * u64::from(options.messages_per_batch) * u64::from(options.producers);
    let bytes = messages * options.message_size as u64;
    print("send", messages, bytes, started.elapsed(), latencies);
    let started = Instant::now();
    let consumers: Vec<_> = (0..options.producers).map(|s| tokio::spawn(consume(options.clone(), s))).collect();
    let (mut latencies, mut read) = (Vec::new(), 0);
    for consumer in consumers {
        let (polled, polled_bytes) = consumer.await??;
        latencies.extend(polled);
        read += polled_bytes;
    }
    if read != bytes {
        bail!("read back {read} payload bytes, expected {bytes}");
    }
    print("poll", messages, bytes, started.elapsed(), latencies);
    Ok(())
}
