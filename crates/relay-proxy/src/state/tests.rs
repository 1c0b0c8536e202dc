use std::os::unix::fs::PermissionsExt as _;
use std::time::{Duration, Instant};

use super::*;

fn sample(now: Instant) -> PersistedState {
    PersistedState {
        bindings: vec![
            PersistedBinding {
                digest: Digest([1; 32]),
                fingerprint: Fingerprint([2; 32]),
                last_use: now,
                tombstone_until: None,
            },
            PersistedBinding {
                digest: Digest([3; 32]),
                fingerprint: Fingerprint([2; 32]),
                last_use: now,
                tombstone_until: Some(now + Duration::from_secs(3600)),
            },
        ],
        blocked: vec![Fingerprint([9; 32])],
        generations: vec![PersistedGeneration {
            worker_id: Id([7; 16]),
            fingerprint: Fingerprint([2; 32]),
            endpoint: "127.0.0.1:40001".into(),
            certificate_sha256: Bytes32([5; 32]),
            draining: false,
        }],
    }
}

#[test]
fn state_round_trips_through_a_private_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::new(dir.path());
    let now = Instant::now();
    store.save(&sample(now)).unwrap();
    let mode = std::fs::metadata(store.path())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let loaded = store.load().unwrap();
    let expected = sample(now);
    assert_eq!(loaded.blocked, expected.blocked);
    assert_eq!(loaded.generations, expected.generations);
    for (a, b) in loaded.bindings.iter().zip(&expected.bindings) {
        assert_eq!(a.digest, b.digest);
        assert_eq!(a.fingerprint, b.fingerprint);
        // Wall-clock milliseconds: within a millisecond.
        let drift = if a.last_use > b.last_use {
            a.last_use - b.last_use
        } else {
            b.last_use - a.last_use
        };
        assert!(drift <= Duration::from_millis(1));
        assert_eq!(a.tombstone_until.is_some(), b.tombstone_until.is_some());
    }
}

#[test]
fn the_file_holds_digests_not_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::new(dir.path());
    store.save(&sample(Instant::now())).unwrap();
    let text = std::fs::read_to_string(store.path()).unwrap();
    assert!(text.contains(&"01".repeat(32)), "{text}");
    assert!(!text.contains("secret"));
}

#[test]
fn a_missing_file_is_an_empty_state_and_a_corrupt_one_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::new(dir.path());
    assert_eq!(store.load().unwrap(), PersistedState::default());
    std::fs::write(store.path(), "{ not json").unwrap();
    assert!(matches!(store.load(), Err(StateError::Corrupt { .. })));
    std::fs::write(
        store.path(),
        r#"{"version":2,"bindings":[],"blocked":[],"generations":[]}"#,
    )
    .unwrap();
    assert!(matches!(store.load(), Err(StateError::Corrupt { .. })));
}

#[cfg(unix)]
#[test]
fn a_symlinked_state_file_is_refused_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = dir.path().join("elsewhere.json");
    let store = StateStore::new(dir.path());
    let now = Instant::now();
    // A valid state file, so only the link can be the reason for the refusal.
    store.save(&sample(now)).unwrap();
    std::fs::rename(store.path(), &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, store.path()).unwrap();
    assert!(
        matches!(store.load(), Err(StateError::Symlink { .. })),
        "{:?}",
        store.load()
    );
    // A dangling link is refused too, not taken for a missing file.
    std::fs::remove_file(&elsewhere).unwrap();
    assert!(matches!(store.load(), Err(StateError::Symlink { .. })));
}

#[test]
fn an_oversized_state_file_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::new(dir.path());
    let file = std::fs::File::create(store.path()).unwrap();
    // Sparse: no disk space is used, and the size check refuses it before any read.
    file.set_len(MAX_STATE_FILE_BYTES + 1).unwrap();
    assert!(
        matches!(store.load(), Err(StateError::TooLarge { limit, .. }) if limit == MAX_STATE_FILE_BYTES),
        "{:?}",
        store.load()
    );
    // A small file in the same place is read again.
    file.set_len(0).unwrap();
    drop(file);
    store.save(&PersistedState::default()).unwrap();
    assert_eq!(store.load().unwrap(), PersistedState::default());
}

#[test]
fn a_directory_in_place_of_the_state_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::new(dir.path());
    std::fs::create_dir(store.path()).unwrap();
    assert!(matches!(
        store.load(),
        Err(StateError::NotRegularFile { .. })
    ));
}
