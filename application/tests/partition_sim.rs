//! Seeded simulation of a partition's write path on simulated storage: appends, flushes,
//! consumer-offset stores, segment rolls, retention, polls, graceful restarts, power loss
//! (unsynced bytes lost, a torn tail kept), purges and failing storage calls, with the
//! segments retention deletes kept as the partition's spare logs that its later rolls
//! write over (taken up again after each restart), in one thread and
//! replayable from its seed. Checks after every restart: every message acknowledged on a
//! persisted topic is present, byte-exact, at its offset; an offset once acknowledged never
//! holds anything else; nothing appears that was never sent; a stored (fsynced) consumer
//! offset never goes back. `SIM_PARTITION_SEEDS` sets how many seeds run (default 2,000),
//! `SIM_PARTITION_SEED` replays one; `just sim-partition` runs more in release.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use common::{Rng, messages, pool};
use futures_executor::block_on;
use rill_adapter_sim::SimStorage;
use rill_application::partition::{
    ConsumerKey, PartitionLog, PartitionSettings, REPLY_ROOM, SpareBudget, SpareLogCounters, remove_detached,
};
use rill_domain::batch;

/// What the clients were told, and what they sent.
#[derive(Default)]
struct Model {
    /// Offset -> payload of every acknowledged message still above the first offset.
    acked: BTreeMap<u64, String>,
    /// Payloads of sends that failed: they may or may not be stored.
    uncertain: BTreeSet<String>,
    /// The consumer offset last stored with fsync.
    stored_offset: Option<u64>,
}

struct Run {
    seed: u64,
    rng: Rng,
    storage: SimStorage,
    settings: PartitionSettings,
    log: PartitionLog<SimStorage>,
    model: Model,
    step: u64,
    /// Calls from here on fail until `heal_at_step`.
    heal_at_step: Option<u64>,
    /// Power losses so far.
    crashes: u64,
    /// When the partition is purged: a generator of its own, so the other draws stay those
    /// of a run without purges.
    purges: Rng,
    /// The budget of the logs of deleted segments the partition keeps to write over.
    spares: SpareBudget,
}

const DIR: &str = "/p";

thread_local! {
    /// The spare-log counters of every run on this thread.
    static SPARE_COUNTERS: Arc<SpareLogCounters> = Arc::default();
}
const CONSUMER: ConsumerKey = ConsumerKey::Consumer(1);

/// The spare budget a server starts with: 64 KiB, the simulation's small logs kept.
fn new_spares() -> SpareBudget {
    SpareBudget::new(64 << 10, SPARE_COUNTERS.with(Arc::clone)).keeping_from(1)
}

impl Run {
    fn new(seed: u64) -> Self {
        let mut rng = Rng::seeded(seed);
        let settings = PartitionSettings {
            segment_size_bytes: 1024 + rng.below(8 * 1024),
            messages_required_to_save: 1 + rng.below(20) as u32,
            size_required_to_save_bytes: 1 << 20,
            enforce_fsync: rng.chance(75),
            consumer_offset_fsync: true,
            validate_checksum: true,
            deduplication: None,
            direct_log: rng.chance(75),
            producer_expiry_us: 3_600_000_000,
        };
        let storage = SimStorage::new();
        let spares = new_spares();
        let log = block_on(PartitionLog::open_with(&storage, Path::new(DIR), 0, settings, true, Some(spares.clone())))
            .expect("a new partition");
        let purges = Rng::seeded(seed ^ 0x9e7);
        let model = Model::default();
        Self { seed, rng, storage, settings, log, model, step: 0, heal_at_step: None, crashes: 0, purges, spares }
    }

    fn fail(&self, what: String) -> ! {
        panic!("partition simulation seed {} (SIM_PARTITION_SEED={}) step {}: {what}", self.seed, self.seed, self.step)
    }

    fn append(&mut self) {
        let count = 1 + self.rng.below(5);
        let payloads: Vec<String> = (0..count).map(|i| format!("s{}-{}-m{i}", self.seed, self.step)).collect();
        let frames: Vec<(u128, &[u8], &[u8])> =
            payloads.iter().enumerate().map(|(i, p)| (i as u128 + 1, p.as_bytes(), &b""[..])).collect();
        let built = batch::build(&frames, 1);
        let result = block_on(self.log.append(&self.storage, built.into(), 1000 + self.step));
        trace(|| format!("  append {count}: {:?}", result.as_ref().map(|a| a.base_offset)));
        match result {
            Ok(appended) => {
                for (i, payload) in payloads.into_iter().enumerate() {
                    let offset = appended.base_offset + i as u64;
                    if let Some(before) = self.model.acked.insert(offset, payload) {
                        self.fail(format!("offset {offset} acknowledged twice (first for {before})"));
                    }
                }
            }
            Err(_) => self.model.uncertain.extend(payloads),
        }
    }

    fn store_offset(&mut self) {
        let next = self.log.next_offset();
        let at_least = self.model.stored_offset.unwrap_or(0);
        if next == 0 || at_least >= next {
            return;
        }
        let offset = at_least + self.rng.below(next - at_least);
        if block_on(self.log.offsets.store(&self.storage, CONSUMER, offset, true)).is_ok() {
            self.model.stored_offset = Some(offset);
        }
    }

    fn retention(&mut self) {
        if self.log.segments_count() < 2 {
            return;
        }
        if let Ok(mut detached) = block_on(self.log.detach_oldest(&self.storage, 1)) {
            // As a shard's pass: readied off the lock, kept under it.
            block_on(detached.prepare_spares(&self.storage));
            block_on(self.log.keep_spares(&self.storage, &mut detached));
            let _ = block_on(remove_detached(&self.storage, &detached));
            let first = self.log.first_offset();
            self.model.acked.retain(|&offset, _| offset >= first);
        }
    }

    /// Empties the partition. A purge that fails is either undone whole (its files were
    /// not removed) or, once the fault heals, finished by the next write: after it nothing
    /// sent before may be served, and offsets start again at 0.
    fn purge(&mut self) {
        let result = block_on(self.log.purge(&self.storage));
        trace(|| format!("  purge: {result:?}, pending {}", self.log.purge_pending()));
        if result.is_err() {
            self.storage.heal();
            self.heal_at_step = None;
            if !self.log.purge_pending() {
                return;
            }
            let finished = block_on(self.log.flush(&self.storage, false));
            if finished.is_err() || self.log.purge_pending() || self.log.next_offset() != 0 {
                self.fail(format!("a half-done purge was not finished by the next write: {finished:?}"));
            }
        }
        self.model = Model::default();
    }

    /// Everything from the first offset, checked against the model; the offsets read.
    fn read_all(&self, durable: bool) -> Vec<(u64, String)> {
        let mut out: Vec<(u64, String)> = Vec::new();
        let first = self.log.first_offset();
        loop {
            let next = out.last().map_or(first, |(offset, _)| offset + 1);
            let polled = block_on(self.log.poll(next, 200, pool())).unwrap_or_else(|e| self.fail(format!("poll: {e}")));
            if let Some(damaged) = polled.damaged {
                self.fail(format!("damage reported on a clean disk: {damaged:?}"));
            }
            let read = messages(&polled.frame[REPLY_ROOM..]);
            if read.is_empty() {
                break;
            }
            out.extend(read);
        }
        for (index, (offset, payload)) in out.iter().enumerate() {
            if *offset != first + index as u64 {
                self.fail(format!("offset {offset} at position {index} from {first}: a gap or a repeat"));
            }
            match self.model.acked.get(offset) {
                Some(acked) if acked != payload => {
                    self.fail(format!("offset {offset} holds {payload}, acknowledged {acked}"))
                }
                None if !self.model.uncertain.contains(payload) => {
                    self.fail(format!("offset {offset} holds {payload}, never acknowledged nor sent in doubt"))
                }
                _ => {}
            }
        }
        if durable {
            let present: BTreeSet<u64> = out.iter().map(|(offset, _)| *offset).collect();
            if let Some(lost) = self.model.acked.keys().find(|offset| !present.contains(offset)) {
                self.fail(format!("acknowledged offset {lost} lost ({} read from {first})", out.len()));
            }
        }
        out
    }

    /// Reopens the partition (after a graceful stop, or a power loss) and checks it.
    fn reopen(&mut self, clean: bool) {
        // As a partition at start: the spares the run before kept are taken up again.
        let spares = Some(self.spares.clone());
        let log = block_on(PartitionLog::open_with(&self.storage, Path::new(DIR), 0, self.settings, clean, spares));
        self.log = log.unwrap_or_else(|e| self.fail(format!("reopen (clean {clean}): {e}")));
        // A graceful stop syncs everything; a power loss keeps what a persisted topic synced.
        let durable = clean || self.settings.enforce_fsync;
        let read = self.read_all(durable);
        if !durable {
            // Acknowledged but never synced: lost with the power, and those offsets may be
            // given out again.
            let survived: BTreeSet<u64> = read.iter().map(|(offset, _)| *offset).collect();
            self.model.acked.retain(|offset, _| survived.contains(offset));
        }
        let first = self.log.first_offset();
        self.model.acked.retain(|&offset, _| offset >= first);
        if let Some(last) = self.model.acked.keys().next_back()
            && self.log.next_offset() <= *last
        {
            self.fail(format!("next offset {} would re-mint acknowledged {last}", self.log.next_offset()));
        }
        if let Some(stored) = self.model.stored_offset {
            match self.log.offsets.get(CONSUMER) {
                Some(now) if now >= stored => {}
                now => self.fail(format!("consumer offset went back from {stored} to {now:?}")),
            }
        }
    }

    fn crash(&mut self) {
        self.crashes += 1;
        let torn = self.rng.below(300) as usize;
        trace(|| {
            format!(
                "  crash, torn {torn}; files {:?}",
                self.storage
                    .paths()
                    .iter()
                    .map(|p| (p.display().to_string(), self.storage.file_len(p)))
                    .collect::<Vec<_>>()
            )
        });
        self.storage.crash(torn);
        self.storage.heal();
        self.heal_at_step = None;
        self.reopen(false);
    }

    fn graceful_restart(&mut self) {
        self.storage.heal();
        self.heal_at_step = None;
        let synced = block_on(async {
            self.log.flush(&self.storage, true).await?;
            self.log.sync_active().await
        });
        if synced.is_err() {
            // A stop that cannot write is a crash.
            return self.crash();
        }
        self.reopen(true);
    }

    fn inject_fault(&mut self) {
        let now = self.storage.mutating_calls();
        let kind = if self.rng.chance(50) { io::ErrorKind::StorageFull } else { io::ErrorKind::Other };
        let calls = now + self.rng.below(4)..now + 1 + self.rng.below(8);
        trace(|| format!("  fault: calls {calls:?}"));
        self.storage.fail_calls(calls, kind);
        self.heal_at_step = Some(self.step + 1 + self.rng.below(10));
    }

    fn step(&mut self) {
        self.step += 1;
        if self.heal_at_step == Some(self.step) {
            self.storage.heal();
            self.heal_at_step = None;
        }
        let choice = self.rng.below(100);
        let (first, next, segments) = (self.log.first_offset(), self.log.next_offset(), self.log.segments_count());
        let calls = self.storage.mutating_calls();
        trace(|| {
            format!("step {} choice {choice}: first {first} next {next} segments {segments}, call {calls}", self.step)
        });
        match choice {
            0..=54 => self.append(),
            55..=62 => {
                let fsync = self.rng.chance(50);
                let result = block_on(self.log.flush(&self.storage, fsync));
                trace(|| format!("  flush fsync {fsync}: {result:?}"));
            }
            63..=69 => self.store_offset(),
            70..=74 => self.retention(),
            75..=84 => {
                if self.heal_at_step.is_none() {
                    let _ = self.read_all(false);
                }
            }
            85..=89 => self.graceful_restart(),
            90..=95 => self.crash(),
            _ => self.inject_fault(),
        }
        if self.purges.chance(2) {
            self.purge();
        }
    }
}

/// One seed's run, ending with a power loss; its steps, power losses and the acknowledged
/// messages verified after the last one.
fn run_seed(seed: u64) -> (u64, u64, u64) {
    let mut run = Run::new(seed);
    let steps = 100 + run.rng.below(200);
    for _ in 0..steps {
        run.step();
    }
    run.crash();
    (steps, run.crashes, run.model.acked.len() as u64)
}

/// Prints a line of the run when `SIM_PARTITION_TRACE` is set (a replay's detail).
fn trace(line: impl FnOnce() -> String) {
    if std::env::var_os("SIM_PARTITION_TRACE").is_some() {
        println!("{}", line());
    }
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}

#[test]
fn the_seeds_that_found_faults_replay_clean() {
    // 580: a segment roll that failed half-way left an empty segment file before the next
    // one, hiding offsets at start. 15409: the same left as the last segment, so an
    // acknowledged message was lost and its offset given out again.
    for seed in [580, 15409] {
        run_seed(seed);
    }
}

#[test]
fn seeded_runs_lose_no_acknowledged_message_and_re_mint_no_offset() {
    let (start, seeds) = match env_number("SIM_PARTITION_SEED") {
        Some(seed) => (seed, 1),
        None => {
            (env_number("SIM_PARTITION_SEED_START").unwrap_or(1), env_number("SIM_PARTITION_SEEDS").unwrap_or(2000))
        }
    };
    let (mut steps, mut crashes, mut acked) = (0, 0, 0);
    for seed in start..start + seeds {
        let (s, c, a) = run_seed(seed);
        steps += s;
        crashes += c;
        acked += a;
    }
    let reused = SPARE_COUNTERS.with(|counters| counters.taken.load(Relaxed));
    println!(
        "partition simulation: {seeds} seeds from {start}, {steps} steps, {crashes} power losses, {reused} segments written over spare logs, {acked} acknowledged messages verified after the last, zero violations"
    );
    assert!(seeds < 100 || reused > 0, "the runs write segments over spare logs");
}
