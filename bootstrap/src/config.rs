//! Configuration: embedded defaults, then the TOML file named by IGGY_CONFIG_PATH, then
//! IGGY_* environment variables. Unknown keys are reported by name; a known key with a
//! value of the wrong type or an invalid value stops the start, naming key and value.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use anyhow::{Context, bail};
use toml::Value;

pub use crate::config_sections::{ClusterConfig, MemoryPoolConfig};

const DEFAULTS: &str = include_str!("defaults.toml");

/// IGGY_* variables that are not config keys.
const NON_CONFIG_VARIABLES: &[&str] =
    &["IGGY_CONFIG_PATH", "IGGY_ROOT_USERNAME", "IGGY_ROOT_PASSWORD", "IGGY_ENV_PATH"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub enabled: bool,
    pub address: String,
    pub tls: Tls,
}

/// A transport's TLS settings (QUIC's `enabled` is always true).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tls {
    pub enabled: bool,
    pub self_signed: bool,
    pub cert_file: String,
    pub key_file: String,
}

impl Tls {
    /// The certificate and key files to load, or `None` for the self-signed certificate.
    pub fn files(&self) -> Option<(&str, &str)> {
        (!self.self_signed && !self.cert_file.is_empty()).then_some((self.cert_file.as_str(), self.key_file.as_str()))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub system_path: String,
    pub cpu_allocation: String,
    /// A NUMA allocation must be honoured: without NUMA support the start stops instead of
    /// falling back to one shard per core.
    pub require_numa: bool,
    pub pin_threads: bool,
    pub inbox_capacity: usize,
    pub memory_pool: MemoryPoolConfig,
    pub security: rill_application::config::SecurityConfig,
    pub data: rill_application::config::DataConfig,
    pub http_settings: rill_adapter_transport_http::HttpSettings,
    pub cluster: ClusterConfig,
    pub log_level: String,
    /// The log file and its rotation (`None`: `file_enabled = false`).
    pub log_file: Option<crate::logfile::LogSettings>,
    pub tcp: Listener,
    pub quic: Listener,
    pub http: Listener,
    pub websocket: Listener,
    /// The effective configuration, as written to `runtime/current_config.toml`.
    pub effective: String,
    /// Keys that were set but that Rill does not know.
    pub unknown_keys: Vec<String>,
    /// systemd's notify socket and watchdog, from the environment.
    pub systemd: crate::systemd::Notifier,
    /// `[system.encryption]`: the key messages are sealed with, when enabled.
    pub encryption: Option<rill_application::encryption::EncryptionKey>,
    /// `[telemetry]`: where OTLP spans and logs go, when enabled.
    pub telemetry: Option<crate::otlp::TelemetryConfig>,
}

/// Flattens a TOML table into `a.b.c -> value` leaves.
pub(crate) fn flatten(prefix: &str, value: &Value, out: &mut BTreeMap<String, Value>) {
    match value {
        Value::Table(table) => {
            for (key, child) in table {
                let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
                flatten(&path, child, out);
            }
        }
        leaf => {
            out.insert(prefix.to_owned(), leaf.clone());
        }
    }
}

fn set_path(root: &mut Value, path: &str, value: Value) {
    let mut node = root;
    let parts: Vec<&str> = path.split('.').collect();
    for part in &parts[..parts.len() - 1] {
        node = node
            .as_table_mut()
            .expect("known paths run through tables")
            .entry(part.to_string())
            .or_insert_with(|| Value::Table(Default::default()));
    }
    node.as_table_mut().expect("known paths run through tables").insert(parts[parts.len() - 1].to_owned(), value);
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::String(_) => "a string",
        Value::Integer(_) => "an integer",
        Value::Float(_) => "a number",
        Value::Boolean(_) => "a boolean (true or false)",
        Value::Datetime(_) => "a date",
        Value::Array(_) => "an array",
        Value::Table(_) => "a table",
    }
}

/// Parses an environment value with the type of the key's default.
fn parse_env(key: &str, raw: &str, default: &Value) -> anyhow::Result<Value> {
    let parsed = match default {
        Value::Boolean(_) => raw.trim().parse::<bool>().ok().map(Value::Boolean),
        Value::Integer(_) => raw.trim().parse::<i64>().ok().map(Value::Integer),
        Value::Float(_) => raw.trim().parse::<f64>().ok().map(Value::Float),
        // Lists come from the environment comma-separated: `GET,POST`.
        Value::Array(_) => {
            Some(Value::Array(raw.split(',').map(|item| Value::String(item.trim().to_owned())).collect()))
        }
        _ => Some(Value::String(raw.to_owned())),
    };
    parsed.with_context(|| format!("invalid value for `{key}`: `{raw}` (expected {})", type_name(default)))
}

/// Loads the configuration from the given file text (if any) and environment.
pub fn load(file: Option<(&str, &str)>, env: &BTreeMap<String, String>) -> anyhow::Result<Config> {
    let mut merged = Value::Table(toml::from_str(DEFAULTS).expect("embedded defaults are valid TOML"));
    let mut known = BTreeMap::new();
    flatten("", &merged, &mut known);
    let mut unknown_keys = Vec::new();
    let mut file_leaves = BTreeMap::new();
    if let Some((path, text)) = file {
        let parsed =
            Value::Table(toml::from_str(text).with_context(|| format!("config file {path} is not valid TOML"))?);
        flatten("", &parsed, &mut file_leaves);
        crate::config_iggy::translate(&mut file_leaves).with_context(|| format!("in {path}"))?;
        for (key, value) in file_leaves.clone() {
            match known.get(&key) {
                None => unknown_keys.push(key),
                // `cpu_allocation = 4` is as natural as `cpu_allocation = "4"`.
                Some(_) if key == "system.sharding.cpu_allocation" && value.is_integer() => {
                    set_path(&mut merged, &key, Value::String(value.to_string()));
                }
                Some(default) if std::mem::discriminant(default) != std::mem::discriminant(&value) => {
                    bail!("invalid value for `{key}` in {path}: `{value}` (expected {})", type_name(default));
                }
                Some(_) => set_path(&mut merged, &key, value),
            }
        }
    }
    crate::config_iggy::refuse_unhonoured(&file_leaves, env)?;
    let mut env_names: BTreeMap<String, &String> = known.keys().map(|k| (crate::config_iggy::env_name(k), k)).collect();
    for (iggy, rill) in crate::config_iggy::RENAMED {
        if let Some((key, _)) = known.get_key_value(*rill) {
            env_names.entry(crate::config_iggy::env_name(iggy)).or_insert(key);
        }
    }
    for (name, raw) in env.iter().filter(|(name, _)| name.starts_with("IGGY_")) {
        match env_names.get(name) {
            Some(key) => set_path(&mut merged, key, parse_env(key, raw, &known[*key])?),
            None if NON_CONFIG_VARIABLES.contains(&name.as_str()) || name.starts_with("IGGY_TEST_") => {}
            None => unknown_keys.push(name.clone()),
        }
    }
    let mut config = typed(&merged, unknown_keys)?;
    config.systemd = crate::systemd::Notifier::from_env(env);
    validate(&config)?;
    Ok(config)
}

/// Keys whose values are secrets: never written to the effective config on disk.
const SECRET_KEYS: &[&str] = &[
    "http.jwt.encoding_secret",
    "system.encryption.key",
    "cluster.auth.shared_secret",
    "cluster.auth.previous_shared_secret",
];

/// The effective config with secrets masked: it is written to disk.
fn redacted(merged: &Value) -> Value {
    let mut copy = merged.clone();
    for key in SECRET_KEYS {
        let mut value = Some(&copy);
        for part in key.split('.') {
            value = value.and_then(|v| v.get(part));
        }
        if value.and_then(Value::as_str).is_some_and(|s| !s.is_empty()) {
            set_path(&mut copy, key, Value::String("<redacted>".into()));
        }
    }
    copy
}

fn typed(merged: &Value, unknown_keys: Vec<String>) -> anyhow::Result<Config> {
    let mut leaves = BTreeMap::new();
    flatten("", merged, &mut leaves);
    let text = |key: &str| leaves[key].as_str().expect("types were checked against the defaults").to_owned();
    let flag = |key: &str| leaves[key].as_bool().expect("types were checked against the defaults");
    let tls = |section: &str, always: bool| {
        let key = |name: &str| format!("{section}.{name}");
        if !leaves.contains_key(&key("self_signed")) {
            return Tls::default();
        }
        Tls {
            enabled: always || flag(&key("enabled")),
            self_signed: flag(&key("self_signed")),
            cert_file: text(&key("cert_file")),
            key_file: text(&key("key_file")),
        }
    };
    let listener = |section: &str, tls_section: &str, always: bool| Listener {
        enabled: flag(&format!("{section}.enabled")),
        address: text(&format!("{section}.address")),
        tls: tls(tls_section, always),
    };
    let inbox_capacity =
        leaves["system.sharding.inbox_capacity"].as_integer().expect("types were checked against the defaults");
    if !(1..=1 << 20).contains(&inbox_capacity) {
        bail!("invalid value for `system.sharding.inbox_capacity`: `{inbox_capacity}` (expected 1 to 1048576)");
    }
    let memory_pool = crate::config_sections::memory_pool(&leaves)?;
    let security = crate::config_sections::security(&leaves)?;
    let http_settings = crate::config_sections::http(&leaves)?;
    let cluster = crate::config_sections::cluster(&leaves)?;
    Ok(Config {
        data: crate::config_data::data_config(&leaves)?,
        http_settings,
        cluster,
        security,
        memory_pool,
        system_path: text("system.path"),
        cpu_allocation: text("system.sharding.cpu_allocation"),
        require_numa: flag("system.sharding.require_numa"),
        pin_threads: flag("system.sharding.pin_threads"),
        inbox_capacity: inbox_capacity as usize,
        log_level: text("system.logging.level"),
        log_file: log_file(&leaves)?,
        tcp: listener("tcp", "tcp.tls", false),
        quic: listener("quic", "quic.certificate", true),
        http: listener("http", "http.tls", false),
        websocket: listener("websocket", "websocket.tls", false),
        effective: toml::to_string(&redacted(merged)).context("serialising the effective config")?,
        unknown_keys,
        systemd: Default::default(),
        encryption: encryption_key(flag("system.encryption.enabled"), &text("system.encryption.key"))?,
        telemetry: telemetry(&leaves)?,
    })
}

impl Config {
    /// Applies `--replica-id` and checks the node is in the roster.
    pub fn with_replica_id(mut self, replica_id: Option<u8>) -> anyhow::Result<Self> {
        let cluster = &mut self.cluster;
        cluster.replica_id = replica_id.unwrap_or(0);
        if !cluster.enabled {
            return Ok(self);
        }
        let count = cluster.replicas.len();
        if !(1..=rill_domain::vsr::REPLICAS_MAX as usize).contains(&count) {
            bail!(
                "invalid value for `cluster.replicas`: {count} addresses (expected 1 to {})",
                rill_domain::vsr::REPLICAS_MAX
            );
        }
        cluster.security.check_cluster_start()?;
        if cluster.replica_id as usize >= count {
            bail!("--replica-id {} is not in `cluster.replicas` ({count} nodes)", cluster.replica_id);
        }
        if cluster.client_addresses.len() != count {
            bail!("`cluster.client_addresses` must list one address per replica ({count})");
        }
        for (key, list) in [
            ("quic_addresses", &cluster.quic_addresses),
            ("http_addresses", &cluster.http_addresses),
            ("websocket_addresses", &cluster.websocket_addresses),
        ] {
            if !list.is_empty() && list.len() != count {
                bail!("`cluster.{key}` must be empty or list one address per replica ({count})");
            }
        }
        if !cluster.listen_address.is_empty() && cluster.listen_address.parse::<SocketAddr>().is_err() {
            bail!("invalid value for `cluster.listen_address`: `{}` (expected ip:port)", cluster.listen_address);
        }
        let transports =
            cluster.quic_addresses.iter().chain(&cluster.http_addresses).chain(&cluster.websocket_addresses);
        for address in cluster.replicas.iter().chain(&cluster.client_addresses).chain(transports) {
            if address.parse::<SocketAddr>().is_err() {
                bail!("invalid address in `[cluster]`: `{address}` (expected ip:port)");
            }
        }
        Ok(self)
    }
}

fn validate(config: &Config) -> anyhow::Result<()> {
    for (key, listener) in
        [("tcp", &config.tcp), ("quic", &config.quic), ("http", &config.http), ("websocket", &config.websocket)]
    {
        if listener.address.parse::<SocketAddr>().is_err() {
            bail!("invalid value for `{key}.address`: `{}` (expected ip:port)", listener.address);
        }
    }
    if !config.tcp.enabled && !config.quic.enabled && !config.websocket.enabled {
        bail!("every transport is disabled: enable at least one of `tcp`, `quic` and `websocket`");
    }
    for (key, listener) in
        [("tcp.tls", &config.tcp), ("quic.certificate", &config.quic), ("websocket.tls", &config.websocket)]
    {
        let tls = &listener.tls;
        if tls.enabled && !tls.self_signed && (tls.cert_file.is_empty() || tls.key_file.is_empty()) {
            bail!(
                "invalid `{key}` settings: with `self_signed = false`, both `cert_file` and `key_file` must name files"
            );
        }
    }
    if !matches!(config.log_level.as_str(), "trace" | "debug" | "info" | "warn" | "error") {
        bail!(
            "invalid value for `system.logging.level`: `{}` (expected trace, debug, info, warn or error)",
            config.log_level
        );
    }
    if let Err(error) = rill_domain::cpu_allocation::CpuAllocation::parse(&config.cpu_allocation) {
        bail!("invalid value for `system.sharding.cpu_allocation`: {error}");
    }
    if config.system_path.trim().is_empty() {
        bail!("invalid value for `system.path`: `` (expected a directory path)");
    }
    Ok(())
}

/// `[telemetry]`: with `enabled`, both signals over the "http" transport to http:// URLs.
fn telemetry(leaves: &BTreeMap<String, Value>) -> anyhow::Result<Option<crate::otlp::TelemetryConfig>> {
    let text = |key: &str| leaves[key].as_str().expect("types were checked against the defaults").to_owned();
    if !leaves["telemetry.enabled"].as_bool().expect("types were checked against the defaults") {
        return Ok(None);
    }
    let endpoint = |signal: &str| -> anyhow::Result<crate::otlp::Endpoint> {
        let transport = text(&format!("telemetry.{signal}.transport"));
        if transport != "http" {
            bail!(
                "invalid value for `telemetry.{signal}.transport`: `{transport}` (Rill exports OTLP over \"http\" only)"
            );
        }
        crate::otlp::Endpoint::parse(&text(&format!("telemetry.{signal}.endpoint")))
            .map_err(|error| anyhow::anyhow!("invalid value for `telemetry.{signal}.endpoint`: {error}"))
    };
    Ok(Some(crate::otlp::TelemetryConfig {
        service_name: text("telemetry.service_name"),
        traces_endpoint: endpoint("traces")?,
        logs_endpoint: endpoint("logs")?,
    }))
}

/// `[system.encryption]`: with `enabled`, `key` must be base64 of exactly 32 bytes.
fn encryption_key(enabled: bool, key: &str) -> anyhow::Result<Option<rill_application::encryption::EncryptionKey>> {
    use base64::Engine;
    if !enabled {
        return Ok(None);
    }
    let expected = "(expected a base64-encoded 256-bit key: `head -c 32 /dev/urandom | base64`)";
    if key.trim().is_empty() {
        bail!("`system.encryption.enabled = true` needs `system.encryption.key` {expected}");
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(key.trim())
        .map_err(|_| anyhow::anyhow!("invalid value for `system.encryption.key`: not base64 {expected}"))?;
    let key: [u8; 32] = bytes.try_into().map_err(|bytes: Vec<u8>| {
        anyhow::anyhow!("invalid value for `system.encryption.key`: {} bytes {expected}", bytes.len())
    })?;
    Ok(Some(rill_application::encryption::EncryptionKey(key)))
}

/// `[system.logging]`'s file settings.
fn log_file(leaves: &BTreeMap<String, Value>) -> anyhow::Result<Option<crate::logfile::LogSettings>> {
    let text = |key: &str| leaves[key].as_str().expect("types were checked against the defaults");
    if !leaves["system.logging.file_enabled"].as_bool().expect("types were checked against the defaults") {
        return Ok(None);
    }
    let size = |key: &str| {
        let value = text(key);
        rill_domain::topic_options::parse_size_bytes(value)
            .with_context(|| format!("invalid value for `{key}`: `{value}` (expected a size such as \"500 MB\", or 0)"))
    };
    let duration = |key: &str| {
        let value = text(key);
        match value.trim() {
            "0" | "none" | "unlimited" => Ok(0),
            _ => rill_domain::topic_options::parse_duration_us(value).with_context(|| {
                format!("invalid value for `{key}`: `{value}` (expected a duration such as \"7 days\")")
            }),
        }
    };
    Ok(Some(crate::logfile::LogSettings {
        dir: std::path::Path::new(text("system.path")).join(text("system.logging.path")),
        max_file_bytes: size("system.logging.max_file_size")?,
        max_total_bytes: size("system.logging.max_total_size")?,
        retention: std::time::Duration::from_micros(duration("system.logging.retention")?),
        check_interval: std::time::Duration::from_micros(
            duration("system.logging.rotation_check_interval")?.max(1_000_000),
        ),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn defaults_load() {
        let config = load(None, &env(&[])).unwrap();
        assert_eq!(config.tcp.address, "127.0.0.1:8090");
        assert_eq!(config.system_path, "local_data");
        assert!(config.unknown_keys.is_empty());
    }

    #[test]
    fn file_then_env_override() {
        let file = "[tcp]\naddress = \"127.0.0.1:9000\"\n[system]\npath = \"/tmp/x\"\n";
        let config = load(Some(("c.toml", file)), &env(&[("IGGY_TCP_ADDRESS", "127.0.0.1:9100")])).unwrap();
        assert_eq!(config.tcp.address, "127.0.0.1:9100");
        assert_eq!(config.system_path, "/tmp/x");
        assert!(config.effective.contains("127.0.0.1:9100"));
    }

    #[test]
    fn cpu_allocation_accepts_numbers_and_refuses_garbage() {
        let config = load(Some(("c.toml", "[system.sharding]\ncpu_allocation = 2\n")), &env(&[])).unwrap();
        assert_eq!(config.cpu_allocation, "2");
        let error = load(None, &env(&[("IGGY_SYSTEM_SHARDING_CPU_ALLOCATION", "8..2")])).unwrap_err().to_string();
        assert!(error.contains("cpu_allocation") && error.contains("8..2"), "{error}");
        let error = load(None, &env(&[("IGGY_SYSTEM_SHARDING_INBOX_CAPACITY", "0")])).unwrap_err().to_string();
        assert!(error.contains("inbox_capacity"), "{error}");
    }

    #[test]
    fn memory_pool_settings_are_validated() {
        let config = load(None, &env(&[("IGGY_SYSTEM_MEMORY_POOL_SIZE", "1 GiB")])).unwrap();
        assert_eq!(config.memory_pool.size_bytes, 1 << 30);
        let error = load(None, &env(&[("IGGY_SYSTEM_MEMORY_POOL_SIZE", "100 MiB")])).unwrap_err().to_string();
        assert!(error.contains("memory_pool"), "{error}");
        let error = load(None, &env(&[("IGGY_SYSTEM_MEMORY_POOL_SIZE", "lots")])).unwrap_err().to_string();
        assert!(error.contains("lots"), "{error}");
        let error = load(None, &env(&[("IGGY_SYSTEM_MEMORY_POOL_BUCKET_CAPACITY", "9000")])).unwrap_err().to_string();
        assert!(error.contains("9000"), "{error}");
        let config = load(None, &env(&[("IGGY_SYSTEM_MEMORY_POOL_ENABLED", "false")])).unwrap();
        assert!(!config.memory_pool.enabled);
    }

    #[test]
    fn the_jwt_secret_never_reaches_the_effective_config() {
        let config = load(None, &env(&[("IGGY_HTTP_JWT_ENCODING_SECRET", "hunter2-hunter2")])).unwrap();
        assert_eq!(config.http_settings.jwt_secret, "hunter2-hunter2");
        assert!(!config.effective.contains("hunter2") && config.effective.contains("<redacted>"));
    }

    #[test]
    fn unknown_keys_are_named() {
        let file = "[tcp]\nadress = \"x\"\n[colour]\nname = \"red\"\n";
        let config = load(Some(("c.toml", file)), &env(&[("IGGY_TCP_NODELAY", "1")])).unwrap();
        assert_eq!(config.unknown_keys, vec!["colour.name", "tcp.adress", "IGGY_TCP_NODELAY"]);
    }

    #[test]
    fn the_metrics_endpoint_is_a_path_no_api_route_uses() {
        let config = load(None, &env(&[("IGGY_HTTP_METRICS_ENDPOINT", "/prometheus")])).unwrap();
        assert_eq!(config.http_settings.metrics_endpoint.as_deref(), Some("/prometheus"));
        for taken in ["/stats", "/streams/x", "metrics", "/", "/{x}"] {
            let error = load(None, &env(&[("IGGY_HTTP_METRICS_ENDPOINT", taken)])).unwrap_err().to_string();
            assert!(error.contains("http.metrics.endpoint"), "{taken}: {error}");
        }
        let off = load(None, &env(&[("IGGY_HTTP_METRICS_ENABLED", "false")])).unwrap();
        assert_eq!(off.http_settings.metrics_endpoint, None);
    }

    #[test]
    fn invalid_values_name_key_and_value() {
        let error = load(None, &env(&[("IGGY_TCP_ENABLED", "yes")])).unwrap_err().to_string();
        assert!(error.contains("tcp.enabled") && error.contains("yes"), "{error}");
        let error = load(Some(("c.toml", "[tcp]\naddress = 5\n")), &env(&[])).unwrap_err().to_string();
        assert!(error.contains("tcp.address") && error.contains('5'), "{error}");
        let error = load(None, &env(&[("IGGY_TCP_ADDRESS", "nowhere")])).unwrap_err().to_string();
        assert!(error.contains("tcp.address") && error.contains("nowhere"), "{error}");
        let error = load(None, &env(&[("IGGY_SYSTEM_LOGGING_LEVEL", "loud")])).unwrap_err().to_string();
        assert!(error.contains("loud"), "{error}");
    }
}
