//! The credential bindings, with their tombstones indexed by expiry, so that pruning and
//! both of the table's caps touch only the tombstones they drop, never every binding.
//!
//! The caps: each identity keeps at most `per_identity` tombstones, and the whole table at
//! most `overall`. Identities cost nothing to mint, so without the second a local process
//! could grow the table for as long as tombstones live (register, leave the route to be
//! evicted, repeat), and every state write would copy all of it. Beyond either cap, the
//! tombstones that expire first go.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

use crate::types::{Digest, Fingerprint};

#[derive(Debug, Clone)]
pub(super) struct Binding {
    pub(super) fingerprint: Fingerprint,
    pub(super) last_use: Instant,
    /// Set only through [`Bindings`], which indexes it.
    tombstone_until: Option<Instant>,
    /// The state write that makes a new binding durable, while it is pending: its MCP's
    /// registration waits for it, and so do requests that carry the credential, as they do
    /// for the worker it is about to start.
    pub(super) awaiting_write: Option<u64>,
}

impl Binding {
    /// A binding in use from `now`.
    pub(super) fn live(fingerprint: Fingerprint, now: Instant) -> Binding {
        Binding::restored(fingerprint, now, None)
    }

    /// A binding as the state file kept it.
    pub(super) fn restored(
        fingerprint: Fingerprint,
        last_use: Instant,
        tombstone_until: Option<Instant>,
    ) -> Binding {
        Binding {
            fingerprint,
            last_use,
            tombstone_until,
            awaiting_write: None,
        }
    }

    /// Until when it is a tombstone: it then blocks other identities only (§5.3).
    pub(super) fn tombstone_until(&self) -> Option<Instant> {
        self.tombstone_until
    }

    pub(super) fn is_live(&self) -> bool {
        self.tombstone_until.is_none()
    }
}

type Tombstone = (Instant, Digest);

#[derive(Debug)]
pub(super) struct Bindings {
    /// Ordered, so a snapshot comes out in the state file's order without a sort, and a
    /// look-up costs a few comparisons rather than a keyed hash.
    map: BTreeMap<Digest, Binding>,
    /// Every tombstone, the one that expires first first.
    tombstones: BTreeSet<Tombstone>,
    /// The same tombstones by identity.
    tombstones_of: HashMap<Fingerprint, BTreeSet<Tombstone>>,
    per_identity: usize,
    overall: usize,
}

impl Bindings {
    pub(super) fn new(per_identity: usize, overall: usize) -> Bindings {
        Bindings {
            map: BTreeMap::new(),
            tombstones: BTreeSet::new(),
            tombstones_of: HashMap::new(),
            per_identity,
            overall,
        }
    }

    pub(super) fn get(&self, digest: &Digest) -> Option<&Binding> {
        self.map.get(digest)
    }

    pub(super) fn get_mut(&mut self, digest: &Digest) -> Option<&mut Binding> {
        self.map.get_mut(digest)
    }

    /// In the digests' order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&Digest, &Binding)> {
        self.map.iter()
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut Binding> {
        self.map.values_mut()
    }

    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    #[cfg(test)]
    pub(super) fn tombstones(&self) -> usize {
        self.tombstones.len()
    }

    /// Whether the index holds exactly the table's tombstones, within both caps.
    #[cfg(test)]
    pub(super) fn index_holds(&self) -> bool {
        let from_map: BTreeSet<Tombstone> = self
            .map
            .iter()
            .filter_map(|(d, b)| b.tombstone_until.map(|until| (until, *d)))
            .collect();
        let by_identity: BTreeSet<Tombstone> =
            self.tombstones_of.values().flatten().copied().collect();
        let identities_right = self.tombstones_of.iter().all(|(fp, of)| {
            !of.is_empty()
                && of.len() <= self.per_identity
                && of.iter().all(|(_, d)| self.map[d].fingerprint == *fp)
        });
        from_map == self.tombstones
            && by_identity == self.tombstones
            && identities_right
            && self.tombstones.len() <= self.overall
    }

    /// The most tombstones the table keeps.
    pub(super) fn overall(&self) -> usize {
        self.overall
    }

    /// Inserts or replaces a binding, returning the one replaced and how many tombstones
    /// of other identities the overall cap dropped to make room for it.
    pub(super) fn insert(&mut self, digest: Digest, binding: Binding) -> (Option<Binding>, usize) {
        let fingerprint = binding.fingerprint;
        let buried = binding.tombstone_until.is_some();
        let replaced = self.restore(digest, binding);
        let dropped = if buried { self.hold(fingerprint) } else { 0 };
        (replaced, dropped)
    }

    /// Inserts or replaces a binding as the state file has it, without holding the caps:
    /// [`Bindings::trim`] does that once the whole file is in.
    pub(super) fn restore(&mut self, digest: Digest, binding: Binding) -> Option<Binding> {
        let (fingerprint, until) = (binding.fingerprint, binding.tombstone_until);
        let replaced = self.map.insert(digest, binding);
        if let Some(old) = &replaced {
            self.unindex(digest, old);
        }
        if let Some(until) = until {
            self.index(fingerprint, (until, digest));
        }
        replaced
    }

    pub(super) fn remove(&mut self, digest: &Digest) -> Option<Binding> {
        let removed = self.map.remove(digest)?;
        self.unindex(*digest, &removed);
        Some(removed)
    }

    /// Makes a binding, if there is one, a tombstone until `until`. Returns how many
    /// tombstones the overall cap dropped.
    pub(super) fn bury(&mut self, digest: Digest, until: Instant) -> usize {
        let Some(binding) = self.map.get_mut(&digest) else {
            return 0;
        };
        let fingerprint = binding.fingerprint;
        if let Some(previous) = binding.tombstone_until.replace(until) {
            self.forget(fingerprint, (previous, digest));
        }
        self.index(fingerprint, (until, digest));
        self.hold(fingerprint)
    }

    /// Drops the tombstones that have expired by `now`; true if there were any.
    pub(super) fn prune(&mut self, now: Instant) -> bool {
        let mut pruned = false;
        while self
            .tombstones
            .first()
            .is_some_and(|(until, _)| *until <= now)
        {
            self.drop_first();
            pruned = true;
        }
        pruned
    }

    /// Holds both caps over the whole table; returns how many tombstones the overall cap
    /// dropped.
    pub(super) fn trim(&mut self) -> usize {
        let crowded: Vec<Fingerprint> = self
            .tombstones_of
            .iter()
            .filter(|(_, of)| of.len() > self.per_identity)
            .map(|(fp, _)| *fp)
            .collect();
        for fingerprint in crowded {
            self.hold_identity(fingerprint);
        }
        self.hold_overall()
    }

    /// Holds both caps after `fingerprint` gained a tombstone. Returns how many tombstones
    /// the overall cap dropped: those the identity's own cap drops are its own old ones.
    fn hold(&mut self, fingerprint: Fingerprint) -> usize {
        self.hold_identity(fingerprint);
        self.hold_overall()
    }

    fn hold_identity(&mut self, fingerprint: Fingerprint) {
        let Some(of) = self.tombstones_of.get_mut(&fingerprint) else {
            return;
        };
        while of.len() > self.per_identity
            && let Some(oldest) = of.pop_first()
        {
            self.tombstones.remove(&oldest);
            self.map.remove(&oldest.1);
        }
        if of.is_empty() {
            self.tombstones_of.remove(&fingerprint);
        }
    }

    fn hold_overall(&mut self) -> usize {
        let mut dropped = 0;
        while self.tombstones.len() > self.overall {
            self.drop_first();
            dropped += 1;
        }
        dropped
    }

    /// Drops the tombstone that ends first. It leaves the index before the map, so the
    /// loops above end even if the two ever disagreed.
    fn drop_first(&mut self) {
        if let Some((until, digest)) = self.tombstones.pop_first()
            && let Some(binding) = self.map.remove(&digest)
        {
            self.forget(binding.fingerprint, (until, digest));
        }
    }

    fn index(&mut self, fingerprint: Fingerprint, tombstone: Tombstone) {
        self.tombstones.insert(tombstone);
        self.tombstones_of
            .entry(fingerprint)
            .or_default()
            .insert(tombstone);
    }

    fn unindex(&mut self, digest: Digest, binding: &Binding) {
        if let Some(until) = binding.tombstone_until {
            self.forget(binding.fingerprint, (until, digest));
        }
    }

    fn forget(&mut self, fingerprint: Fingerprint, tombstone: Tombstone) {
        self.tombstones.remove(&tombstone);
        if let Some(of) = self.tombstones_of.get_mut(&fingerprint) {
            of.remove(&tombstone);
            if of.is_empty() {
                self.tombstones_of.remove(&fingerprint);
            }
        }
    }
}

#[cfg(test)]
mod tests;
