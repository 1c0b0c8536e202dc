use std::time::{Duration, Instant};

use super::*;

fn digest(n: u8) -> Digest {
    Digest([n; 32])
}

fn identity(n: u8) -> Fingerprint {
    Fingerprint([n; 32])
}

fn secs(start: Instant, s: u64) -> Instant {
    start + Duration::from_secs(s)
}

/// Binds digest `n` to identity `id` and buries it until `start + n` seconds.
fn tombstone(table: &mut Bindings, start: Instant, n: u8, id: u8) -> usize {
    table.insert(digest(n), Binding::live(identity(id), start));
    table.bury(digest(n), secs(start, u64::from(n)))
}

#[test]
fn an_identity_keeps_its_newest_tombstones_and_its_live_bindings() {
    let start = Instant::now();
    let mut table = Bindings::new(2, 100);
    table.insert(digest(9), Binding::live(identity(1), start));
    for n in 1..=4 {
        assert_eq!(tombstone(&mut table, start, n, 1), 0);
    }
    let mut kept: Vec<Digest> = table.iter().map(|(d, _)| *d).collect();
    kept.sort();
    assert_eq!(kept, [digest(3), digest(4), digest(9)]);
    assert_eq!(table.tombstones(), 2);
}

#[test]
fn the_overall_cap_drops_the_tombstones_that_expire_first_whoever_holds_them() {
    let start = Instant::now();
    let mut table = Bindings::new(8, 3);
    // Identity 1's tombstone is the oldest; identities 2 to 5 each bury one later.
    assert_eq!(tombstone(&mut table, start, 1, 1), 0);
    for n in 2..=3 {
        assert_eq!(tombstone(&mut table, start, n, n), 0);
    }
    assert_eq!(tombstone(&mut table, start, 4, 4), 1);
    assert!(table.get(&digest(1)).is_none());
    assert_eq!(tombstone(&mut table, start, 5, 5), 1);
    assert!(table.get(&digest(2)).is_none());
    // A live binding is never dropped, however many tombstones come after it.
    table.insert(digest(50), Binding::live(identity(9), start));
    for n in 6..=20 {
        tombstone(&mut table, start, n, n);
    }
    assert_eq!(table.tombstones(), 3);
    assert_eq!(table.len(), 4);
    assert!(table.get(&digest(50)).is_some_and(Binding::is_live));
}

#[test]
fn a_tombstone_bound_again_or_buried_again_is_indexed_once() {
    let start = Instant::now();
    let mut table = Bindings::new(8, 2);
    tombstone(&mut table, start, 1, 1);
    // Bound again by its identity: live, and out of the index.
    let (replaced, _) = table.insert(digest(1), Binding::live(identity(1), start));
    assert!(replaced.is_some_and(|b| !b.is_live()));
    assert_eq!(table.tombstones(), 0);
    // Buried twice: one entry, at its later time.
    table.bury(digest(1), secs(start, 10));
    table.bury(digest(1), secs(start, 20));
    assert_eq!(table.tombstones(), 1);
    assert!(!table.prune(secs(start, 15)));
    assert!(table.prune(secs(start, 20)));
    assert_eq!(table.len(), 0);
    // A removed tombstone leaves the index too: two more fit under the cap of two.
    tombstone(&mut table, start, 2, 2);
    table.remove(&digest(2));
    assert_eq!(tombstone(&mut table, start, 3, 3), 0);
    assert_eq!(tombstone(&mut table, start, 4, 4), 0);
    assert_eq!(table.tombstones(), 2);
}

#[test]
fn pruning_drops_only_what_has_expired() {
    let start = Instant::now();
    let mut table = Bindings::new(8, 100);
    for n in 1..=5 {
        tombstone(&mut table, start, n, n);
    }
    table.insert(digest(9), Binding::live(identity(9), start));
    assert!(table.prune(secs(start, 3)));
    let mut kept: Vec<Digest> = table.iter().map(|(d, _)| *d).collect();
    kept.sort();
    assert_eq!(kept, [digest(4), digest(5), digest(9)]);
    assert!(!table.prune(secs(start, 3)));
}

#[test]
fn burying_what_is_not_bound_does_nothing() {
    let mut table = Bindings::new(8, 100);
    assert_eq!(table.bury(digest(1), Instant::now()), 0);
    assert_eq!(table.len(), 0);
}

#[test]
fn a_restored_table_keeps_every_tombstone_until_it_is_trimmed() {
    let start = Instant::now();
    let mut table = Bindings::new(2, 3);
    // Identity 1 holds four tombstones, identity 2 one, identity 3 one and a live binding.
    for n in 1..=6u8 {
        let id = match n {
            1..=4 => 1,
            5 => 2,
            _ => 3,
        };
        let until = Some(secs(start, u64::from(n)));
        table.restore(digest(n), Binding::restored(identity(id), start, until));
    }
    table.restore(digest(9), Binding::live(identity(3), start));
    assert_eq!(table.tombstones(), 6);
    // Identity 1 keeps its newest two (3 and 4); then the overall cap of three drops the
    // one that ends first (3), whoever holds it.
    assert_eq!(table.trim(), 1);
    assert!(table.index_holds());
    let mut kept: Vec<Digest> = table.iter().map(|(d, _)| *d).collect();
    kept.sort();
    assert_eq!(kept, [digest(4), digest(5), digest(6), digest(9)]);
    assert_eq!(table.trim(), 0);
}

#[test]
fn a_digest_restored_twice_is_indexed_once() {
    let start = Instant::now();
    let mut table = Bindings::new(8, 8);
    let until = Some(secs(start, 5));
    table.restore(digest(1), Binding::restored(identity(1), start, until));
    let replaced = table.restore(digest(1), Binding::restored(identity(1), start, until));
    assert!(replaced.is_some());
    assert_eq!(table.tombstones(), 1);
    assert!(table.index_holds());
}
