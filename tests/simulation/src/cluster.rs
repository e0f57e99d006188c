//! The simulated cluster: replicas, their storage, the network and the clients, stepped one tick
//! at a time, with the safety checks applied as effects come out and the final checks once the
//! faults have healed and the cluster has converged.

use std::collections::{BTreeMap, BTreeSet};

use rill_adapter_sim::vsr::{Network, NetworkFaults, Packet, Payload, Prng, ReplicaStorage, StorageWrite};
use rill_domain::vsr::{Effect, Entry, Message, Options, Replica, Status};

use crate::model::{Kv, Model, body};

/// Ticks a client waits for a reply before it tries the next replica.
const CLIENT_TIMEOUT_TICKS: u64 = 40;

#[derive(Debug, Clone, Copy)]
pub struct Faults {
    pub network: NetworkFaults,
    /// Per-tick chance of a new partition while none is in force.
    pub partition_ppm: u64,
    /// Per-tick chance of a crash (within the budget of `f` unavailable replicas).
    pub crash_ppm: u64,
    /// Per-tick chance that every replica crashes at once (a power loss), beyond any budget.
    pub cluster_crash_ppm: u64,
    pub torn_ppm: u64,
    pub corrupt_ppm: u64,
    /// Per completed journal write, the chance that it lands on an earlier frame instead.
    pub misdirect_ppm: u64,
    pub storage_delay_max_ticks: u64,
}

#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub seed: u64,
    pub replica_count: u8,
    pub clients: usize,
    pub options: Options,
    pub faults: Faults,
    /// Per-tick, per-idle-client chance of a new request while the workload runs.
    pub request_ppm: u64,
    /// A backup forwards a client's request to the primary (`Message::Request`), as a
    /// partition group's node does, instead of redirecting the client.
    pub forward: bool,
}

struct Client {
    id: u128,
    request_number: u64,
    in_flight: Option<(Vec<u8>, u64)>,
    target: u8,
}

/// One cluster of replicas of the model `M` (the counters `Kv`, or a partition group).
pub struct Sim<M: Model = Kv> {
    pub config: Config,
    pub tick: u64,
    pub replicas: Vec<Option<Replica<M>>>,
    pub storage: Vec<ReplicaStorage>,
    pub network: Network,
    down_until: Vec<u64>,
    lifetimes: Vec<u64>,
    clients: Vec<Client>,
    faults_prng: Prng,
    workload_prng: Prng,
    partition_until: u64,
    /// A misdirected write a scenario scripted, per replica: the frame the next write lands on.
    scripted_misdirect: Vec<Option<usize>>,
    /// Every op some replica applied, with its entry: all replicas must agree on it.
    pub committed: BTreeMap<u64, Entry>,
    /// Per replica, the last op applied and the highest view seen in the current lifetime.
    last_applied: Vec<u64>,
    max_view: Vec<u32>,
    /// Every reply a client received: (client, request number, reply).
    replies: Vec<(u128, u64, Vec<u8>)>,
    pub trace: u64,
    pub crashes: u64,
    pub cluster_crashes: u64,
    pub corruptions: u64,
    pub torn_writes: u64,
    pub misdirects: u64,
    /// Replicas a scenario breaks on purpose; any other replica that halts fails the seed.
    pub may_halt: Vec<bool>,
}

impl<M: Model> Sim<M> {
    pub fn new(config: Config) -> Self {
        let count = usize::from(config.replica_count);
        let seed = config.seed;
        let replicas = (0..config.replica_count)
            .map(|r| Some(Replica::new(r, config.replica_count, seed, config.options, M::initial())));
        let storage =
            (0..config.replica_count).map(|r| ReplicaStorage::new(seed, r, config.faults.storage_delay_max_ticks));
        let clients =
            (0..config.clients).map(|i| Client { id: 1000 + i as u128, request_number: 0, in_flight: None, target: 0 });
        Self {
            config,
            tick: 0,
            replicas: replicas.collect(),
            storage: storage.collect(),
            network: Network::new(seed, count + config.clients, config.faults.network),
            down_until: vec![0; count],
            lifetimes: vec![0; count],
            clients: clients.collect(),
            faults_prng: Prng::stream(seed, "faults"),
            workload_prng: Prng::stream(seed, "workload"),
            partition_until: 0,
            scripted_misdirect: vec![None; count],
            committed: BTreeMap::new(),
            last_applied: vec![0; count],
            max_view: vec![0; count],
            replies: Vec::new(),
            trace: seed,
            crashes: 0,
            cluster_crashes: 0,
            corruptions: 0,
            torn_writes: 0,
            misdirects: 0,
            may_halt: vec![false; count],
        }
    }

    fn trace(&mut self, values: &[u64]) {
        for value in values {
            self.trace = (self.trace ^ value).wrapping_mul(0x0000_0100_0000_01B3).rotate_left(17);
        }
    }

    fn now(&self, replica: usize) -> u64 {
        // Replica clocks disagree a little; only the primary's matters (for timestamps).
        self.tick * 10 + replica as u64 * 3
    }

    /// One tick: faults, restarts, completed writes, deliveries, replica ticks, clients.
    pub fn step(&mut self, random_faults: bool, workload: bool) {
        self.tick += 1;
        if random_faults {
            self.random_faults();
        }
        for replica in 0..self.replicas.len() {
            if self.replicas[replica].is_none() && self.down_until[replica] <= self.tick {
                self.restart(replica);
            }
        }
        for replica in 0..self.replicas.len() {
            if self.replicas[replica].is_some() {
                let misdirect = self.draw_misdirect(replica);
                let done = self.storage[replica].complete(self.tick, misdirect);
                for write in done {
                    self.completed(replica, write);
                }
            }
        }
        for packet in self.network.due(self.tick) {
            self.deliver(packet);
        }
        for replica in 0..self.replicas.len() {
            let now = self.now(replica);
            let mut effects = Vec::new();
            let Some(node) = self.replicas[replica].as_mut() else { continue };
            node.tick(now, &mut effects);
            self.absorb(replica, effects);
        }
        self.clients_step(workload);
        self.check_no_commit_lost();
    }

    /// When every replica is up and normal in one view, that view is the latest, so its primary
    /// must hold every op any replica applied: a shorter or different log lost a committed op.
    fn check_no_commit_lost(&self) {
        let Some(Some(first)) = self.replicas.first() else { return };
        let view = first.view();
        let all_normal = self
            .replicas
            .iter()
            .all(|node| node.as_ref().is_some_and(|n| n.status() == Status::Normal && n.view() == view));
        let Some((&top, _)) = self.committed.last_key_value() else { return };
        if !all_normal {
            return;
        }
        let primary = self.replicas[first.primary_index(view) as usize].as_ref().expect("all up");
        assert!(
            primary.op() >= top,
            "committed ops up to {top} lost: the primary of view {view} ends at op {}",
            primary.op()
        );
        for (op, entry) in self.committed.range(primary.commit() + 1..) {
            if let Some(held) = primary.log_entry(*op) {
                assert_eq!(held.checksum, entry.checksum, "committed op {op} replaced in view {view}");
            }
        }
    }

    fn completed(&mut self, replica: usize, write: StorageWrite) {
        let mut effects = Vec::new();
        let Some(node) = self.replicas[replica].as_mut() else { return };
        match write {
            StorageWrite::Entry(entry) => node.on_prepare_persisted(entry.op, entry.checksum, &mut effects),
            StorageWrite::View(superblock) => node.on_view_persisted(superblock.view, &mut effects),
        }
        self.absorb(replica, effects);
    }

    fn deliver(&mut self, packet: Packet) {
        let replica_count = self.replicas.len();
        if packet.to >= replica_count {
            self.client_receive(packet.to - replica_count, packet.payload);
            return;
        }
        let now = self.now(packet.to);
        if let Payload::Replica(message) = &packet.payload {
            self.trace(&[self.tick, packet.from as u64, packet.to as u64, discriminant(message)]);
        }
        let mut effects = Vec::new();
        let Some(node) = self.replicas[packet.to].as_mut() else { return };
        match packet.payload {
            Payload::Replica(message) => node.on_message(now, message, &mut effects),
            // A request's first byte is its operation (see `submit_request`).
            Payload::Request { client_id, request_number, body } => {
                let (operation, rest) = body.split_first().map_or((0, &[][..]), |(op, rest)| (*op, rest));
                let (operation, body) = (operation, rest.to_vec());
                if self.config.forward && !node.is_primary() && node.status() == Status::Normal {
                    let primary = node.primary_index(node.view());
                    let message = Message::Request { client_id, request_number, operation, body };
                    self.network.send(self.tick, packet.to, usize::from(primary), Payload::Replica(message));
                    return;
                }
                node.on_request(now, client_id, request_number, operation, body, &mut effects)
            }
            Payload::Reply { .. } | Payload::NotPrimary { .. } => unreachable!("replicas get no replies"),
        }
        self.absorb(packet.to, effects);
    }

    /// Carries out a replica's effects and checks what they reveal.
    fn absorb(&mut self, replica: usize, effects: Vec<Effect>) {
        let node = self.replicas[replica].as_ref().expect("only live replicas emit effects");
        if let Some(reason) = node.halted() {
            assert!(self.may_halt[replica], "replica {replica} halted: {reason}");
        }
        assert!(node.view() >= self.max_view[replica], "replica {replica}'s view went back");
        self.max_view[replica] = node.view();
        let replica_count = self.replicas.len();
        for effect in effects {
            match effect {
                Effect::Send { to, message } => {
                    self.network.send(self.tick, replica, usize::from(to), Payload::Replica(message))
                }
                Effect::Persist { entry } => self.storage[replica].submit(self.tick, StorageWrite::Entry(entry)),
                Effect::PersistView { superblock } => {
                    self.storage[replica].submit(self.tick, StorageWrite::View(superblock))
                }
                Effect::Commit { op, entry } => self.check_commit(replica, op, entry),
                Effect::Reply { client_id, request_number, reply } => {
                    let to = replica_count + (client_id - 1000) as usize;
                    self.network.send(self.tick, replica, to, Payload::Reply { request_number, reply });
                }
                Effect::NotPrimary { client_id, request_number, primary } => {
                    let to = replica_count + (client_id - 1000) as usize;
                    self.network.send(self.tick, replica, to, Payload::NotPrimary { request_number, primary });
                }
                Effect::Checkpoint { checkpoint, .. } => self.storage[replica].checkpoint = Some(checkpoint),
            }
        }
    }

    /// Every replica applies the same entry at each op, each op once, in increasing order.
    fn check_commit(&mut self, replica: usize, op: u64, entry: Entry) {
        assert!(op > self.last_applied[replica], "replica {replica} applied op {op} out of order");
        self.last_applied[replica] = op;
        self.trace(&[self.tick, replica as u64, op, entry.checksum as u64]);
        match self.committed.get(&op) {
            Some(agreed) => {
                assert_eq!(agreed.checksum, entry.checksum, "replica {replica} applied a different op {op}")
            }
            None => {
                self.committed.insert(op, entry);
            }
        }
    }

    pub fn crash(&mut self, replica: usize, down_ticks: u64) {
        self.replicas[replica] = None;
        self.torn_writes += u64::from(self.storage[replica].crash(self.config.faults.torn_ppm));
        self.down_until[replica] = self.tick + down_ticks;
        self.crashes += 1;
        self.trace(&[self.tick, 0xC0, replica as u64]);
    }

    /// Power loss: every live replica crashes at once, losing its writes in flight (the last may
    /// tear), and comes back after its own `down_ticks`.
    pub fn crash_cluster(&mut self, mut down_ticks: impl FnMut(&mut Prng) -> u64) {
        for replica in 0..self.replicas.len() {
            if self.replicas[replica].is_some() {
                let down = down_ticks(&mut self.faults_prng);
                self.crash(replica, down);
            }
        }
        self.cluster_crashes += 1;
    }

    /// Whether replica `other` holds this exact entry on disk and, normal, in memory.
    fn holds_intact(&self, other: usize, op: u64, checksum: u128) -> bool {
        self.storage[other].holds(op, checksum)
            && self.replicas[other]
                .as_ref()
                .is_some_and(|node| node.status() == Status::Normal && node.has_entry(op, checksum))
    }

    /// A storage fault may damage the journal of `replica` only while fewer than `f` other
    /// journals are damaged: after a power loss, only replicas with whole journals can vote, and
    /// a quorum of them is needed.
    fn may_damage_journal(&self, replica: usize) -> bool {
        let f = (self.replicas.len() - 1) / 2;
        let damaged_elsewhere = (0..self.replicas.len()).filter(|&r| r != replica && self.storage[r].damaged());
        damaged_elsewhere.count() < f
    }

    /// Whether a write on `replica` is misdirected now, and onto which frame. The frame it
    /// destroys must hold nothing (a torn tail) or an entry another normal replica holds on disk
    /// and in memory, so that no entry loses its last copy and the replica can learn it back.
    /// That entry must also lie at or below the head the durable superblock names (or the
    /// checkpoint): a restart then finds the chain broken and declares the journal damaged. A
    /// hole above the head cannot be told from writes lost in flight (see the limits in
    /// `docs/vsr.md`), and the replica would vote with a log that lacks what it acknowledged.
    fn draw_misdirect(&mut self, replica: usize) -> Option<usize> {
        if self.storage[replica].entry_write_due(self.tick)
            && let Some(victim) = self.scripted_misdirect[replica].take()
        {
            self.misdirects += 1;
            return Some(victim);
        }
        let (victim, lost) = self.storage[replica].draw_misdirect(self.tick, self.config.faults.misdirect_ppm)?;
        let others = (0..self.replicas.len()).filter(|&other| other != replica);
        let storage = &self.storage[replica];
        let seen = storage.superblock().head_op.max(storage.checkpoint.as_ref().map_or(0, |c| c.op));
        let spare = |(op, checksum)| op <= seen && others.clone().any(|other| self.holds_intact(other, op, checksum));
        if !self.may_damage_journal(replica) || !lost.is_none_or(spare) {
            return None;
        }
        self.misdirects += 1;
        self.trace(&[self.tick, 0x3D, replica as u64, victim as u64]);
        Some(victim)
    }

    /// Scripts a misdirected write on `replica` (whatever the budget says): its next journal
    /// write to complete lands on the frame of its copy of committed op `op`.
    pub fn misdirect(&mut self, replica: usize, op: u64) {
        let checksum = self.committed[&op].checksum;
        let victim = self.storage[replica].frame_of(op, checksum).expect("the replica holds the op");
        self.scripted_misdirect[replica] = Some(victim);
    }

    /// Reopens a replica from its storage; bit flips only hit entries another normal replica
    /// holds in memory and on disk, so no entry loses its last copy and a damaged replica (which
    /// waits for a normal peer's log) can recover, and only while fewer than `f` other journals
    /// are damaged.
    pub fn restart(&mut self, replica: usize) {
        let corrupt_ppm = if self.may_damage_journal(replica) { self.config.faults.corrupt_ppm } else { 0 };
        let held_elsewhere: BTreeSet<(u64, u128)> = self.storage[replica]
            .keys()
            .into_iter()
            .filter(|&(op, checksum)| {
                (0..self.replicas.len()).any(|o| o != replica && self.holds_intact(o, op, checksum))
            })
            .collect();
        let may_corrupt = |op: u64, checksum: u128| held_elsewhere.contains(&(op, checksum));
        let (durable, corrupted) = self.storage[replica].read(corrupt_ppm, may_corrupt);
        self.corruptions += corrupted as u64;
        self.lifetimes[replica] += 1;
        let seed = self.config.seed ^ (self.lifetimes[replica] << 32);
        let (count, options) = (self.config.replica_count, self.config.options);
        // A new lifetime applies again from its checkpoint.
        self.last_applied[replica] = durable.checkpoint.as_ref().map_or(0, |checkpoint| checkpoint.op);
        let mut effects = Vec::new();
        let node = Replica::open(replica as u8, count, seed, options, M::initial(), durable, &mut effects);
        self.max_view[replica] = node.view();
        self.replicas[replica] = Some(node);
        self.trace(&[self.tick, 0x5E, replica as u64]);
        self.absorb(replica, effects);
    }

    /// Replicas down, recovering, or with a journal declared damaged (which could not vote after
    /// a power loss): random crashes keep this within `f`.
    fn unavailable(&self) -> usize {
        let recovering = |node: &Option<Replica<M>>| node.as_ref().is_none_or(|n| n.status() == Status::Recovering);
        let damaged = |replica: usize| self.storage[replica].superblock().damaged;
        (0..self.replicas.len()).filter(|&replica| recovering(&self.replicas[replica]) || damaged(replica)).count()
    }

    fn random_faults(&mut self) {
        let faults = self.config.faults;
        let replica_count = self.replicas.len();
        let f = (replica_count - 1) / 2;
        if self.faults_prng.chance(faults.cluster_crash_ppm) {
            self.crash_cluster(|prng| prng.range(1, 150));
        }
        if (replica_count == 1 || self.unavailable() < f) && self.faults_prng.chance(faults.crash_ppm) {
            let replica = self.faults_prng.below(replica_count as u64) as usize;
            if self.replicas[replica].is_some() {
                let down = self.faults_prng.range(5, 150);
                self.crash(replica, down);
            }
        }
        if self.network.is_partitioned() && self.tick >= self.partition_until {
            self.network.heal();
        }
        if !self.network.is_partitioned() && self.faults_prng.chance(faults.partition_ppm) {
            let nodes = replica_count + self.clients.len();
            if self.faults_prng.chance(500_000) {
                let side: Vec<bool> = (0..nodes).map(|_| self.faults_prng.chance(500_000)).collect();
                self.network.partition(&side);
            } else {
                for _ in 0..self.faults_prng.range(1, 3) {
                    let from = self.faults_prng.below(replica_count as u64) as usize;
                    let to = self.faults_prng.below(nodes as u64) as usize;
                    self.network.block(from, to);
                }
            }
            self.partition_until = self.tick + self.faults_prng.range(20, 300);
        }
    }

    /// Faults stop: partitions heal, the network stops losing and duplicating, everyone restarts.
    pub fn heal(&mut self) {
        self.network.heal();
        self.network.faults.loss_ppm = 0;
        self.network.faults.duplicate_ppm = 0;
        for replica in 0..self.replicas.len() {
            if self.replicas[replica].is_none() {
                self.restart(replica);
            }
        }
    }

    /// Sends a request from `client`: `operation`, then the body.
    pub fn submit_request(&mut self, client: usize, operation: u8, body: &[u8]) {
        let replica_count = self.replicas.len();
        let state = &mut self.clients[client];
        assert!(state.in_flight.is_none(), "one request per client at a time");
        state.request_number += 1;
        let request = [&[operation][..], body].concat();
        state.in_flight = Some((request.clone(), self.tick));
        let payload = Payload::Request { client_id: state.id, request_number: state.request_number, body: request };
        let target = usize::from(state.target);
        self.network.send(self.tick, replica_count + client, target, payload);
    }

    fn clients_step(&mut self, workload: bool) {
        let replica_count = self.replicas.len();
        for client in 0..self.clients.len() {
            let state = &mut self.clients[client];
            match &mut state.in_flight {
                Some((body, sent)) if self.tick - *sent >= CLIENT_TIMEOUT_TICKS => {
                    *sent = self.tick;
                    state.target = (state.target + 1) % replica_count as u8;
                    let payload = Payload::Request {
                        client_id: state.id,
                        request_number: state.request_number,
                        body: body.clone(),
                    };
                    self.network.send(self.tick, replica_count + client, usize::from(state.target), payload);
                }
                Some(_) => {}
                None if workload && self.workload_prng.chance(self.config.request_ppm) => {
                    let (operation, body) = M::request(&mut self.workload_prng);
                    self.submit_request(client, operation, &body);
                }
                None => {}
            }
        }
    }

    fn client_receive(&mut self, client: usize, payload: Payload) {
        let replica_count = self.replicas.len();
        let state = &mut self.clients[client];
        match payload {
            Payload::Reply { request_number, reply } => {
                self.replies.push((state.id, request_number, reply));
                if request_number == state.request_number {
                    state.in_flight = None;
                }
            }
            Payload::NotPrimary { request_number, primary } => {
                if request_number != state.request_number || primary == state.target {
                    return;
                }
                state.target = primary;
                if let Some((body, sent)) = &mut state.in_flight {
                    *sent = self.tick;
                    let payload = Payload::Request { client_id: state.id, request_number, body: body.clone() };
                    self.network.send(self.tick, replica_count + client, usize::from(primary), payload);
                }
            }
            Payload::Request { .. } | Payload::Replica(_) => unreachable!("clients get replies only"),
        }
    }

    pub fn clients_idle(&self) -> bool {
        self.clients.iter().all(|client| client.in_flight.is_none())
    }

    /// Everyone up, normal, in one view, with the same head, and everything applied.
    pub fn converged(&self) -> bool {
        let Some(Some(first)) = self.replicas.first() else { return false };
        let top = self.committed.keys().next_back().copied().unwrap_or(0);
        self.clients_idle()
            && self.replicas.iter().all(|node| {
                node.as_ref().is_some_and(|node| {
                    node.status() == Status::Normal
                        && node.view() == first.view()
                        && node.op() == top
                        && node.commit() == top
                        && node.commit_max() == top
                })
            })
    }

    /// One line per replica and the clients, for a failure message.
    pub fn describe(&self) -> String {
        let mut lines: Vec<String> = self
            .replicas
            .iter()
            .enumerate()
            .map(|(replica, node)| match node {
                Some(node) => format!(
                    "replica {replica}: {:?} view {} log_view {} op {} commit {} commit_max {} primary {}",
                    node.status(),
                    node.view(),
                    node.log_view(),
                    node.op(),
                    node.commit(),
                    node.commit_max(),
                    node.is_primary()
                ),
                None => format!("replica {replica}: down"),
            })
            .collect();
        let busy = self.clients.iter().filter(|client| client.in_flight.is_some());
        lines.push(format!(
            "clients waiting: {:?}",
            busy.map(|c| (c.id, c.request_number, c.target)).collect::<Vec<_>>()
        ));
        lines.push(format!("top committed op: {:?}", self.committed.keys().next_back()));
        lines.join("\n")
    }

    /// After convergence: nothing committed was lost or changed, replicas agree with each other
    /// and with a sequential replay, and every reply a client saw is the replay's reply.
    pub fn check_final(&self) {
        let top = self.committed.keys().next_back().copied().unwrap_or(0);
        assert!(self.committed.keys().copied().eq(1..=top), "a committed op is missing");
        let mut model = M::initial();
        let mut expected = BTreeMap::new();
        for (op, entry) in &self.committed {
            let reply = model.apply(*op, entry.timestamp, entry.operation, &entry.body);
            let key = (entry.client_id, entry.request_number);
            assert!(expected.insert(key, reply).is_none(), "request {key:?} was executed twice");
        }
        for node in self.replicas.iter().flatten() {
            assert_eq!(node.state_machine().digest(), model.digest(), "replica {} diverged", node.replica());
            for (op, entry) in self.committed.range(node.commit().saturating_sub(32) + 1..) {
                if let Some(held) = node.log_entry(*op) {
                    assert_eq!(held.checksum, entry.checksum, "replica {} holds another op {op}", node.replica());
                }
            }
        }
        for (client_id, request_number, reply) in &self.replies {
            let replayed = expected.get(&(*client_id, *request_number));
            assert_eq!(replayed, Some(reply), "client {client_id} request {request_number}: reply not linearizable");
        }
        M::check_final(&model, &self.committed, &self.replies);
    }
}

impl Sim<Kv> {
    /// Adds `delta` to counter `key`, from `client`.
    pub fn submit(&mut self, client: usize, key: u8, delta: u64) {
        self.submit_request(client, 0, &body(key, delta));
    }
}

fn discriminant(message: &Message) -> u64 {
    match message {
        Message::Prepare { entry, .. } => 1 ^ (entry.op << 8),
        Message::PrepareOk { op, .. } => 2 ^ (op << 8),
        Message::Commit { commit, .. } => 3 ^ (commit << 8),
        Message::StartViewChange { view, .. } => 4 ^ (u64::from(*view) << 8),
        Message::DoViewChange { view, .. } => 5 ^ (u64::from(*view) << 8),
        Message::StartView { view, .. } => 6 ^ (u64::from(*view) << 8),
        Message::RequestStartView { .. } => 7,
        Message::Recovery { .. } => 8,
        Message::RecoveryResponse { .. } => 9,
        Message::RequestPrepare { op, .. } => 10 ^ (op << 8),
        Message::Repair { .. } => 11,
        Message::GetState { .. } => 12,
        Message::NewState { .. } => 13,
        Message::Request { request_number, .. } => 14 ^ (request_number << 8),
        Message::Reply { request_number, .. } => 15 ^ (request_number << 8),
        Message::RequestBatches { from_offset, .. } => 16 ^ (from_offset << 8),
        Message::Batches { from_offset, .. } => 17 ^ (from_offset << 8),
    }
}
