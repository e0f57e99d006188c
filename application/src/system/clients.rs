//! Connected clients, as get_clients and get_me report them.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

use rill_domain::wire::response::ClientInfo;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Transport {
    Tcp = 1,
    Quic = 2,
    Http = 3,
    WebSocket = 4,
}

#[derive(Debug, Default)]
pub struct ClientRegistry {
    next_id: Cell<u32>,
    clients: RefCell<BTreeMap<u32, ClientInfo>>,
}

impl ClientRegistry {
    /// Registers a new connection; returns its client id (starting at 1).
    pub fn connect(&self, address: String, transport: Transport) -> u32 {
        let client_id = self.next_id.get() + 1;
        self.next_id.set(client_id);
        let info = ClientInfo { client_id, user_id: None, transport: transport as u8, address };
        self.clients.borrow_mut().insert(client_id, info);
        client_id
    }

    pub fn disconnect(&self, client_id: u32) {
        self.clients.borrow_mut().remove(&client_id);
    }

    pub fn set_user(&self, client_id: u32, user_id: Option<u32>) {
        if let Some(info) = self.clients.borrow_mut().get_mut(&client_id) {
            info.user_id = user_id;
        }
    }

    pub fn get(&self, client_id: u32) -> Option<ClientInfo> {
        self.clients.borrow().get(&client_id).cloned()
    }

    pub fn all(&self) -> Vec<ClientInfo> {
        self.clients.borrow().values().cloned().collect()
    }

    pub fn count(&self) -> u32 {
        self.clients.borrow().len() as u32
    }
}
