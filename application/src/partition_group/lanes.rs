//! A shard's lanes into its group: a few client ids of its own, since the replica admits
//! one request per client at a time, so a few sends of one shard are in the group's
//! pipeline at once.

use std::cell::RefCell;

/// Sends of one shard in its group's pipeline at once, each on a lane.
const LANES: u8 = 4;

/// The lanes of this node's replica: free client ids, and a permit for each.
pub(super) struct Lanes {
    /// Client ids: random high bits, this node's replica id, then the lane.
    free: RefCell<Vec<u128>>,
    permits: async_lock::Semaphore,
}

/// A lane taken for one op, given back however the op ends (answered, timed out, dropped).
pub(super) struct Lane<'a> {
    lanes: &'a Lanes,
    pub client_id: u128,
    _permit: async_lock::SemaphoreGuard<'a>,
}

impl Drop for Lane<'_> {
    fn drop(&mut self) {
        self.lanes.free.borrow_mut().push(self.client_id);
    }
}

impl Lanes {
    pub fn new(seed: u64, replica_id: u8) -> Self {
        let base = (rand_high(seed) << 16) | u128::from(replica_id) << 8;
        let free = (0..LANES).map(|lane| base | u128::from(lane)).collect();
        Self { free: RefCell::new(free), permits: async_lock::Semaphore::new(LANES as usize) }
    }

    pub async fn take(&self) -> Lane<'_> {
        let permit = self.permits.acquire().await;
        let client_id = self.free.borrow_mut().pop().expect("a permit stands for a free lane");
        Lane { lanes: self, client_id, _permit: permit }
    }
}

/// The random high bits of this process's lane ids, from its seed.
fn rand_high(seed: u64) -> u128 {
    u128::from(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1) << 32 | u128::from(seed >> 32)
}
