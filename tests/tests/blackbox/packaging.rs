//! The container packaging, checked without a container engine (this machine has none):
//! the Dockerfile builds in two stages and runs `rill-server` as an unprivileged user with
//! its data in a volume; the server started with the image's environment serves and knows
//! every variable it sets; every variable the compose files set for one node and for three
//! is a configuration key the server knows.

use std::collections::BTreeMap;

use iggy::prelude::*;
use rill_tests::{TestServer, connect_root, free_port, workspace_dir};

fn read(name: &str) -> String {
    std::fs::read_to_string(workspace_dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The `ENV` settings of a Dockerfile (one `ENV` with `\`-continued `KEY=value` pairs).
fn dockerfile_env(dockerfile: &str) -> BTreeMap<String, String> {
    let joined = dockerfile.replace("\\\n", " ");
    joined
        .lines()
        .filter_map(|line| line.trim().strip_prefix("ENV "))
        .flat_map(|pairs| pairs.split_whitespace())
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The `IGGY_*` names a compose file sets.
fn compose_variables(compose: &str) -> Vec<String> {
    compose
        .lines()
        .filter_map(|line| line.trim().split_once(':').map(|(key, _)| key.trim().to_owned()))
        .filter(|key| key.starts_with("IGGY_"))
        .collect()
}

#[test]
fn the_dockerfile_builds_in_two_stages_and_runs_unprivileged_with_a_data_volume() {
    let dockerfile = read("Dockerfile");
    let stages: Vec<&str> = dockerfile.lines().filter(|line| line.starts_with("FROM ")).collect();
    assert_eq!(stages.len(), 2, "{stages:?}");
    assert!(stages[0].contains(" AS build"));
    assert!(dockerfile.contains("cargo build --release --locked --bin rill-server"));
    assert!(dockerfile.contains("COPY --from=build /src/target/release/rill-server /usr/local/bin/rill-server"));
    assert!(dockerfile.lines().any(|line| line.starts_with("USER ") && !line.contains("root")));
    assert!(dockerfile.contains("VOLUME /data"));
    assert!(dockerfile.contains("STOPSIGNAL SIGTERM"));
    let env = dockerfile_env(&dockerfile);
    assert_eq!(env.get("IGGY_SYSTEM_PATH").map(String::as_str), Some("/data"));
    for port in ["8090/tcp", "8080/udp", "3000/tcp", "8092/tcp"] {
        assert!(dockerfile.contains(port), "port {port} not exposed");
    }
    let ignored = read(".dockerignore");
    assert!(ignored.lines().any(|line| line.trim() == "target"), "the build context would carry target/");
}

#[tokio::test]
async fn the_images_environment_and_the_compose_variables_are_keys_the_server_knows() -> anyhow::Result<()> {
    let mut env = dockerfile_env(&read("Dockerfile"));
    // The image's path and listen addresses, moved to what this test may use.
    for (key, value) in env.iter_mut() {
        if key.ends_with("_ADDRESS") {
            *value = format!("127.0.0.1:{}", free_port());
        }
    }
    env.remove("IGGY_SYSTEM_PATH");
    env.remove("IGGY_TCP_ADDRESS");
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let server = TestServer::start_with_env(&pairs)?;
    connect_root(&server.tcp_address()).await?.ping().await?;
    let logs = server.logs();
    assert!(!logs.contains("unknown configuration key"), "the image sets a key the server does not know:\n{logs}");
    let effective = std::fs::read_to_string(server.data_dir().join("runtime/current_config.toml"))?;
    let mut known = Vec::new();
    flatten_names("", &effective.parse::<toml::Table>()?, &mut known);
    for file in ["docker-compose.yml", "docker-compose.cluster.yml"] {
        for variable in compose_variables(&read(file)) {
            let not_config = ["IGGY_ROOT_USERNAME", "IGGY_ROOT_PASSWORD"].contains(&variable.as_str());
            assert!(not_config || known.contains(&variable), "{file} sets {variable}, which is no configuration key");
        }
    }
    Ok(())
}

/// Every leaf of the effective configuration as its environment variable name.
fn flatten_names(prefix: &str, table: &toml::Table, out: &mut Vec<String>) {
    for (key, value) in table {
        let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}_{key}") };
        match value {
            toml::Value::Table(inner) => flatten_names(&path, inner, out),
            _ => out.push(format!("IGGY_{}", path.to_uppercase())),
        }
    }
}
