//! `rill-soak`: a long mixed load on one server through the official client (producers on
//! three partitions, a consumer storing offsets, consumer-group members joining, polling
//! and leaving, clients connecting and leaving every second), printing per interval the
//! server's RSS, open descriptors, pool buffers in use and the send p99, then the RSS
//! slope. `just soak MINUTES` runs it against the release server; a failed request ends
//! the run with an error.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use iggy::prelude::*;
use rill_tests::{TestServer, connect_root, id, named};
use tokio::sync::Mutex;

const PARTITIONS: u32 = 3;

struct Options {
    duration: Duration,
    interval: Duration,
}

fn parse_options() -> anyhow::Result<Options> {
    let mut options = Options { duration: Duration::from_secs(600), interval: Duration::from_secs(60) };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut seconds = || -> anyhow::Result<Duration> {
            let value = args.next().with_context(|| format!("{flag} needs a value"))?;
            Ok(Duration::from_secs_f64(value.parse()?))
        };
        match flag.as_str() {
            "--minutes" => options.duration = seconds()? * 60,
            "--seconds" => options.duration = seconds()?,
            "--interval" => options.interval = seconds()?,
            other => bail!("unknown flag {other}; flags: --minutes N | --seconds N, --interval SECONDS"),
        }
    }
    Ok(options)
}

/// What the load tasks share: a stop flag, send latencies of the interval, and counters.
#[derive(Default)]
struct Load {
    stop: AtomicBool,
    latencies: Mutex<Vec<Duration>>,
    sent: AtomicU64,
    polled: AtomicU64,
    sessions: AtomicU64,
}

async fn produce(address: String, load: Arc<Load>, producer: u32) -> anyhow::Result<()> {
    let client = connect_root(&address).await?;
    let mut next = 0u64;
    while !load.stop.load(Ordering::Relaxed) {
        let partition = (next % u64::from(PARTITIONS)) as u32;
        let mut batch: Vec<IggyMessage> = (0..10)
            .map(|i| {
                let payload = format!("producer {producer} message {} {}", next * 10 + i, "x".repeat(200));
                IggyMessage::builder().payload(payload.into_bytes().into()).build().expect("a valid message")
            })
            .collect();
        let started = Instant::now();
        client.send_messages(&named("soak"), &named("t"), &Partitioning::partition_id(partition), &mut batch).await?;
        load.latencies.lock().await.push(started.elapsed());
        load.sent.fetch_add(10, Ordering::Relaxed);
        next += 1;
        // About 200 batches a second per producer: a steady load whose data the size cap keeps bounded.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// Polls every partition with a stored consumer offset (auto-commit, then an explicit store).
async fn consume(address: String, load: Arc<Load>) -> anyhow::Result<()> {
    let client = connect_root(&address).await?;
    let consumer = Consumer::new(id(1));
    while !load.stop.load(Ordering::Relaxed) {
        for partition in 0..PARTITIONS {
            let polled = client
                .poll_messages(
                    &named("soak"),
                    &named("t"),
                    Some(partition),
                    &consumer,
                    &PollingStrategy::next(),
                    100,
                    true,
                )
                .await?;
            load.polled.fetch_add(polled.messages.len() as u64, Ordering::Relaxed);
            if let Some(last) = polled.messages.last() {
                client
                    .store_consumer_offset(&consumer, &named("soak"), &named("t"), Some(partition), last.header.offset)
                    .await?;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Group members that join, poll their partitions for a few seconds, and leave.
async fn group_member(address: String, load: Arc<Load>) -> anyhow::Result<()> {
    let group = Consumer::group(named("soakers"));
    while !load.stop.load(Ordering::Relaxed) {
        let client = connect_root(&address).await?;
        client.join_consumer_group(&named("soak"), &named("t"), &named("soakers")).await?;
        let until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < until && !load.stop.load(Ordering::Relaxed) {
            let polled = client
                .poll_messages(&named("soak"), &named("t"), None, &group, &PollingStrategy::next(), 50, true)
                .await?;
            load.polled.fetch_add(polled.messages.len() as u64, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        client.leave_consumer_group(&named("soak"), &named("t"), &named("soakers")).await?;
        load.sessions.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// A client a second that connects, logs in, reads a little and goes.
async fn churn(address: String, load: Arc<Load>) -> anyhow::Result<()> {
    while !load.stop.load(Ordering::Relaxed) {
        let client = connect_root(&address).await?;
        client.ping().await?;
        client.get_streams().await?;
        client.get_stats().await?;
        drop(client);
        load.sessions.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(())
}

/// The server's resident set (KiB) and open descriptors, from /proc.
fn process_figures(pid: u32) -> (u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|dir| dir.count()).unwrap_or(0);
    (rss, fds)
}

/// Least-squares slope of `samples` (minute, KiB), in KiB per minute.
fn slope(samples: &[(f64, f64)]) -> f64 {
    let n = samples.len() as f64;
    let (mean_x, mean_y) = (samples.iter().map(|s| s.0).sum::<f64>() / n, samples.iter().map(|s| s.1).sum::<f64>() / n);
    let covariance: f64 = samples.iter().map(|(x, y)| (x - mean_x) * (y - mean_y)).sum();
    let variance: f64 = samples.iter().map(|(x, _)| (x - mean_x).powi(2)).sum();
    if variance == 0.0 { 0.0 } else { covariance / variance }
}

async fn pool_in_use(http: &str, token: &str) -> Option<u64> {
    let (_, text) = rill_tests::http::get(http, "/metrics", Some(token)).ok()?;
    rill_tests::http::metric(&text, "rill_memory_pool_in_use_buffers")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let options = parse_options()?;
    if std::env::var_os("RILL_SERVER_BIN").is_none() {
        let release = rill_tests::workspace_dir().join("target/release/rill-server");
        if release.exists() {
            rill_tests::use_server_binary(release);
        }
    }
    let http = format!("127.0.0.1:{}", rill_tests::free_port());
    let server = TestServer::start_with_env(&[
        ("IGGY_HTTP_ENABLED", "true"),
        ("IGGY_HTTP_ADDRESS", http.as_str()),
        ("IGGY_DATA_MAINTENANCE_MESSAGES_INTERVAL", "10 s"),
    ])?;
    let pid = server.pid().context("the server runs")?;
    let address = server.tcp_address();
    let admin = connect_root(&address).await?;
    admin.create_stream("soak").await?;
    let topic = TopicCreateOptions {
        partitions_count: Some(PARTITIONS),
        segment_size: Some(IggyByteSize::from(8u64 << 20)),
        max_topic_size: Some(MaxTopicSize::Custom(IggyByteSize::from(96u64 << 20))),
        ..rill_tests::topic_options(PARTITIONS)
    };
    admin.create_topic(&named("soak"), "t", &topic).await?;
    admin.create_consumer_group(&named("soak"), &named("t"), "soakers").await?;
    let token = admin.create_personal_access_token("soak", IggyExpiry::NeverExpire).await?.token;

    let load = Arc::new(Load::default());
    let mut tasks = Vec::new();
    for producer in 0..2 {
        tasks.push(tokio::spawn(produce(address.clone(), load.clone(), producer)));
    }
    tasks.push(tokio::spawn(consume(address.clone(), load.clone())));
    tasks.push(tokio::spawn(group_member(address.clone(), load.clone())));
    tasks.push(tokio::spawn(churn(address.clone(), load.clone())));

    println!("soak for {:?}, a line every {:?}", options.duration, options.interval);
    let started = Instant::now();
    let mut samples = Vec::new();
    while started.elapsed() < options.duration {
        tokio::time::sleep(options.interval.min(options.duration.saturating_sub(started.elapsed()))).await;
        if let Some(finished) = tasks.iter().position(|task| task.is_finished()) {
            let outcome = tasks.remove(finished).await?;
            bail!("a load task ended early: {outcome:?}\n{}", server.logs_of_last_launch());
        }
        let mut latencies = std::mem::take(&mut *load.latencies.lock().await);
        latencies.sort_unstable();
        let p99 = latencies.get(latencies.len().saturating_sub(1) * 99 / 100).copied().unwrap_or_default();
        let (rss, fds) = process_figures(pid);
        let minute = started.elapsed().as_secs_f64() / 60.0;
        samples.push((minute, rss as f64));
        println!(
            "{minute:6.2} min  rss {:>7} KiB  fds {fds:>4}  pool in use {:>4}  send p99 {:>7.3} ms  sent {:>9}  polled {:>9}  sessions {:>5}",
            rss,
            pool_in_use(&http, &token).await.map_or("?".to_owned(), |n| n.to_string()),
            p99.as_secs_f64() * 1000.0,
            load.sent.load(Ordering::Relaxed),
            load.polled.load(Ordering::Relaxed),
            load.sessions.load(Ordering::Relaxed),
        );
    }
    load.stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await??;
    }
    // Batches still in the partitions' journals hold pool buffers until they are written.
    for partition in 0..PARTITIONS {
        admin.flush_unsaved_buffer(&named("soak"), &named("t"), partition, true).await?;
    }
    drop(admin);
    // The first interval is warm-up (the pool and caches fill); the slope is over the rest.
    let steady = if samples.len() > 2 { &samples[1..] } else { &samples[..] };
    tokio::time::sleep(Duration::from_secs(2)).await;
    println!(
        "RSS slope {:+.1} KiB/min over {} samples; pool buffers in use with the load stopped and the journals written: {}",
        slope(steady),
        steady.len(),
        pool_in_use(&http, &token).await.map_or("?".to_owned(), |n| n.to_string())
    );
    Ok(())
}
