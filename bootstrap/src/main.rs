//! The `rill-server` binary: parses flags, loads configuration, starts logging and runs
//! the server on a compio (io_uring) event loop.

use std::collections::BTreeMap;
use std::process::ExitCode;

use rill_bootstrap::{config, host, server};

const USAGE: &str = "usage: rill-server [--with-default-root-credentials] [--fresh] [--replica-id N] [--help]

Configuration: embedded defaults, then the TOML file named by IGGY_CONFIG_PATH, then
IGGY_* environment variables (e.g. IGGY_TCP_ADDRESS, IGGY_SYSTEM_PATH).
--replica-id picks this node in the `[cluster]` roster (default 0).";

struct Flags {
    default_credentials: bool,
    fresh: bool,
    replica_id: Option<u8>,
}

fn parse_flags() -> Result<Flags, String> {
    let mut flags = Flags { default_credentials: false, fresh: false, replica_id: None };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--with-default-root-credentials" => flags.default_credentials = true,
            "--fresh" => flags.fresh = true,
            "--replica-id" => {
                let value = args.next().ok_or_else(|| format!("--replica-id needs a number\n\n{USAGE}"))?;
                let id = value.parse().map_err(|_| format!("invalid --replica-id `{value}`: expected 0 to 30"))?;
                flags.replica_id = Some(id);
            }
            "--help" | "-h" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument `{other}`\n\n{USAGE}")),
        }
    }
    Ok(flags)
}

/// Reads the `.env` file into `env` (the environment wins); the file and how many
/// variables it added, when there was one.
fn read_dotenv(env: &mut BTreeMap<String, String>) -> Result<Option<(std::path::PathBuf, usize)>, String> {
    let Some(path) = rill_bootstrap::dotenv::path(env) else { return Ok(None) };
    let text = std::fs::read_to_string(&path).map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    let pairs = rill_bootstrap::dotenv::parse(&text).map_err(|error| format!("{}: {error}", path.display()))?;
    Ok(Some((path, rill_bootstrap::dotenv::merge(env, pairs))))
}

/// Logs go to stderr and, unless `file_enabled = false`, to the rotating `rill.log` (see
/// `logfile`). A log file that cannot be opened is reported and skipped: logging must not
/// stop the server from starting.
fn init_logging(
    level: &str,
    rust_log: Option<&str>,
    file: Option<rill_bootstrap::logfile::LogSettings>,
    otlp: Option<rill_bootstrap::otlp::LogLayer>,
) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    // `RUST_LOG`, from the environment or the .env file, wins over `system.logging.level`.
    let filter = rust_log
        .and_then(|directives| tracing_subscriber::EnvFilter::try_new(directives).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new(level));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let stderr = tracing_subscriber::fmt::layer().with_ansi(ansi).with_thread_names(true).with_writer(std::io::stderr);
    let file_layer = file.and_then(|settings| {
        let dir = settings.dir.clone();
        match rill_bootstrap::logfile::RotatingFile::open(settings) {
            Ok(file) => Some(
                tracing_subscriber::fmt::layer()
                    .with_ansi(false)
                    .with_thread_names(true)
                    .with_writer(std::sync::Mutex::new(file)),
            ),
            Err(error) => {
                eprintln!("rill-server: cannot open a log file in {}: {error}; logging to stderr only", dir.display());
                None
            }
        }
    });
    tracing_subscriber::registry().with(filter).with(stderr).with(file_layer).with(otlp).init();
}

fn main() -> ExitCode {
    let flags = match parse_flags() {
        Ok(flags) => flags,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let mut env: BTreeMap<String, String> = std::env::vars().collect();
    let dotenv = match read_dotenv(&mut env) {
        Ok(dotenv) => dotenv,
        Err(message) => {
            eprintln!("rill-server: {message}");
            return ExitCode::from(2);
        }
    };
    let file = env.get("IGGY_CONFIG_PATH").map(|path| (path.clone(), std::fs::read_to_string(path)));
    let file = match file {
        Some((path, Ok(text))) => Some((path, text)),
        Some((path, Err(error))) => {
            eprintln!("rill-server: cannot read config file {path}: {error}");
            return ExitCode::from(2);
        }
        None => None,
    };
    let loaded = config::load(file.as_ref().map(|(p, t)| (p.as_str(), t.as_str())), &env)
        .and_then(|config| config.with_replica_id(flags.replica_id));
    let config = match loaded {
        Ok(config) => config,
        Err(error) => {
            eprintln!("rill-server: {error:#}");
            return ExitCode::from(2);
        }
    };
    if flags.fresh {
        let _ = std::fs::remove_dir_all(&config.system_path);
    }
    let exporter = match config.telemetry.clone().map(rill_bootstrap::otlp::start).transpose() {
        Ok(exporter) => exporter,
        Err(error) => {
            eprintln!("rill-server: cannot start the OpenTelemetry exporter: {error}");
            return ExitCode::from(1);
        }
    };
    let otlp_logs = exporter.as_ref().map(|e| rill_bootstrap::otlp::LogLayer { sender: e.logs.clone() });
    init_logging(&config.log_level, env.get("RUST_LOG").map(String::as_str), config.log_file.clone(), otlp_logs);
    if let Some((path, added)) = dotenv {
        tracing::info!(path = %path.display(), variables = added, "read environment variables from a .env file");
    }
    for key in &config.unknown_keys {
        tracing::warn!(key = %key, "unknown configuration key; it has no effect");
    }
    if let Some(limit) = host::raise_open_files_limit() {
        tracing::debug!(open_files = limit, "open-files limit");
    }
    let root = host::root_seed(
        env.get("IGGY_ROOT_USERNAME").cloned(),
        env.get("IGGY_ROOT_PASSWORD").cloned(),
        flags.default_credentials,
    );
    match server::run(config, root, exporter.map(|e| e.traces)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("rill-server: {error:#}");
            ExitCode::from(1)
        }
    }
}
