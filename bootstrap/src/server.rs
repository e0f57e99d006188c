//! Starting and stopping the server: one pinned thread per shard, each with its own compio
//! (io_uring) event loop. Shard 0 recovers the metadata, starts the others, binds the
//! listener and handles shutdown signals.

use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::mpsc;

use anyhow::{Context, bail};
use futures_util::FutureExt;
use rill_adapter_bus_crossfire::{CrossfireBus, Inbox};
use rill_adapter_clock::SystemClock;
use rill_adapter_diagnostics::{HostDiagnostics, HostStats};
use rill_adapter_metadata_leftright::ReaderFactory;
use rill_adapter_pinning::AffinityPinning;
use rill_adapter_storage_uring::{CompioOffload, UringStorage};
use rill_application::credentials::RootSeed;
use rill_application::memory_pool::MemoryPool;
use rill_application::ports::bus::ConnectionKind;
use rill_application::ports::pinning::shard_cores;
use rill_application::ports::{Clock, Pinning};
use rill_application::shard::recover;
use rill_application::{GatewayContext, MetadataWriter, ServerConfig, Shard, ShardParts, Shared};
use rill_domain::cpu_allocation::CpuAllocation;

use crate::config::{ClusterConfig, Config};
use crate::env::ProductionShard;

const SIGINT: i32 = 2;
const SIGTERM: i32 = 15;

fn port_of(address: &str) -> u16 {
    address.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or(0)
}

/// Which cores the shards run on (`None`: unpinned threads).
fn plan_shards(config: &Config) -> anyhow::Result<Vec<Option<usize>>> {
    let allocation = CpuAllocation::parse(&config.cpu_allocation).map_err(anyhow::Error::msg)?;
    if let (CpuAllocation::Count(count), false) = (&allocation, config.pin_threads) {
        return Ok(vec![None; *count]);
    }
    let cores = match shard_cores(&AffinityPinning, &allocation, &config.cpu_allocation) {
        // A NUMA allocation this build or machine cannot honour (Iggy's shipped config asks
        // for "numa:auto") runs one shard per core, unless NUMA was required.
        Err(error) if allocation.is_numa() && !config.require_numa => {
            tracing::warn!(
                cpu_allocation = %config.cpu_allocation,
                %error,
                "NUMA placement is not available; running one shard per core (set system.sharding.require_numa = true to refuse instead)"
            );
            shard_cores(&AffinityPinning, &CpuAllocation::All, "all")
        }
        cores => cores,
    };
    let cores = cores.map_err(anyhow::Error::msg)?;
    if cores.is_empty() || cores.len() > u16::MAX as usize {
        bail!("cpu_allocation `{}` yields {} shards", config.cpu_allocation, cores.len());
    }
    Ok(cores.into_iter().map(|core| config.pin_threads.then_some(core)).collect())
}

/// The data directory remembers a check of the encryption key it was written with
/// (`metadata/encryption_key_check`): a start with another key, or without encryption, on
/// encrypted data would serve garbage or sealed bytes, so it is refused.
fn check_encryption_key(
    data_path: &std::path::Path,
    key: Option<&rill_application::encryption::EncryptionKey>,
) -> anyhow::Result<()> {
    let path = data_path.join("metadata").join("encryption_key_check");
    let existing = match std::fs::read(&path) {
        Ok(bytes) => Some(bytes),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
        Err(error) => return Err(error).with_context(|| format!("reading {}", path.display())),
    };
    match (key, existing) {
        (None, None) => Ok(()),
        (None, Some(_)) => bail!(
            "the data directory {} holds encrypted messages: set `system.encryption.enabled = true` with the key they were written with",
            data_path.display()
        ),
        (Some(key), Some(check)) if rill_application::encryption::key_matches(key, &check) => Ok(()),
        (Some(_), Some(_)) => bail!(
            "`system.encryption.key` is not the key the data in {} was encrypted with; start with that key (nothing was read or changed)",
            data_path.display()
        ),
        (Some(key), None) => {
            let check = rill_application::encryption::key_check(key);
            let temporary = path.with_extension("tmp");
            std::fs::write(&temporary, &check)
                .and_then(|()| std::fs::File::open(&temporary)?.sync_all())
                .and_then(|()| std::fs::rename(&temporary, &path))
                .and_then(|()| std::fs::File::open(path.parent().expect("under metadata/"))?.sync_all())
                .with_context(|| format!("writing {}", path.display()))?;
            tracing::info!(path = %path.display(), "encryption at rest is on: messages are sealed with AES-256-GCM");
            Ok(())
        }
    }
}

/// Each shard's event loop: 4096 queue entries, 128 events per loop turn, cooperative
/// task running so completions are reaped only when the loop asks.
fn shard_runtime() -> std::io::Result<compio::runtime::Runtime> {
    let mut proactor = compio::driver::ProactorBuilder::new();
    proactor.capacity(4096).coop_taskrun(true);
    compio::runtime::RuntimeBuilder::new().with_proactor(proactor).event_interval(128).build()
}

/// Runs the server until SIGINT or SIGTERM; returns once every shard has flushed and ended.
pub fn run(
    config: Config,
    root: RootSeed,
    traces: Option<std::sync::mpsc::SyncSender<rill_application::shared::RequestTrace>>,
) -> anyhow::Result<()> {
    let cores = plan_shards(&config)?;
    let shard_count = cores.len() as u16;
    let data_path = PathBuf::from(&config.system_path);
    for dir in ["runtime", "logs", "streams", "metadata"] {
        std::fs::create_dir_all(data_path.join(dir))
            .with_context(|| format!("creating {}", data_path.join(dir).display()))?;
    }
    std::fs::write(data_path.join("runtime").join("current_config.toml"), &config.effective)?;
    check_encryption_key(&data_path, config.encryption.as_ref())?;
    let (buses, inboxes) = rill_adapter_bus_crossfire::bus(shard_count, config.inbox_capacity);
    let (setup_tx, setup_rx): (Vec<_>, Vec<_>) = (1..shard_count).map(|_| mpsc::channel::<ShardSetup>()).unzip();
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let mut threads = Vec::new();
    let mut inboxes = inboxes.into_iter();
    let mut buses_iter = buses.into_iter();
    let (bus0, inbox0) = (buses_iter.next().expect("one shard at least"), inboxes.next().expect("one inbox per shard"));
    for ((shard_id, (bus, inbox)), setup) in (1..shard_count).zip(buses_iter.zip(inboxes)).zip(setup_rx) {
        let (core, ready) = (cores[shard_id as usize], ready_tx.clone());
        let thread = std::thread::Builder::new().name(format!("rill-shard-{shard_id}")).spawn(move || {
            if let Err(error) = peer_shard(core, bus, inbox, setup, ready.clone()) {
                let _ = ready.send(Err(format!("shard {shard_id}: {error:#}")));
            }
        })?;
        threads.push(thread);
    }
    drop(ready_tx);
    let shard0 = Shard0 {
        config,
        root,
        core: cores[0],
        shard_count,
        bus: bus0,
        inbox: Some(inbox0),
        setup: setup_tx,
        ready: ready_rx,
        traces,
    };
    let result = std::thread::Builder::new().name("rill-shard-0".into()).spawn(move || shard0.run())?.join();
    // Shard 0 has told every peer to stop (or dropped the setups they wait for): the
    // process ends after them, whether the start failed or the server shut down.
    for thread in threads {
        let _ = thread.join();
    }
    result.map_err(|_| anyhow::anyhow!("shard 0 panicked"))?
}

fn memory_pool(config: &Config) -> anyhow::Result<MemoryPool> {
    let settings = config.memory_pool;
    if !settings.enabled {
        return Ok(MemoryPool::disabled());
    }
    MemoryPool::new(settings.size_bytes, settings.bucket_capacity)
        .map_err(|error| anyhow::anyhow!("memory pool: {error}"))
}

/// A shard's storage: fsyncs timed, direct writes staged in the pool and the latest kept.
fn shard_storage(shared: &Shared) -> UringStorage {
    let wanted = shared.config.data.direct_io_cache_bytes;
    let pool = shared.pool.is_enabled().then(|| shared.pool.budget_bytes());
    let kept = recent_writes_bytes(wanted, pool, shared.shard_count);
    // Without direct I/O nothing is kept, whatever the setting says: no warning then.
    let direct = shared.config.data.partition.direct_io != rill_application::partition::DirectIo::Off;
    if kept < wanted && direct {
        tracing::warn!(
            wanted,
            kept,
            "system.partition.direct_io_cache lowered to this shard's share of the memory pool"
        );
    }
    UringStorage::timing_fsyncs(shared.telemetry.fsync_latency.clone())
        .with_pool(shared.pool)
        .keeping_recent_writes(kept as usize)
}

/// What each shard keeps of its latest direct writes: the buffers are the pool's, so all the
/// shards together keep at most half of its budget (`pool`; `None` when it is off), and
/// request and reply frames always have the other half.
fn recent_writes_bytes(wanted: u64, pool: Option<u64>, shard_count: u16) -> u64 {
    match pool {
        Some(budget) => wanted.min(budget / (2 * u64::from(shard_count.max(1)))),
        None => wanted,
    }
}

/// Logs the pool's use once a minute, and once more at shutdown.
async fn report_pool(shared: Arc<Shared>) {
    loop {
        compio::time::sleep(std::time::Duration::from_secs(60)).await;
        log_pool(&shared);
    }
}

/// Removes expired personal access tokens at the configured interval (shard 0 only).
async fn clean_tokens(system: Rc<ProductionShard>) {
    let interval =
        std::time::Duration::from_micros(system.shared().config.security.token_cleaner_interval_us.max(1000));
    loop {
        compio::time::sleep(interval).await;
        system.remove_expired_tokens().await;
    }
}

/// The data volume's free space, read every check interval (shard 0 only; the floor it
/// sets is shared by every shard).
async fn watch_free_space(system: Rc<ProductionShard>) {
    let interval = std::time::Duration::from_micros(system.shared().config.data.space_check_interval_us.max(1000));
    loop {
        system.check_free_space().await;
        compio::time::sleep(interval).await;
    }
}

/// Keeps consumer-group membership true to the connections, every second (shard 0 only).
async fn watch_memberships(system: Rc<ProductionShard>) {
    let mut unreachable = std::collections::BTreeMap::new();
    loop {
        compio::time::sleep(std::time::Duration::from_secs(1)).await;
        system.membership_pass(&mut unreachable).await;
    }
}

/// Each shard's background work on the partitions it owns: the retention cleaner, the
/// scrubber, and retries of partitions whose last write failed.
fn spawn_maintenance(system: &Rc<ProductionShard>) {
    let data = system.shared().config.data;
    if let Some(interval_us) = data.cleaner_interval_us {
        let system = system.clone();
        compio::runtime::spawn(async move {
            loop {
                compio::time::sleep(std::time::Duration::from_micros(interval_us.max(1000))).await;
                system.clean_partitions().await;
            }
        })
        .detach();
    }
    if let Some(rate) = data.scrub_bytes_per_second {
        compio::runtime::spawn(scrub(system.clone(), rate)).detach();
    }
    let flusher = system.clone();
    compio::runtime::spawn(async move { flusher.run_flusher().await }).detach();
    let retrier = system.clone();
    compio::runtime::spawn(async move {
        loop {
            compio::time::sleep(std::time::Duration::from_secs(1)).await;
            retrier.retry_failed_writes().await;
        }
    })
    .detach();
}

/// Verifies sealed segments at `rate` bytes a second: after each chunk it sleeps as long
/// as the chunk takes at that rate; after a full pass, at least a second.
async fn scrub(system: Rc<ProductionShard>, rate: u64) {
    let chunk = (rate as usize).clamp(64 << 10, 4 << 20);
    let mut cursor = rill_application::partitions::ScrubCursor::default();
    loop {
        let bytes = system.scrub_step(&mut cursor, chunk).await;
        let pause_us = if bytes == 0 { 1_000_000 } else { bytes as u64 * 1_000_000 / rate.max(1) };
        compio::time::sleep(std::time::Duration::from_micros(pause_us.max(1000))).await;
    }
}

fn log_pool(shared: &Shared) {
    let stats = shared.pool.stats();
    tracing::info!(
        allocated_bytes = stats.allocated_bytes,
        in_use = stats.in_use_buffers,
        free = stats.free_buffers,
        hits = stats.hits,
        misses = stats.misses,
        "memory pool"
    );
}

fn pin(core: Option<usize>) -> anyhow::Result<()> {
    if let Some(core) = core {
        AffinityPinning.pin_current_thread(core).with_context(|| format!("pinning to core {core}"))?;
    }
    Ok(())
}

/// Serves a shard's inbox until shutdown: calls from other shards, and handed-off
/// connections given to their transport.
async fn serve_inbox(system: Rc<ProductionShard>, inbox: Inbox) {
    let adopter = system.clone();
    let adopt = move |fd, peer, kind| match kind {
        ConnectionKind::Tcp => rill_adapter_transport_tcp::adopt(adopter.clone(), fd, peer, None),
        ConnectionKind::MovedTcp(state) => rill_adapter_transport_tcp::adopt(adopter.clone(), fd, peer, Some(state)),
        ConnectionKind::WebSocket => rill_adapter_transport_ws::adopt(adopter.clone(), fd, peer, None),
        ConnectionKind::MovedWebSocket(state) => {
            rill_adapter_transport_ws::adopt(adopter.clone(), fd, peer, Some(state))
        }
    };
    system.serve_inbox(inbox, adopt).await
}

fn peer_shard(
    core: Option<usize>,
    bus: CrossfireBus,
    inbox: Inbox,
    setup: mpsc::Receiver<ShardSetup>,
    ready: mpsc::Sender<Result<(), String>>,
) -> anyhow::Result<()> {
    pin(core)?;
    let Ok(ShardSetup { shared, factory, host_stats, cluster }) = setup.recv() else { return Ok(()) };
    shard_runtime()?.block_on(async move {
        let parts = ShardParts {
            storage: shard_storage(&shared),
            clock: SystemClock::default(),
            diagnostics: HostDiagnostics::new(shared.config.data_path.clone()),
            host_metrics: host_stats,
            shared,
            metadata: factory.reader(),
            bus,
            offload: CompioOffload,
            writer: None,
        };
        let system = Rc::new(Shard::new(parts));
        system.open_owned_partitions().await;
        if let Err(error) = crate::cluster::start_group(&system, &cluster).await {
            let _ = ready.send(Err(format!("{error:#}")));
            return Err(error);
        }
        let _ = ready.send(Ok(()));
        spawn_maintenance(&system);
        serve_inbox(system, inbox).await;
        Ok(())
    })
}

/// What shard 0 sends each peer shard once the metadata is recovered.
struct ShardSetup {
    shared: Arc<Shared>,
    factory: ReaderFactory,
    host_stats: HostStats,
    cluster: ClusterConfig,
}

/// Shard 0: recovery, the listener, signals and shutdown.
struct Shard0 {
    config: Config,
    root: RootSeed,
    core: Option<usize>,
    shard_count: u16,
    bus: CrossfireBus,
    /// Taken when shard 0 starts serving it.
    inbox: Option<Inbox>,
    setup: Vec<mpsc::Sender<ShardSetup>>,
    ready: mpsc::Receiver<Result<(), String>>,
    /// The OpenTelemetry exporter's span queue, when `[telemetry]` is on.
    traces: Option<mpsc::SyncSender<rill_application::shared::RequestTrace>>,
}

impl Shard0 {
    fn run(self) -> anyhow::Result<()> {
        pin(self.core)?;
        shard_runtime()?.block_on(self.serve())
    }

    async fn serve(mut self) -> anyhow::Result<()> {
        let mut listeners = crate::transports::bind_all(&self.config).await?;
        if listeners.http.is_none() {
            listeners.ports.http = port_of(&self.config.http.address);
        }
        let system_config = ServerConfig {
            data_path: PathBuf::from(&self.config.system_path),
            root: self.root.clone(),
            advertised_ip: listeners.ip.clone(),
            ports: listeners.ports,
            host: rill_adapter_diagnostics::host_info(),
            security: self.config.security,
            data: self.config.data,
            membership: self.config.cluster.membership(),
            cluster_nodes: self.config.cluster.nodes(),
            encryption: self.config.encryption,
        };
        let clock = SystemClock::default();
        let recovered = recover(&UringStorage::default(), &system_config, clock.now_us(), rand::random())
            .await
            .context("opening the data directory")?;
        if recovered.root_created && self.root.generated {
            // Shown once: the hash is all that is stored.
            println!(
                "rill-server: created root user `{}` with generated password: {}",
                self.root.username, self.root.password
            );
        }
        let commit = recovered.commit();
        let mut shared =
            Shared::new(system_config, self.shard_count, commit, clock.now_us(), memory_pool(&self.config)?.leak());
        shared.clean_start = recovered.clean_shutdown;
        let security = shared.config.security;
        let ledger = crate::session_ledger::FileLedger::new(shared.config.data_path.join("metadata"));
        shared.sessions = rill_application::shared::Sessions::new(
            rill_application::login_guard::LoginGuard::new(
                security.login_max_failures,
                security.login_failure_window_us,
            ),
            Box::new(ledger),
        )
        .context("reserving session numbers in the data directory")?;
        if let Some(traces) = self.traces.clone() {
            let _ = shared.telemetry.request_traces.set(traces);
        }
        let shared = Arc::new(shared);
        let (publisher, factory) = rill_adapter_metadata_leftright::new(recovered.metadata());
        let host_stats = HostStats::start(&self.config.system_path).context("starting the host metrics sampler")?;
        // Bound before any peer starts, so a taken port fails the start with none to stop.
        let (replica_plane, network) = crate::cluster::bind(&self.config.cluster).await?;
        if let Err(error) = self.start_peers(&shared, &factory, &host_stats) {
            self.stop_peers().await;
            return Err(error);
        }
        let writer = MetadataWriter::new(recovered.replication, publisher, network, rand::random());
        let parts = ShardParts {
            storage: shard_storage(&shared),
            clock,
            diagnostics: HostDiagnostics::new(shared.config.data_path.clone()),
            host_metrics: host_stats,
            shared,
            metadata: factory.reader(),
            bus: self.bus.clone(),
            offload: CompioOffload,
            writer: Some(writer),
        };
        let system = Rc::new(Shard::new(parts));
        let result = self.run_shard(&system, listeners, replica_plane, recovered.pending, factory).await;
        // Every shard is told to stop, even when one could not flush, after a failed start
        // as after a clean shutdown.
        self.stop_peers().await;
        log_pool(system.shared());
        result?;
        tracing::info!("shutdown complete");
        Ok(())
    }

    /// Hands every peer shard what it needs to start.
    fn start_peers(&self, shared: &Arc<Shared>, factory: &ReaderFactory, host_stats: &HostStats) -> anyhow::Result<()> {
        for setup in &self.setup {
            let parts = ShardSetup {
                shared: shared.clone(),
                factory: factory.clone(),
                host_stats: host_stats.clone(),
                cluster: self.config.cluster.clone(),
            };
            setup.send(parts).context("starting a shard")?;
        }
        Ok(())
    }

    /// Tells every peer shard to stop; `run` joins their threads.
    async fn stop_peers(&mut self) {
        // A peer still waiting for its setup ends once that can no longer come.
        self.setup.clear();
        self.bus.shutdown_all().await;
    }

    /// Serves as shard 0 from the open partitions until a shutdown signal, then flushes
    /// every shard's partitions.
    async fn run_shard(
        &mut self,
        system: &Rc<ProductionShard>,
        mut listeners: crate::transports::Listeners,
        replica_plane: Option<(compio::net::TcpListener, rill_adapter_replica_tcp::Security)>,
        pending: Vec<rill_domain::vsr::Effect>,
        factory: ReaderFactory,
    ) -> anyhow::Result<()> {
        let inbox = self.inbox.take().expect("shard 0 serves its inbox once");
        compio::runtime::spawn(serve_inbox(system.clone(), inbox)).detach();
        crate::cluster::serve(system, &self.config.cluster, replica_plane);
        system.start_replication(pending).await;
        system.open_owned_partitions().await;
        crate::cluster::start_group(system, &self.config.cluster).await?;
        for _ in 1..self.shard_count {
            self.ready.recv().context("a shard ended during start")?.map_err(anyhow::Error::msg)?;
        }
        // HTTP runs outside the shards and starts once every shard has opened its partitions.
        if let Some((http, tls)) = listeners.http.take() {
            let factory = factory.clone();
            let settings = self.config.http_settings.clone();
            let gateway = Arc::new(rill_adapter_bus_crossfire::CrossfireGateway::new(self.bus.clone()));
            rill_adapter_transport_http::spawn(
                http,
                GatewayContext::new(system.shared().clone()),
                settings,
                tls,
                gateway,
                move || factory.reader(),
            )?;
        }
        let summary = listeners.summary.join(", ");
        tracing::info!(transports = %summary, shards = self.shard_count, data = %self.config.system_path, "rill-server is listening");
        // Scripts and tests wait for this line; the first address is the TCP one.
        let tcp = format!("{}:{}", listeners.ip, listeners.ports.tcp);
        println!("rill-server listening on {tcp} with {} shards ({summary})", self.shard_count);
        crate::transports::serve_all(system, listeners, &self.bus);
        let systemd = self.config.systemd.clone();
        systemd.notify("READY=1");
        if let Some(interval) = systemd.watchdog_interval() {
            let pinger = systemd.clone();
            // On shard 0's own loop: if it stops turning, the pings stop and systemd acts.
            compio::runtime::spawn(async move {
                loop {
                    compio::time::sleep(interval).await;
                    pinger.notify("WATCHDOG=1");
                }
            })
            .detach();
        }
        spawn_maintenance(system);
        compio::runtime::spawn(report_pool(system.shared().clone())).detach();
        compio::runtime::spawn(clean_tokens(system.clone())).detach();
        compio::runtime::spawn(watch_free_space(system.clone())).detach();
        compio::runtime::spawn(watch_memberships(system.clone())).detach();
        wait_for_signal().await?;
        systemd.notify("STOPPING=1");
        tracing::info!("shutdown requested: flushing partitions on every shard");
        let flushed = system.flush_all().await;
        if flushed.is_ok()
            && let Err(error) = system.mark_clean_shutdown().await
        {
            tracing::warn!(%error, "cannot leave the clean-shutdown marker: the next start checks segment tails as after a crash");
        }
        flushed.context("flushing partitions at shutdown")
    }
}

async fn wait_for_signal() -> anyhow::Result<()> {
    let interrupt = compio::signal::unix::signal(SIGINT).boxed_local();
    let terminate = compio::signal::unix::signal(SIGTERM).boxed_local();
    let (signal, _, _) = futures_util::future::select_all([interrupt, terminate]).await;
    signal.context("waiting for a shutdown signal")
}

#[cfg(test)]
mod tests {
    use super::recent_writes_bytes;

    #[test]
    fn kept_direct_writes_never_take_more_than_half_the_pool() {
        const MIB: u64 = 1 << 20;
        // Enough pool: the configured size stands.
        assert_eq!(recent_writes_bytes(256 * MIB, Some(4096 * MIB), 2), 256 * MIB);
        // 512 MiB over two shards: 128 MiB each, half the pool in all.
        assert_eq!(recent_writes_bytes(256 * MIB, Some(512 * MIB), 2), 128 * MIB);
        assert_eq!(recent_writes_bytes(256 * MIB, Some(512 * MIB), 8), 32 * MIB);
        // Without a pool the buffers are plain allocations, bounded by the setting alone.
        assert_eq!(recent_writes_bytes(256 * MIB, None, 8), 256 * MIB);
        assert_eq!(recent_writes_bytes(0, Some(512 * MIB), 1), 0);
    }
}
