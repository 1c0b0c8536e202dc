//! A keyed timer queue: one deadline per key, the earliest first.

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;
use std::time::Instant;

#[derive(Debug)]
pub(crate) struct TimerQueue<K: Ord + Hash + Copy> {
    by_key: HashMap<K, Instant>,
    queue: BTreeSet<(Instant, K)>,
}

impl<K: Ord + Hash + Copy> TimerQueue<K> {
    pub(crate) fn new() -> Self {
        TimerQueue {
            by_key: HashMap::new(),
            queue: BTreeSet::new(),
        }
    }

    /// Sets (or moves) the deadline of `key`.
    pub(crate) fn set(&mut self, key: K, at: Instant) {
        if let Some(old) = self.by_key.insert(key, at) {
            self.queue.remove(&(old, key));
        }
        self.queue.insert((at, key));
    }

    pub(crate) fn clear(&mut self, key: K) {
        if let Some(old) = self.by_key.remove(&key) {
            self.queue.remove(&(old, key));
        }
    }

    pub(crate) fn next(&self) -> Option<Instant> {
        self.queue.first().map(|(at, _)| *at)
    }

    /// Removes and returns the earliest key due at `now`, if any.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<K> {
        let (at, key) = *self.queue.first()?;
        if at > now {
            return None;
        }
        self.queue.remove(&(at, key));
        self.by_key.remove(&key);
        Some(key)
    }
}
