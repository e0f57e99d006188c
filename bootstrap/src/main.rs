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

/// Logs go to stderr and to `<data>/logs/rill.log` (appended). A log file that cannot be
/// opened is reported and skipped: logging must not stop the server from starting.
fn init_logging(level: &str, data_path: &str) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let stderr = tracing_subscriber::fmt::layer().with_ansi(ansi).with_thread_names(true).with_writer(std::io::stderr);
    let logs = std::path::Path::new(data_path).join("logs");
    let file = std::fs::create_dir_all(&logs)
        .and_then(|()| std::fs::OpenOptions::new().create(true).append(true).open(logs.join("rill.log")));
    let file_layer = match file {
        Ok(file) => Some(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_thread_names(true)
                .with_writer(std::sync::Mutex::new(file)),
        ),
        Err(error) => {
            eprintln!("rill-server: cannot open {}: {error}; logging to stderr only", logs.join("rill.log").display());
            None
        }
    };
    tracing_subscriber::registry().with(filter).with(stderr).with(file_layer).init();
}

fn main() -> ExitCode {
    let flags = match parse_flags() {
        Ok(flags) => flags,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let env: BTreeMap<String, String> = std::env::vars().collect();
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
    init_logging(&config.log_level, &config.system_path);
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
    match server::run(config, root) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("rill-server: {error:#}");
            ExitCode::from(1)
        }
    }
}
