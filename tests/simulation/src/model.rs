//! The simulated state machines. `Model` is what a cluster of the simulator replicates: its
//! initial state, the workload's requests and the checks beyond "replies match a sequential
//! replay". `Kv` is a map of eight counters: a body names a key and a delta; the reply is the
//! op and the key's new value, so every reply is distinct and checkable against a sequential
//! replay of the committed ops. The partition group's model is in `partition_model.rs`.

use std::collections::BTreeMap;

use rill_adapter_sim::vsr::Prng;
use rill_domain::vsr::{Entry, InvalidSnapshot, StateMachine};

pub trait Model: StateMachine + Clone {
    fn initial() -> Self;
    /// The workload's next request: its operation byte and body.
    fn request(prng: &mut Prng) -> (u8, Vec<u8>);
    /// Checks once the cluster converged: `replay` applied every committed op in order;
    /// `replies` are what clients received, by (client, request number).
    fn check_final(_replay: &Self, _committed: &BTreeMap<u64, Entry>, _replies: &[(u128, u64, Vec<u8>)]) {}
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Kv {
    values: BTreeMap<u8, u64>,
    /// A scenario's broken disk: this replica cannot apply this op (it is not part of the
    /// state, and a restart forgets it).
    pub cannot_apply: Option<u64>,
    unapplied: Option<&'static str>,
}

pub fn body(key: u8, delta: u64) -> Vec<u8> {
    let mut body = vec![key];
    body.extend_from_slice(&delta.to_le_bytes());
    body
}

impl Model for Kv {
    fn initial() -> Self {
        Self::default()
    }

    fn request(prng: &mut Prng) -> (u8, Vec<u8>) {
        let key = prng.below(8) as u8;
        (0, body(key, prng.range(1, 1000)))
    }
}

impl StateMachine for Kv {
    fn apply(&mut self, op: u64, _timestamp: u64, _operation: u8, body: &[u8]) -> Vec<u8> {
        if self.cannot_apply == Some(op) {
            self.unapplied = Some("the scenario's state machine cannot apply this op");
            return Vec::new();
        }
        let (key, delta) = match body {
            [key, delta @ ..] if delta.len() == 8 => (*key, u64::from_le_bytes(delta.try_into().expect("eight"))),
            _ => (0, 0),
        };
        let value = self.values.entry(key).or_default();
        *value = value.wrapping_add(delta);
        [op.to_le_bytes(), value.to_le_bytes()].concat()
    }

    fn snapshot(&self) -> Vec<u8> {
        self.values.iter().flat_map(|(key, value)| [&[*key][..], &value.to_le_bytes()].concat()).collect()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), InvalidSnapshot> {
        if !snapshot.len().is_multiple_of(9) {
            return Err(InvalidSnapshot);
        }
        let chunks = snapshot.chunks(9);
        self.values =
            chunks.map(|chunk| (chunk[0], u64::from_le_bytes(chunk[1..].try_into().expect("eight")))).collect();
        Ok(())
    }

    fn unapplied(&self) -> Option<&'static str> {
        self.unapplied
    }

    fn digest(&self) -> u64 {
        self.values.iter().fold(0xCBF2_9CE4_8422_2325, |hash, (key, value)| {
            (hash ^ u64::from(*key)).wrapping_mul(0x0100_0000_01B3).rotate_left(7) ^ value
        })
    }
}
