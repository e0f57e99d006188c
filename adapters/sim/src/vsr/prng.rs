//! The simulator's seeded PRNG with named sub-streams (network, storage, workload, faults), so
//! that a change in how one concern draws numbers does not reshuffle the others.

#[derive(Debug, Clone)]
pub struct Prng {
    state: u64,
}

impl Prng {
    /// The sub-stream `name` of `seed`.
    pub fn stream(seed: u64, name: &str) -> Self {
        let mut state = seed ^ 0x6A09_E667_F3BC_C908;
        for byte in name.bytes() {
            state = (state ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01B3);
        }
        Self { state }
    }

    /// splitmix64.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound.max(1)
    }

    /// A number in `low..=high`.
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high - low + 1)
    }

    /// True with probability `per_million / 1_000_000`.
    pub fn chance(&mut self, per_million: u64) -> bool {
        self.below(1_000_000) < per_million
    }

    pub fn pick<T: Copy>(&mut self, choices: &[T]) -> T {
        choices[self.below(choices.len() as u64) as usize]
    }
}
