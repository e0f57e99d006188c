//! The client table: the last committed request of each client and its reply, so a retried
//! request gets the cached reply instead of running twice. It is part of the replicated state
//! (every replica builds it from committed ops) and travels inside checkpoints.

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ClientSession {
    pub(super) request_number: u64,
    /// The op that committed the request; the smallest is evicted first.
    pub(super) op: u64,
    pub(super) reply: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ClientTable {
    sessions: BTreeMap<u128, ClientSession>,
    capacity: usize,
}

/// client id, request number, op, reply length.
const SESSION_HEADER_SIZE: usize = 16 + 8 + 8 + 4;

impl ClientTable {
    pub(super) fn new(capacity: usize) -> Self {
        Self { sessions: BTreeMap::new(), capacity }
    }

    pub(super) fn get(&self, client_id: u128) -> Option<&ClientSession> {
        self.sessions.get(&client_id)
    }

    pub(super) fn len(&self) -> usize {
        self.sessions.len()
    }

    /// Records a committed request; a new client evicts the least recently committed one when
    /// the table is full. Deterministic, so every replica evicts the same client.
    pub(super) fn record(&mut self, client_id: u128, request_number: u64, op: u64, reply: Vec<u8>) {
        if !self.sessions.contains_key(&client_id) && self.sessions.len() >= self.capacity {
            let oldest = self.sessions.iter().min_by_key(|(_, session)| session.op).map(|(client, _)| *client);
            if let Some(oldest) = oldest {
                self.sessions.remove(&oldest);
            }
        }
        self.sessions.insert(client_id, ClientSession { request_number, op, reply });
    }

    /// `[u32 count][per session: client, request, op, u32 reply length, reply][snapshot]`.
    pub(super) fn encode_state(&self, snapshot: &[u8]) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&(self.sessions.len() as u32).to_le_bytes());
        for (client_id, session) in &self.sessions {
            bytes.extend_from_slice(&client_id.to_le_bytes());
            bytes.extend_from_slice(&session.request_number.to_le_bytes());
            bytes.extend_from_slice(&session.op.to_le_bytes());
            bytes.extend_from_slice(&(session.reply.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&session.reply);
        }
        bytes.extend_from_slice(snapshot);
        bytes
    }

    /// The inverse of [`Self::encode_state`]: the table and the state machine's snapshot, or
    /// `None` when the bytes are malformed or hold more sessions than `capacity`.
    pub(super) fn decode_state(bytes: &[u8], capacity: usize) -> Option<(Self, &[u8])> {
        let count = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
        if count > capacity {
            return None;
        }
        let mut table = Self::new(capacity);
        let mut at = 4;
        for _ in 0..count {
            let header = bytes.get(at..at + SESSION_HEADER_SIZE)?;
            let client_id = u128::from_le_bytes(header[..16].try_into().ok()?);
            let request_number = u64::from_le_bytes(header[16..24].try_into().ok()?);
            let op = u64::from_le_bytes(header[24..32].try_into().ok()?);
            let reply_len = u32::from_le_bytes(header[32..36].try_into().ok()?) as usize;
            at += SESSION_HEADER_SIZE;
            let reply = bytes.get(at..at.checked_add(reply_len)?)?.to_vec();
            at += reply_len;
            table.sessions.insert(client_id, ClientSession { request_number, op, reply });
        }
        Some((table, &bytes[at..]))
    }
}
