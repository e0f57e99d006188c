//! The faults a seeded partition-group run injects: nodes killed (or powered off) and
//! started again, the whole cluster powered off, a node cut off from the plane, and a node's
//! disk failing under one partition for a while.

use super::*;

impl Sim {
    pub(super) fn kill(&mut self) {
        let node = self.rng.below(u64::from(NODES)) as u8;
        let power_loss = self.rng.chance(50);
        self.trace(|| format!("kill node {node}, power loss {power_loss}"));
        self.cluster.kill(node, power_loss);
        // Requests in flight on it are lost with it: their sends may or may not be stored.
        self.idle[node as usize].clear();
        self.done.borrow_mut().retain(|done| match done {
            Done::Send { node: n, .. }
            | Done::Poll { node: n, .. }
            | Done::Store { node: n, .. }
            | Done::Delete { node: n, .. }
            | Done::Clean { node: n, .. } => *n != node,
        });
        self.lose_stores_through(|through| through == node);
        self.down = Some((node, self.step));
    }

    /// Every node loses power at once and starts again: whatever each had not fsynced is
    /// gone, and the group must still hold every send it acknowledged.
    pub(super) fn power_cut(&mut self) {
        self.trace(|| "power cut".into());
        for node in 0..NODES {
            self.cluster.kill(node, true);
            self.idle[node as usize].clear();
        }
        self.done.borrow_mut().clear();
        self.lose_stores_through(|_| true);
        for node in 0..NODES {
            self.cluster.start(node);
            self.log_clients_in(node);
        }
    }

    /// Stores in flight through a node that went down: their answer never comes, and they
    /// may or may not have been made (until a later store is acknowledged).
    pub(super) fn lose_stores_through(&mut self, lost: impl Fn(u8) -> bool) {
        for stored in &mut self.offsets {
            if stored.in_flight.is_some_and(&lost) {
                (stored.in_flight, stored.across_reset, stored.unknown) = (None, false, true);
            }
        }
    }

    pub(super) fn restart(&mut self) {
        let Some((node, _)) = self.down.take() else { return };
        self.trace(|| format!("restart node {node}"));
        self.cluster.start(node);
        self.log_clients_in(node);
    }

    pub(super) fn isolate(&mut self) {
        let node = self.rng.below(u64::from(NODES)) as u8;
        self.trace(|| format!("isolate node {node}"));
        self.cluster.faults.borrow_mut().isolated = Some(node);
        self.isolated = Some((node, self.step));
    }

    pub(super) fn heal(&mut self) {
        self.trace(|| "heal".into());
        self.cluster.faults.borrow_mut().isolated = None;
        self.isolated = None;
    }

    /// Now and then, while every node is up, reachable and driving its group, one node's disk
    /// starts failing every mutating call under one partition's directory or (on two steps
    /// in eight) under its group's journal, as an I/O error or (on odd steps) as a full disk
    /// (the step draws nothing more); at least 20 steps later it heals.
    pub(super) fn disk_faults(&mut self) {
        let halted = self.halted_node();
        let Some(rng) = self.disk.as_mut() else { return };
        match self.faulty {
            None if self.down.is_none() && self.isolated.is_none() && halted.is_none() && rng.chance(2) => {
                let (node, partition) = (rng.below(u64::from(NODES)) as u8, rng.below(u64::from(PARTITIONS)) as u32);
                let storage = &self.cluster.nodes[node as usize].storage;
                let dir = match self.step % 8 < 2 {
                    true => group_dir(storage),
                    false => partition_dir(storage, partition),
                };
                let Some(dir) = dir else { return };
                let kind = if self.step % 2 == 1 { std::io::ErrorKind::StorageFull } else { std::io::ErrorKind::Other };
                self.trace(|| format!("disk of node {node} fails ({kind:?}) under {}", dir.display()));
                storage.fail_under(&dir, kind);
                self.faulty = Some((node, self.step));
            }
            Some((_, since)) if self.step - since >= 20 && rng.chance(10) => self.heal_disk(),
            _ => {}
        }
    }

    /// A node with a group halted (its journal failed) that has not opened again yet.
    pub(super) fn halted_node(&self) -> Option<u8> {
        let halted = |shard: &Rc<Shard<SimEnv>>| {
            shard.shared().telemetry.groups.iter().any(|group| group.halted.load(std::sync::atomic::Ordering::Relaxed))
        };
        (0..NODES).find(|&node| self.cluster.nodes[node as usize].shards.iter().any(halted))
    }

    pub(super) fn heal_disk(&mut self) {
        let Some((node, _)) = self.faulty.take() else { return };
        self.trace(|| format!("disk of node {node} heals"));
        self.cluster.nodes[node as usize].storage.heal();
    }
}
