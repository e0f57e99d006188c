//! The memory pool, security, HTTP and cluster sections of the configuration, each read
//! from the flattened keys (`section.key`) and checked, naming the key and value at fault.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use toml::Value;

use crate::config_data::{flag, text};

type Leaves = BTreeMap<String, Value>;

/// `[cluster]` and `--replica-id`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterConfig {
    pub enabled: bool,
    pub replicas: Vec<String>,
    pub client_addresses: Vec<String>,
    /// Each node's QUIC, HTTP and WebSocket address, in roster order (empty: not
    /// advertised), so cluster metadata names every transport of every node.
    pub quic_addresses: Vec<String>,
    pub http_addresses: Vec<String>,
    pub websocket_addresses: Vec<String>,
    /// Where the replica plane binds, when not at the roster address (empty: the roster's).
    pub listen_address: String,
    /// Partitions are replicated through their shard's partition group (the default; off:
    /// messages stay on the node that took them).
    pub replicate_partitions: bool,
    pub replica_id: u8,
    /// `[cluster.auth]` and `[cluster.tls]`.
    pub security: crate::config_cluster::ReplicaSecurityConfig,
}

impl ClusterConfig {
    pub fn membership(&self) -> rill_application::replication::Membership {
        match self.enabled {
            true => rill_application::replication::Membership {
                replica_id: self.replica_id,
                replica_count: self.replicas.len() as u8,
            },
            false => Default::default(),
        }
    }

    /// Each node's client address and TCP port for cluster metadata (empty on one node).
    pub fn nodes(&self) -> Vec<(String, rill_domain::answer::NodePorts)> {
        if !self.enabled {
            return Vec::new();
        }
        let port = |list: &[String], index: usize| -> u16 {
            list.get(index)
                .and_then(|address| address.rsplit_once(':'))
                .and_then(|(_, port)| port.parse().ok())
                .unwrap_or(0)
        };
        self.client_addresses
            .iter()
            .enumerate()
            .map(|(index, address)| {
                let ip = address.rsplit_once(':').map_or(address.as_str(), |(ip, _)| ip);
                let ports = rill_domain::answer::NodePorts {
                    tcp: port(&self.client_addresses, index),
                    quic: port(&self.quic_addresses, index),
                    http: port(&self.http_addresses, index),
                    websocket: port(&self.websocket_addresses, index),
                };
                (ip.trim_matches(['[', ']']).to_owned(), ports)
            })
            .collect()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryPoolConfig {
    pub enabled: bool,
    pub size_bytes: u64,
    pub bucket_capacity: usize,
}

fn integer(leaves: &Leaves, key: &str) -> i64 {
    leaves[key].as_integer().expect("types were checked against the defaults")
}

fn duration(leaves: &Leaves, key: &str) -> anyhow::Result<u64> {
    let value = text(leaves, key);
    rill_domain::topic_options::parse_duration_us(value)
        .with_context(|| format!("invalid value for `{key}`: `{value}` (expected a duration such as \"30 s\")"))
}

/// A list of strings, empty items dropped.
fn list(leaves: &Leaves, key: &str) -> anyhow::Result<Vec<String>> {
    let items = leaves[key].as_array().expect("types were checked against the defaults");
    items
        .iter()
        .map(|item| item.as_str().map(str::to_owned))
        .collect::<Option<Vec<String>>>()
        .with_context(|| format!("invalid value for `{key}`: expected a list of strings"))
        .map(|items| items.into_iter().filter(|item| !item.is_empty()).collect())
}

/// `[system.memory_pool]`: the pool's size must hold its buckets.
pub fn memory_pool(leaves: &Leaves) -> anyhow::Result<MemoryPoolConfig> {
    let pool_size = text(leaves, "system.memory_pool.size");
    let size_bytes =
        rill_domain::topic_options::parse_size_bytes(pool_size).filter(|&bytes| bytes > 0).with_context(|| {
            format!("invalid value for `system.memory_pool.size`: `{pool_size}` (expected a size such as \"4 GiB\")")
        })?;
    let bucket_capacity = integer(leaves, "system.memory_pool.bucket_capacity");
    let memory_pool = MemoryPoolConfig {
        enabled: flag(leaves, "system.memory_pool.enabled"),
        size_bytes,
        bucket_capacity: usize::try_from(bucket_capacity).unwrap_or(usize::MAX),
    };
    if let (true, Err(error)) = (
        memory_pool.enabled,
        rill_application::memory_pool::MemoryPool::check(memory_pool.size_bytes, memory_pool.bucket_capacity),
    ) {
        bail!("invalid `system.memory_pool` settings: {error}");
    }
    Ok(memory_pool)
}

/// Logins, sessions, connections and frames.
pub fn security(leaves: &Leaves) -> anyhow::Result<rill_application::config::SecurityConfig> {
    let max_failures = integer(leaves, "login.max_failures");
    if !(1..=1_000_000).contains(&max_failures) {
        bail!("invalid value for `login.max_failures`: `{max_failures}` (expected 1 to 1000000)");
    }
    let heartbeat = flag(leaves, "heartbeat.enabled");
    Ok(rill_application::config::SecurityConfig {
        login_max_failures: max_failures as u32,
        login_failure_window_us: duration(leaves, "login.failure_window")?,
        login_failure_delay_us: duration(leaves, "login.failure_delay")?,
        rebalancing_timeout_us: duration(leaves, "consumer_group.rebalancing_timeout")?,
        token_cleaner_interval_us: duration(leaves, "personal_access_token.cleaner.interval")?,
        session_idle_limit_us: if heartbeat { duration(leaves, "heartbeat.interval")? / 5 * 6 } else { 0 },
        max_connections: u32::try_from(integer(leaves, "connections.max_connections"))
            .ok()
            .context("invalid value for `connections.max_connections` (expected 0 to 4294967295)")?,
        login_timeout_us: duration(leaves, "connections.login_timeout")?,
        frame_timeout_us: duration(leaves, "connections.frame_timeout")?,
        max_frame_bytes: frame_size_limit(text(leaves, "connections.max_frame_size"))?,
    })
}

/// `connections.max_frame_size`: a size from one header (256 bytes) up to the protocol's
/// 64 MiB frame limit.
pub(crate) fn frame_size_limit(value: &str) -> anyhow::Result<usize> {
    let max = rill_domain::constants::MAX_FRAME_SIZE as u64;
    rill_domain::topic_options::parse_size_bytes(value)
        .filter(|bytes| (rill_domain::constants::HEADER_SIZE as u64..=max).contains(bytes))
        .map(|bytes| bytes as usize)
        .with_context(|| {
            format!("invalid value for `connections.max_frame_size`: `{value}` (expected a size from 256 B to 64 MiB)")
        })
}

/// `[http]`: tokens, request size, CORS and the metrics endpoint.
pub fn http(leaves: &Leaves) -> anyhow::Result<rill_adapter_transport_http::HttpSettings> {
    let max_request_size = text(leaves, "http.max_request_size");
    let max_request_size_bytes = rill_domain::topic_options::parse_size_bytes(max_request_size)
        .filter(|&bytes| bytes >= 1024)
        .with_context(|| {
            format!(
                "invalid value for `http.max_request_size`: `{max_request_size}` (expected a size such as \"2 MB\")"
            )
        })?;
    let http_settings = rill_adapter_transport_http::HttpSettings {
        jwt_secret: text(leaves, "http.jwt.encoding_secret").to_owned(),
        access_token_lifetime_s: duration(leaves, "http.jwt.access_token_expiry")? / 1_000_000,
        clock_skew_s: duration(leaves, "http.jwt.clock_skew")? / 1_000_000,
        max_request_size_bytes: usize::try_from(max_request_size_bytes).unwrap_or(usize::MAX),
        cors: rill_adapter_transport_http::CorsSettings {
            enabled: flag(leaves, "http.cors.enabled"),
            allowed_origins: list(leaves, "http.cors.allowed_origins")?,
            allowed_methods: list(leaves, "http.cors.allowed_methods")?,
            allowed_headers: list(leaves, "http.cors.allowed_headers")?,
            exposed_headers: list(leaves, "http.cors.exposed_headers")?,
            allow_credentials: flag(leaves, "http.cors.allow_credentials"),
        },
        metrics_endpoint: flag(leaves, "http.metrics.enabled")
            .then(|| text(leaves, "http.metrics.endpoint").to_owned()),
        web_ui: flag(leaves, "http.web_ui"),
    };
    if let Some(endpoint) = &http_settings.metrics_endpoint
        && (!endpoint.starts_with('/')
            || endpoint.len() < 2
            || endpoint.contains(['{', '}', '*', ' ', ':'])
            || rill_adapter_transport_http::ROUTE_PREFIXES
                .iter()
                .any(|taken| endpoint == taken || endpoint.starts_with(&format!("{taken}/"))))
    {
        bail!(
            "invalid value for `http.metrics.endpoint`: `{endpoint}` (expected a path such as \"/metrics\" that no API route uses)"
        );
    }
    rill_adapter_transport_http::check_cors(&http_settings.cors).map_err(anyhow::Error::msg)?;
    Ok(http_settings)
}

/// `[cluster]`: the roster and this node's place in it (its id comes later, from
/// `--replica-id`).
pub fn cluster(leaves: &Leaves) -> anyhow::Result<ClusterConfig> {
    Ok(ClusterConfig {
        enabled: flag(leaves, "cluster.enabled"),
        replicas: list(leaves, "cluster.replicas")?,
        client_addresses: list(leaves, "cluster.client_addresses")?,
        quic_addresses: list(leaves, "cluster.quic_addresses")?,
        http_addresses: list(leaves, "cluster.http_addresses")?,
        websocket_addresses: list(leaves, "cluster.websocket_addresses")?,
        listen_address: text(leaves, "cluster.listen_address").to_owned(),
        replicate_partitions: flag(leaves, "cluster.replicate_partitions"),
        replica_id: 0,
        security: crate::config_cluster::replica_security(leaves)?,
    })
}
