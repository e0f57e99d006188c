//! `[cluster.auth]` and `[cluster.tls]` (Iggy's keys): the replica plane's pre-shared key,
//! the retiring key a rotation still accepts, and TLS on the plane. Checked at start, so a
//! short key or TLS without the key stops the start with a message naming the key, and a
//! cluster whose plane has no key starts only when the operator wrote
//! `cluster.auth.allow_unauthenticated_peers = true` (Rill's own key): by default no process
//! that merely reaches a replica port takes part in replication.

use std::collections::BTreeMap;

use anyhow::bail;
use toml::Value;

use crate::config_data::{flag, text};

/// A key shorter than this is refused: the handshake is only as strong as the key.
pub const KEY_MIN_BYTES: usize = 32;

/// TLS on the replica plane: this node's certificate (files, or one generated in memory)
/// and whom its dialing side trusts (a CA file, or, on self-signed certificates, anyone:
/// the key handshake inside TLS is what authenticates).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReplicaTls {
    pub self_signed: bool,
    pub cert_file: String,
    pub key_file: String,
    pub ca_file: String,
}

#[derive(Clone, PartialEq, Eq, Default)]
pub struct ReplicaSecurityConfig {
    /// `(shared_secret, previous_shared_secret)` when `[cluster.auth]` is on.
    pub auth: Option<(String, Option<String>)>,
    pub tls: Option<ReplicaTls>,
    /// The operator's explicit choice to run the plane without a key (a private network).
    pub allow_unauthenticated_peers: bool,
}

impl std::fmt::Debug for ReplicaSecurityConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The keys never reach a log line or a panic message.
        f.debug_struct("ReplicaSecurityConfig")
            .field(
                "auth",
                &self.auth.as_ref().map(|(_, previous)| if previous.is_some() { "on, rotating" } else { "on" }),
            )
            .field("tls", &self.tls)
            .field("allow_unauthenticated_peers", &self.allow_unauthenticated_peers)
            .finish()
    }
}

fn check_key(key: &str, value: &str) -> anyhow::Result<()> {
    if value.len() < KEY_MIN_BYTES {
        bail!(
            "invalid value for `{key}`: {} bytes (expected at least {KEY_MIN_BYTES} random bytes, the same on every \
             node; IGGY_{} keeps it out of files)",
            value.len(),
            key.replace('.', "_").to_uppercase()
        );
    }
    Ok(())
}

pub fn replica_security(leaves: &BTreeMap<String, Value>) -> anyhow::Result<ReplicaSecurityConfig> {
    let auth = match flag(leaves, "cluster.auth.enabled") {
        false => None,
        true => {
            let current = text(leaves, "cluster.auth.shared_secret");
            check_key("cluster.auth.shared_secret", current)?;
            let previous = text(leaves, "cluster.auth.previous_shared_secret");
            if !previous.is_empty() {
                check_key("cluster.auth.previous_shared_secret", previous)?;
            }
            Some((current.to_owned(), (!previous.is_empty()).then(|| previous.to_owned())))
        }
    };
    let tls = match flag(leaves, "cluster.tls.enabled") {
        false => None,
        true => {
            if auth.is_none() {
                bail!(
                    "`cluster.tls.enabled` needs `cluster.auth.enabled`: TLS between replicas authenticates no peer \
                     by itself, the key handshake inside it does"
                );
            }
            let tls = ReplicaTls {
                self_signed: flag(leaves, "cluster.tls.self_signed"),
                cert_file: text(leaves, "cluster.tls.cert_file").to_owned(),
                key_file: text(leaves, "cluster.tls.key_file").to_owned(),
                ca_file: text(leaves, "cluster.tls.ca_file").to_owned(),
            };
            if !tls.self_signed && [&tls.cert_file, &tls.key_file, &tls.ca_file].iter().any(|f| f.is_empty()) {
                bail!(
                    "invalid `cluster.tls` settings: with `self_signed = false`, `cert_file`, `key_file` and `ca_file` must name files"
                );
            }
            Some(tls)
        }
    };
    let allow_unauthenticated_peers = flag(leaves, "cluster.auth.allow_unauthenticated_peers");
    Ok(ReplicaSecurityConfig { auth, tls, allow_unauthenticated_peers })
}

impl ReplicaSecurityConfig {
    /// Refuses a cluster whose replica plane would let in any process that reaches it,
    /// unless the operator chose that in so many words.
    pub fn check_cluster_start(&self) -> anyhow::Result<()> {
        if self.auth.is_none() && !self.allow_unauthenticated_peers {
            bail!(
                "the replica plane has no key: with `cluster.enabled`, set `cluster.auth.enabled = true` and \
                 `cluster.auth.shared_secret` ({KEY_MIN_BYTES} or more random bytes, the same on every node; \
                 IGGY_CLUSTER_AUTH_SHARED_SECRET keeps it out of files), with `cluster.tls` on a network others \
                 share; or, on a private replica network only, `cluster.auth.allow_unauthenticated_peers = true`"
            );
        }
        Ok(())
    }
}
