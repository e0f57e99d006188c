//! Connected clients, as get_clients and get_me report them. Shared by every shard; only
//! connect, login, logout and disconnect write it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use rill_domain::answer::ClientInfo;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Transport {
    Tcp = 1,
    Quic = 2,
    Http = 3,
    WebSocket = 4,
}

/// One connection and the shard that serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientEntry {
    pub info: ClientInfo,
    pub shard: u16,
    /// The VSR client id and session of its login, which a data connection names to
    /// attach to it (ATTACH_CONSUMER_SESSION).
    pub session: Option<(u128, u64)>,
}

#[derive(Debug, Default)]
pub struct ClientRegistry {
    next_id: AtomicU32,
    clients: Mutex<BTreeMap<u32, ClientEntry>>,
    /// Live logins by (VSR client id, session), to the connection holding each: an attached
    /// data connection checks its coordinator here on every request.
    logins: Mutex<HashMap<(u128, u64), u32>>,
}

impl ClientRegistry {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, ClientEntry>> {
        // A panic elsewhere cannot leave the map half-updated: every update is one insert
        // or remove, so a poisoned lock still holds consistent data.
        self.clients.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers a new connection served by `shard`; returns its client id (from 1).
    pub fn connect(&self, address: String, transport: Transport, shard: u16) -> u32 {
        let client_id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let protocol = rill_domain::version::Dialect::V11;
        let info = ClientInfo { client_id, user_id: None, transport: transport as u8, address, protocol };
        self.lock().insert(client_id, ClientEntry { info, shard, session: None });
        client_id
    }

    pub fn disconnect(&self, client_id: u32) {
        let removed = self.lock().remove(&client_id);
        if let Some(session) = removed.and_then(|entry| entry.session) {
            self.logins().remove(&session);
        }
    }

    fn logins(&self) -> std::sync::MutexGuard<'_, HashMap<(u128, u64), u32>> {
        self.logins.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records that another shard serves the connection now.
    pub fn set_shard(&self, client_id: u32, shard: u16) {
        if let Some(entry) = self.lock().get_mut(&client_id) {
            entry.shard = shard;
        }
    }

    pub fn set_user(&self, client_id: u32, user_id: Option<u32>) {
        if let Some(entry) = self.lock().get_mut(&client_id) {
            entry.info.user_id = user_id;
        }
    }

    /// Records (or, with `None`, forgets) the login a connection holds.
    pub fn set_session(&self, client_id: u32, session: Option<(u128, u64)>) {
        let mut clients = self.lock();
        let Some(entry) = clients.get_mut(&client_id) else { return };
        let mut logins = self.logins();
        if let Some(old) = entry.session.take() {
            logins.remove(&old);
        }
        if let Some(new) = session {
            logins.insert(new, client_id);
        }
        entry.session = session;
    }

    /// The user of the live login `(client, session)`, if a connection still holds it.
    pub fn session_user(&self, client: u128, session: u64) -> Option<u32> {
        let holder = self.logins().get(&(client, session)).copied()?;
        self.lock().get(&holder).and_then(|entry| entry.info.user_id)
    }

    pub fn get(&self, client_id: u32) -> Option<ClientInfo> {
        self.lock().get(&client_id).map(|e| e.info.clone())
    }

    pub fn entry(&self, client_id: u32) -> Option<ClientEntry> {
        self.lock().get(&client_id).cloned()
    }

    pub fn all(&self) -> Vec<ClientInfo> {
        self.lock().values().map(|e| e.info.clone()).collect()
    }

    pub fn count(&self) -> u32 {
        self.lock().len() as u32
    }

    /// Records the protocol generation a connection's login chose.
    pub fn set_protocol(&self, client_id: u32, protocol: rill_domain::version::Dialect) {
        if let Some(entry) = self.lock().get_mut(&client_id) {
            entry.info.protocol = protocol;
        }
    }

    /// How many connected clients speak each protocol generation, 0.11 first.
    pub fn count_by_protocol(&self) -> [(rill_domain::version::Dialect, u32); 2] {
        use rill_domain::version::Dialect;
        let clients = self.lock();
        let count = |dialect| clients.values().filter(|entry| entry.info.protocol == dialect).count() as u32;
        [(Dialect::V11, count(Dialect::V11)), (Dialect::V12, count(Dialect::V12))]
    }
}
