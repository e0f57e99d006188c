//! Iggy's configuration names where Rill has its own: renamed keys, Iggy's
//! `[[cluster.nodes]]` roster, and the keys that ask for a protection Rill does not give,
//! which stop the start instead of being reported as unknown. With these, Iggy's shipped
//! `config.toml` starts Rill and only the keys Rill truly lacks are named.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use toml::Value;

/// Iggy's key -> Rill's key of the same meaning.
pub const RENAMED: &[(&str, &str)] = &[
    ("system.sharding.pin_cores", "system.sharding.pin_threads"),
    // Iggy's bus carries client and replica frames alike; its cap is Rill's frame cap.
    ("message_bus.max_message_size", "connections.max_frame_size"),
];

/// Keys whose value asks for a protection Rill cannot give, with what it would take: a
/// start that sets them so stops, since running without the protection is worse than not
/// running. `(key, the value that is fine, why)`.
const UNHONOURED: &[(&str, &str, &str)] =
    &[("http.jwt.algorithm", "HS256", "Rill signs and checks HTTP tokens with HS256 only")];

/// Iggy keys whose given value is what Rill does anyway (its fixed directory layout, ...):
/// taken without a word, as are `UNHONOURED` keys at their harmless value. Any other value
/// is reported as unknown.
const MATCHING: &[(&str, &str)] = &[
    ("system.stream.path", "streams"),
    ("system.topic.path", "topics"),
    ("system.partition.path", "partitions"),
    ("system.runtime.path", "runtime"),
    ("personal_access_token.cleaner.enabled", "true"),
    ("websocket.accept_unmasked_frames", "false"),
];

/// The environment variable of a config key: `IGGY_` + the upper-case path joined by `_`.
pub fn env_name(key: &str) -> String {
    format!("IGGY_{}", key.replace('.', "_").to_uppercase())
}

/// Rewrites a config file's leaves to Rill's names: renamed keys move (Rill's own name wins
/// when both are set) and `[[cluster.nodes]]` becomes `cluster.replicas` and
/// `cluster.client_addresses` (unless those are set).
pub fn translate(leaves: &mut BTreeMap<String, Value>) -> anyhow::Result<()> {
    for (iggy, rill) in RENAMED {
        if let Some(value) = leaves.remove(*iggy) {
            leaves.entry((*rill).to_owned()).or_insert(value);
        }
    }
    // An unhonoured key set to its harmless value is matching too.
    let harmless = UNHONOURED.iter().map(|(key, fine, _)| (key, fine));
    for (key, value) in MATCHING.iter().map(|(key, value)| (key, value)).chain(harmless) {
        if leaves.get(*key).is_some_and(|given| as_text(given).eq_ignore_ascii_case(value)) {
            leaves.remove(*key);
        }
    }
    if let Some(nodes) = leaves.remove("cluster.nodes") {
        let strings = |items: Vec<String>| Value::Array(items.into_iter().map(Value::String).collect());
        for (key, addresses) in roster(&nodes)? {
            leaves.entry(format!("cluster.{key}")).or_insert_with(|| strings(addresses));
        }
    }
    Ok(())
}

/// Rill's roster keys and the `ports` entry of Iggy's `[[cluster.nodes]]` each comes from
/// (`tcp_replica` and `tcp` must be there; the others are advertised when every node has one).
const ROSTER_PORTS: [(&str, &str); 5] = [
    ("replicas", "tcp_replica"),
    ("client_addresses", "tcp"),
    ("quic_addresses", "quic"),
    ("http_addresses", "http"),
    ("websocket_addresses", "websocket"),
];

/// Iggy's roster: `[[cluster.nodes]]` tables with `ip`, `replica_id` and
/// `ports = { tcp, tcp_replica, quic, http, websocket }`; returns Rill's roster lists (key,
/// addresses in replica-id order).
fn roster(nodes: &Value) -> anyhow::Result<Vec<(&'static str, Vec<String>)>> {
    let nodes = nodes.as_array().context("invalid value for `cluster.nodes`: expected an array of tables")?;
    let mut by_id = BTreeMap::new();
    for (index, node) in nodes.iter().enumerate() {
        let field =
            |name: &str| node.get(name).with_context(|| format!("`cluster.nodes` entry {index} has no `{name}`"));
        let ip =
            field("ip")?.as_str().with_context(|| format!("`cluster.nodes` entry {index}: `ip` must be a string"))?;
        let replica_id = match node.get("replica_id") {
            Some(id) => id
                .as_integer()
                .with_context(|| format!("`cluster.nodes` entry {index}: `replica_id` must be a number"))?,
            None => index as i64,
        };
        let port = |name: &str| -> anyhow::Result<i64> {
            field("ports")?
                .get(name)
                .and_then(Value::as_integer)
                .with_context(|| format!("`cluster.nodes` entry {index} has no `ports.{name}`"))
        };
        let host = if ip.contains(':') { format!("[{ip}]") } else { ip.to_owned() };
        let (replica, client) = (port("tcp_replica")?, port("tcp")?);
        let addresses: Vec<Option<String>> = ROSTER_PORTS
            .iter()
            .map(|(_, name)| match *name {
                "tcp_replica" => Some(replica),
                "tcp" => Some(client),
                other => port(other).ok(),
            })
            .map(|found| found.map(|p| format!("{host}:{p}")))
            .collect();
        if by_id.insert(replica_id, addresses).is_some() {
            bail!("`cluster.nodes` names replica_id {replica_id} twice");
        }
    }
    if by_id.keys().copied().ne(0..by_id.len() as i64) {
        bail!("`cluster.nodes` replica ids must run 0, 1, 2, ... without gaps");
    }
    let nodes: Vec<Vec<Option<String>>> = by_id.into_values().collect();
    Ok(ROSTER_PORTS
        .iter()
        .enumerate()
        .filter_map(|(column, (key, _))| {
            let addresses: Option<Vec<String>> = nodes.iter().map(|node| node[column].clone()).collect();
            addresses.map(|addresses| (*key, addresses))
        })
        .collect())
}

/// Stops the start when the file or the environment asks for a protection Rill does not
/// give (see `UNHONOURED`).
pub fn refuse_unhonoured(file: &BTreeMap<String, Value>, env: &BTreeMap<String, String>) -> anyhow::Result<()> {
    for (key, fine, why) in UNHONOURED {
        let from_file = file.get(*key).map(as_text);
        let value = env.get(&env_name(key)).cloned().or(from_file);
        if let Some(value) = value
            && !value.trim().eq_ignore_ascii_case(fine)
        {
            bail!("`{key} = {value}` cannot be honoured: {why}. Set it to {fine} (or remove it) to start");
        }
    }
    Ok(())
}

/// A leaf's value as text: a string as it is, anything else as TOML writes it.
fn as_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaves(text: &str) -> BTreeMap<String, Value> {
        let mut out = BTreeMap::new();
        crate::config::flatten("", &Value::Table(toml::from_str(text).unwrap()), &mut out);
        out
    }

    #[test]
    fn renamed_keys_move_and_rills_own_name_wins() {
        let mut file = leaves("[system.sharding]\npin_cores = false\n[message_bus]\nmax_message_size = \"1 MiB\"\n");
        translate(&mut file).unwrap();
        assert_eq!(file.get("system.sharding.pin_threads"), Some(&Value::Boolean(false)));
        assert_eq!(file.get("connections.max_frame_size"), Some(&Value::String("1 MiB".into())));
        let mut same = leaves("[system.stream]\npath = \"streams\"\n[system.topic]\npath = \"elsewhere\"\n");
        translate(&mut same).unwrap();
        assert!(!same.contains_key("system.stream.path"), "Rill's own layout: taken silently");
        assert!(same.contains_key("system.topic.path"), "another layout: left to be reported");
        let mut both = leaves("[system.sharding]\npin_cores = false\npin_threads = true\n");
        translate(&mut both).unwrap();
        assert_eq!(both.get("system.sharding.pin_threads"), Some(&Value::Boolean(true)));
        assert!(!both.contains_key("system.sharding.pin_cores"));
    }

    /// A translated list of addresses, as strings.
    fn addresses(leaves: &BTreeMap<String, Value>, key: &str) -> Vec<String> {
        leaves[key].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect()
    }

    #[test]
    fn iggys_roster_becomes_replicas_and_client_addresses() {
        let text = "[[cluster.nodes]]\nname = \"b\"\nip = \"10.0.0.2\"\nreplica_id = 1\nports = { tcp = 8091, tcp_replica = 9091 }\n\
                    [[cluster.nodes]]\nname = \"a\"\nip = \"10.0.0.1\"\nreplica_id = 0\nports = { tcp = 8090, tcp_replica = 9090, http = 3000 }\n";
        let mut file = leaves(text);
        translate(&mut file).unwrap();
        let list = |key: &str| addresses(&file, key);
        assert_eq!(list("cluster.replicas"), ["10.0.0.1:9090", "10.0.0.2:9091"]);
        assert_eq!(list("cluster.client_addresses"), ["10.0.0.1:8090", "10.0.0.2:8091"]);
        // Only one node names an http port: not advertised for any.
        assert!(!file.contains_key("cluster.http_addresses"));
        let both = "[[cluster.nodes]]\nip = \"h\"\nports = { tcp = 1, tcp_replica = 2, quic = 3, websocket = 4 }\n\
                    [[cluster.nodes]]\nip = \"k\"\nports = { tcp = 5, tcp_replica = 6, quic = 7, websocket = 8 }\n";
        let mut file = leaves(both);
        translate(&mut file).unwrap();
        assert_eq!(addresses(&file, "cluster.quic_addresses"), ["h:3", "k:7"]);
        assert_eq!(addresses(&file, "cluster.websocket_addresses"), ["h:4", "k:8"]);
        let mut gap = leaves("[[cluster.nodes]]\nip = \"h\"\nreplica_id = 1\nports = { tcp = 1, tcp_replica = 2 }\n");
        assert!(translate(&mut gap).unwrap_err().to_string().contains("without gaps"));
        let mut no_port = leaves("[[cluster.nodes]]\nip = \"h\"\nports = { tcp = 1 }\n");
        assert!(translate(&mut no_port).unwrap_err().to_string().contains("ports.tcp_replica"));
    }

    #[test]
    fn a_protection_rill_cannot_give_stops_the_start() {
        let none = BTreeMap::new();
        assert!(refuse_unhonoured(&leaves("[http.jwt]\nalgorithm = \"HS256\"\n"), &none).is_ok());
        let error = refuse_unhonoured(&leaves("[http.jwt]\nalgorithm = \"ES256\"\n"), &none).unwrap_err().to_string();
        assert!(error.contains("http.jwt.algorithm"), "{error}");
        let env = BTreeMap::from([("IGGY_HTTP_JWT_ALGORITHM".to_owned(), "RS256".to_owned())]);
        let error = refuse_unhonoured(&BTreeMap::new(), &env).unwrap_err().to_string();
        assert!(error.contains("http.jwt.algorithm") && error.contains("RS256"), "{error}");
    }
}
