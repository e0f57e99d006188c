//! The `rill-server` binary: parses flags, loads configuration, starts logging and runs
//! the server on a compio (io_uring) event loop.

use std::collections::BTreeMap;
use std::process::ExitCode;

use rill_bootstrap::{config, host, server};

const USAGE: &str = "usage: rill-server [--with-default-root-credentials] [--fresh] [--help]

Configuration: embedded defaults, then the TOML file named by IGGY_CONFIG_PATH, then
IGGY_* environment variables (e.g. IGGY_TCP_ADDRESS, IGGY_SYSTEM_PATH).";

struct Flags {
    default_credentials: bool,
    fresh: bool,
}

fn parse_flags() -> Result<Flags, String> {
    let mut flags = Flags { default_credentials: false, fresh: false };
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--with-default-root-credentials" => flags.default_credentials = true,
            "--fresh" => flags.fresh = true,
            "--help" | "-h" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument `{other}`\n\n{USAGE}")),
        }
    }
    Ok(flags)
}

fn init_logging(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_thread_names(true)
        .with_writer(std::io::stderr)
        .init();
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
    let config = match config::load(file.as_ref().map(|(p, t)| (p.as_str(), t.as_str())), &env) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("rill-server: {error:#}");
            return ExitCode::from(2);
        }
    };
    init_logging(&config.log_level);
    for key in &config.unknown_keys {
        tracing::warn!(key = %key, "unknown configuration key; it has no effect");
    }
    if flags.fresh {
        let _ = std::fs::remove_dir_all(&config.system_path);
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
