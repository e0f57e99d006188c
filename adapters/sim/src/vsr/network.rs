//! The simulated network: seeded latency (and so reordering), loss, duplication, and partitions,
//! symmetric or one-way, between any two nodes (replicas and clients alike).

use std::collections::BTreeMap;

use rill_domain::vsr::Message;

use super::Prng;

#[derive(Debug, Clone)]
pub enum Payload {
    Replica(Message),
    Request { client_id: u128, request_number: u64, body: Vec<u8> },
    Reply { request_number: u64, reply: Vec<u8> },
    NotPrimary { request_number: u64, primary: u8 },
}

#[derive(Debug, Clone)]
pub struct Packet {
    pub from: usize,
    pub to: usize,
    pub payload: Payload,
}

#[derive(Debug, Clone, Copy)]
pub struct NetworkFaults {
    pub loss_ppm: u64,
    pub duplicate_ppm: u64,
    pub latency_max_ticks: u64,
}

#[derive(Debug)]
pub struct Network {
    /// Packets by (delivery tick, send sequence): deterministic order, reordered by latency.
    queue: BTreeMap<(u64, u64), Packet>,
    sequence: u64,
    prng: Prng,
    pub faults: NetworkFaults,
    /// `blocked[from][to]`: packets on that link are dropped (at send and at delivery).
    blocked: Vec<Vec<bool>>,
}

impl Network {
    pub fn new(seed: u64, nodes: usize, faults: NetworkFaults) -> Self {
        let prng = Prng::stream(seed, "network");
        Self { queue: BTreeMap::new(), sequence: 0, prng, faults, blocked: vec![vec![false; nodes]; nodes] }
    }

    pub fn send(&mut self, tick: u64, from: usize, to: usize, payload: Payload) {
        if self.blocked[from][to] || self.prng.chance(self.faults.loss_ppm) {
            return;
        }
        let copies = if self.prng.chance(self.faults.duplicate_ppm) { 2 } else { 1 };
        for _ in 0..copies {
            let latency = self.prng.range(1, self.faults.latency_max_ticks);
            self.sequence += 1;
            self.queue.insert((tick + latency, self.sequence), Packet { from, to, payload: payload.clone() });
        }
    }

    /// Packets due at `tick`, minus those whose link was cut while they were in flight.
    pub fn due(&mut self, tick: u64) -> Vec<Packet> {
        let later = self.queue.split_off(&(tick + 1, 0));
        let due = std::mem::replace(&mut self.queue, later);
        due.into_values().filter(|packet| !self.blocked[packet.from][packet.to]).collect()
    }

    /// Splits the nodes into two sides that cannot talk to each other.
    pub fn partition(&mut self, side: &[bool]) {
        for (from, row) in self.blocked.iter_mut().enumerate() {
            for (to, blocked) in row.iter_mut().enumerate() {
                *blocked |= side[from] != side[to];
            }
        }
    }

    /// Cuts one direction of one link only.
    pub fn block(&mut self, from: usize, to: usize) {
        self.blocked[from][to] = true;
    }

    pub fn heal(&mut self) {
        self.blocked.iter_mut().for_each(|row| row.fill(false));
    }

    pub fn is_partitioned(&self) -> bool {
        self.blocked.iter().flatten().any(|blocked| *blocked)
    }
}
