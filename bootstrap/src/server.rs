//! Starting and stopping the server: data directory, system, listener, signals.

use std::path::PathBuf;
use std::rc::Rc;

use anyhow::Context;
use futures_util::FutureExt;
use rill_adapter_clock::SystemClock;
use rill_adapter_storage_uring::UringStorage;
use rill_application::credentials::RootSeed;
use rill_application::ports::Env;
use rill_application::{System, SystemConfig};
use rill_domain::wire::response::NodePorts;

use crate::config::Config;

/// The production adapters.
pub struct ProductionEnv;

impl Env for ProductionEnv {
    type Storage = UringStorage;
    type Clock = SystemClock;
}

const SIGINT: i32 = 2;
const SIGTERM: i32 = 15;

fn port_of(address: &str) -> u16 {
    address.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or(0)
}

/// Runs the server until SIGINT or SIGTERM, then flushes every partition and returns.
pub async fn run(config: Config, root: RootSeed) -> anyhow::Result<()> {
    let data_path = PathBuf::from(&config.system_path);
    std::fs::create_dir_all(data_path.join("runtime")).with_context(|| format!("creating {}", data_path.display()))?;
    std::fs::create_dir_all(data_path.join("logs"))?;
    std::fs::create_dir_all(data_path.join("streams"))?;
    std::fs::write(data_path.join("runtime").join("current_config.toml"), &config.effective)?;
    let listener = rill_adapter_transport_tcp::bind(&config.tcp.address).await?;
    let local = listener.local_addr()?;
    let system_config = SystemConfig {
        data_path: data_path.clone(),
        root: root.clone(),
        advertised_ip: local.ip().to_string(),
        ports: NodePorts {
            tcp: local.port(),
            quic: port_of(&config.quic.address),
            http: port_of(&config.http.address),
            websocket: port_of(&config.websocket.address),
        },
        host: crate::host::host_info(),
    };
    let (system, created) = System::<ProductionEnv>::open(UringStorage, SystemClock::default(), system_config)
        .await
        .context("opening the data directory")?;
    if created && root.generated {
        // Shown once: the hash is all that is stored.
        println!("rill-server: created root user `{}` with generated password: {}", root.username, root.password);
    }
    let system = Rc::new(system);
    tracing::info!(address = %local, data = %data_path.display(), "rill-server is listening (tcp)");
    println!("rill-server listening on {local}");
    let serving = compio::runtime::spawn(rill_adapter_transport_tcp::serve(system.clone(), listener));
    let interrupt = compio::signal::unix::signal(SIGINT).boxed_local();
    let terminate = compio::signal::unix::signal(SIGTERM).boxed_local();
    let (signal, _, _) = futures_util::future::select_all([interrupt, terminate]).await;
    signal.context("waiting for a shutdown signal")?;
    tracing::info!("shutdown requested: flushing partitions");
    drop(serving);
    system.flush_all().await.context("flushing partitions at shutdown")?;
    tracing::info!("shutdown complete");
    Ok(())
}
