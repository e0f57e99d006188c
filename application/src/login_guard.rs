//! Failed-login limiting: after `max_failures` failures for one username within the window,
//! every login as that user is refused, even with the right password, until the window
//! has passed. Unknown usernames are counted too, so probing costs the same as guessing.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

/// Usernames tracked at once; past this, entries whose failures all left the window go.
const MAX_TRACKED: usize = 100_000;

#[derive(Debug)]
pub struct LoginGuard {
    max_failures: u32,
    window_us: u64,
    failures: Mutex<BTreeMap<String, VecDeque<u64>>>,
}

impl LoginGuard {
    pub fn new(max_failures: u32, window_us: u64) -> Self {
        Self { max_failures: max_failures.max(1), window_us, failures: Mutex::new(BTreeMap::new()) }
    }

    fn with<R>(&self, f: impl FnOnce(&mut BTreeMap<String, VecDeque<u64>>) -> R) -> R {
        f(&mut self.failures.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    /// Whether logins as `username` are refused right now.
    pub fn is_locked(&self, username: &str, now_us: u64) -> bool {
        let window_us = self.window_us;
        self.with(|failures| {
            let Some(times) = failures.get_mut(username) else { return false };
            while times.front().is_some_and(|&t| now_us.saturating_sub(t) >= window_us) {
                times.pop_front();
            }
            times.len() as u32 >= self.max_failures
        })
    }

    pub fn record_failure(&self, username: &str, now_us: u64) {
        let (window_us, keep) = (self.window_us, self.max_failures as usize);
        self.with(|failures| {
            if failures.len() >= MAX_TRACKED && !failures.contains_key(username) {
                failures.retain(|_, times| times.back().is_some_and(|&t| now_us.saturating_sub(t) < window_us));
                if failures.len() >= MAX_TRACKED {
                    return;
                }
            }
            let times = failures.entry(username.to_owned()).or_default();
            times.push_back(now_us);
            while times.len() > keep {
                times.pop_front();
            }
        });
    }

    pub fn clear(&self, username: &str) {
        self.with(|failures| failures.remove(username));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locks_after_the_limit_and_unlocks_after_the_window() {
        let guard = LoginGuard::new(3, 100);
        for t in 0..3 {
            assert!(!guard.is_locked("alice", t));
            guard.record_failure("alice", t);
        }
        assert!(guard.is_locked("alice", 10));
        assert!(!guard.is_locked("bob", 10));
        assert!(guard.is_locked("alice", 99));
        assert!(!guard.is_locked("alice", 102));
        guard.record_failure("bob", 0);
        guard.clear("bob");
        assert!(!guard.is_locked("bob", 1));
    }
}
