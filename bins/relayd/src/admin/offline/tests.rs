use std::os::unix::fs::PermissionsExt as _;

use relay_broker::{Digest, PersistedBinding, PersistedGeneration};
use relay_identity::MapEnv;
use relay_proto::{Bytes32, Id};

use super::*;
use crate::admin::text::list_lines;

const FP: Fingerprint = Fingerprint([0xab; 32]);
const OTHER: Fingerprint = Fingerprint([0x11; 32]);
const DAY: Duration = Duration::from_secs(24 * 3600);

/// The daemon's broker settings with tombstones that last `tombstone`.
fn config(tombstone: Duration) -> BrokerConfig {
    BrokerConfig {
        binding_tombstone: tombstone,
        ..BrokerConfig::default()
    }
}

fn binding(
    now: Instant,
    digest: u8,
    fingerprint: Fingerprint,
    tombstone_until: Option<Instant>,
) -> PersistedBinding {
    PersistedBinding {
        digest: Digest([digest; 32]),
        fingerprint,
        last_use: now,
        tombstone_until,
    }
}

fn generation(id: u8, fingerprint: Fingerprint) -> PersistedGeneration {
    PersistedGeneration {
        worker_id: Id([id; 16]),
        fingerprint,
        endpoint: "127.0.0.1:40001".into(),
        certificate_sha256: Bytes32([id; 32]),
        draining: false,
    }
}

/// Two live bindings and one tombstone of `FP`, one binding of `OTHER`, a generation of each.
fn state(now: Instant) -> PersistedState {
    PersistedState {
        bindings: vec![
            binding(now, 1, FP, None),
            binding(now, 2, FP, None),
            binding(now, 3, FP, Some(now + DAY)),
            binding(now, 4, OTHER, None),
        ],
        blocked: vec![],
        generations: vec![generation(1, FP), generation(2, OTHER)],
    }
}

#[test]
fn revoke_tombstones_the_live_bindings_and_drops_the_ledger_entries_of_one_fingerprint() {
    let now = Instant::now();
    let until = now + 30 * DAY;
    let applied = apply(config(30 * DAY), now, state(now), Action::Revoke, FP);
    let (edited, edit) = (applied.state, applied.edit);
    assert_eq!(
        edit,
        Edit {
            bindings: 2,
            generations: 1,
            was_blocked: false,
            is_blocked: false
        }
    );
    assert!(applied.changed);
    let original = state(now);
    for (after, before) in edited.bindings.iter().zip(&original.bindings) {
        assert_eq!(after.digest, before.digest);
        assert_eq!(after.last_use, before.last_use);
        match (after.fingerprint == FP, before.tombstone_until) {
            // An older tombstone keeps its own end.
            (true, Some(old)) => assert_eq!(after.tombstone_until, Some(old)),
            (true, None) => assert_eq!(after.tombstone_until, Some(until)),
            (false, _) => assert_eq!(after.tombstone_until, None),
        }
    }
    assert_eq!(edited.generations, vec![generation(2, OTHER)]);
    assert!(edited.blocked.is_empty());

    // Nothing is left to end the second time.
    let again = apply(config(30 * DAY), now, edited, Action::Revoke, FP);
    assert_eq!(again.edit, Edit::default());
    assert!(!again.changed);
}

#[test]
fn block_revokes_and_records_the_fingerprint_once_and_unblock_removes_it() {
    let now = Instant::now();
    let mut original = state(now);
    original.blocked.push(Fingerprint([0xff; 32]));
    let applied = apply(config(DAY), now, original, Action::Block, OTHER);
    let (edited, edit) = (applied.state, applied.edit);
    assert_eq!((edit.bindings, edit.generations), (1, 1));
    assert!(!edit.was_blocked && edit.is_blocked);
    assert_eq!(edited.blocked, vec![OTHER, Fingerprint([0xff; 32])]);

    let again = apply(config(DAY), now, edited, Action::Block, OTHER);
    let (edited, edit) = (again.state, again.edit);
    assert!(edit.was_blocked && edit.is_blocked && !again.changed);
    assert_eq!(edited.blocked.len(), 2);

    let unblocked = apply(config(DAY), now, edited, Action::Unblock, OTHER);
    let (edited, edit) = (unblocked.state, unblocked.edit);
    assert!(edit.was_blocked && !edit.is_blocked && unblocked.changed);
    assert_eq!(edited.blocked, vec![Fingerprint([0xff; 32])]);
    // Unblocking gives no binding back: the machine registers again.
    assert!(
        edited
            .bindings
            .iter()
            .filter(|b| b.fingerprint == OTHER)
            .all(|b| b.tombstone_until.is_some())
    );
    let not_blocked = apply(config(DAY), now, edited, Action::Unblock, OTHER);
    assert_eq!(not_blocked.edit, Edit::default());
}

#[test]
fn a_stopped_daemons_state_file_is_edited_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::new(dir.path());
    store.save(&state(Instant::now())).unwrap();

    let edit = edit_stopped(dir.path(), Action::Block, FP, config(7 * DAY), LOCK_POLL).unwrap();
    assert_eq!((edit.bindings, edit.generations), (2, 1));
    let loaded = StateStore::new(dir.path()).load().unwrap();
    assert_eq!(loaded.blocked, vec![FP]);
    assert_eq!(loaded.generations, vec![generation(2, OTHER)]);
    let fresh = loaded
        .bindings
        .iter()
        .filter(|b| b.digest == Digest([1; 32]))
        .filter_map(|b| b.tombstone_until)
        .next()
        .unwrap();
    let left = fresh.saturating_duration_since(Instant::now());
    assert!(left > 6 * DAY && left <= 7 * DAY, "{left:?}");
    let mode = std::fs::metadata(store.path())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // The lock is released after the edit.
    assert!(StateLock::try_acquire(dir.path()).unwrap().is_some());

    let listed = list_stopped(dir.path()).unwrap();
    assert_eq!(listed.blocked, vec![FP.to_hex()]);
    assert!(
        listed
            .bindings
            .iter()
            .filter(|b| b.fingerprint == FP.to_hex())
            .all(|b| b.tombstone && b.blocked)
    );
}

#[test]
fn an_edit_with_nothing_to_change_leaves_a_missing_file_missing() {
    let dir = tempfile::tempdir().unwrap();
    let edit = edit_stopped(dir.path(), Action::Revoke, FP, config(DAY), LOCK_POLL).unwrap();
    assert_eq!(edit, Edit::default());
    assert!(!dir.path().join(relay_proxy::state::STATE_FILE).exists());
    // Blocking a machine that never registered is recorded.
    edit_stopped(dir.path(), Action::Block, FP, config(DAY), LOCK_POLL).unwrap();
    assert_eq!(
        StateStore::new(dir.path()).load().unwrap().blocked,
        vec![FP]
    );
}

#[test]
fn no_edit_while_a_daemon_answers_or_holds_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    StateStore::new(dir.path())
        .save(&state(Instant::now()))
        .unwrap();
    let before = std::fs::read(dir.path().join(relay_proxy::state::STATE_FILE)).unwrap();

    // Another command (or a daemon between its socket and its last write) holds the lock.
    let held = StateLock::try_acquire(dir.path()).unwrap().unwrap();
    let error = edit_stopped(dir.path(), Action::Revoke, FP, config(DAY), LOCK_POLL).unwrap_err();
    assert!(
        matches!(error, BindingsError::Admin(AdminError::LockBusy { .. })),
        "{error:?}"
    );
    // A daemon that holds the lock and answers on its socket.
    let socket =
        std::os::unix::net::UnixListener::bind(dir.path().join(relay_proxy::admin::SOCKET_FILE))
            .unwrap();
    let error = edit_stopped(dir.path(), Action::Revoke, FP, config(DAY), LOCK_POLL).unwrap_err();
    assert!(
        matches!(error, BindingsError::DaemonStarted { .. }),
        "{error:?}"
    );
    // A daemon that answers although the lock is free is not edited behind either.
    drop(held);
    let error = edit_stopped(dir.path(), Action::Revoke, FP, config(DAY), LOCK_POLL).unwrap_err();
    assert!(
        matches!(error, BindingsError::DaemonStarted { .. }),
        "{error:?}"
    );
    drop(socket);
    let after = std::fs::read(dir.path().join(relay_proxy::state::STATE_FILE)).unwrap();
    assert_eq!(before, after);
}

#[test]
fn the_tombstone_period_comes_from_the_daemons_config_files() {
    let base = tempfile::tempdir().unwrap();
    let state_dir = base.path().join("relay").join("daemon");
    std::fs::create_dir_all(&state_dir).unwrap();
    let system = base.path().join("system");
    std::fs::create_dir(&system).unwrap();
    let env = MapEnv::new();
    let tombstone_period =
        |env: &MapEnv| daemon_broker_config(&state_dir, &system, env).map(|c| c.binding_tombstone);
    assert_eq!(tombstone_period(&env).unwrap(), 30 * DAY);
    std::fs::write(
        base.path().join("relay").join("config.toml"),
        "[daemon]\nbinding_tombstone_days = 7\n",
    )
    .unwrap();
    assert_eq!(tombstone_period(&env).unwrap(), 7 * DAY);
    std::fs::write(system.join("config.toml"), "[daemon]\nnot_a_key = 1\n").unwrap();
    assert!(matches!(
        tombstone_period(&env),
        Err(BindingsError::Config { .. })
    ));
}

#[test]
fn the_tombstone_cap_follows_the_daemons_token_limit_from_its_files_and_environment() {
    let base = tempfile::tempdir().unwrap();
    let state_dir = base.path().join("relay").join("daemon");
    std::fs::create_dir_all(&state_dir).unwrap();
    let system = base.path().join("system");
    std::fs::create_dir(&system).unwrap();
    std::fs::write(
        system.join("config.toml"),
        "[daemon]\nmax_tokens_per_identity = 2\n",
    )
    .unwrap();
    let tokens = |env: &MapEnv| {
        daemon_broker_config(&state_dir, &system, env).map(|c| c.max_tokens_per_identity)
    };
    assert_eq!(tokens(&MapEnv::new()).unwrap(), 2);
    let env = MapEnv::new().with(
        relay_identity::names::RELAY_DAEMON_MAX_TOKENS_PER_IDENTITY,
        "1",
    );
    assert_eq!(tokens(&env).unwrap(), 1);
    let bad = MapEnv::new().with(
        relay_identity::names::RELAY_DAEMON_MAX_TOKENS_PER_IDENTITY,
        "99",
    );
    assert!(matches!(tokens(&bad), Err(BindingsError::Config { .. })));

    // With one token per identity, an identity keeps at most four tombstones: a revocation
    // drops the ones that expire first, as the running daemon does.
    let now = Instant::now();
    let persisted = PersistedState {
        bindings: (1..=6)
            .map(|n| binding(now, n, FP, (n > 2).then(|| now + u32::from(n) * DAY)))
            .collect(),
        ..PersistedState::default()
    };
    let config = daemon_broker_config(&state_dir, &system, &env).unwrap();
    let applied = apply(config, now, persisted, Action::Revoke, FP);
    assert_eq!(applied.edit.bindings, 2);
    let kept: Vec<u8> = applied
        .state
        .bindings
        .iter()
        .map(|b| b.digest.0[0])
        .collect();
    assert_eq!(
        kept,
        vec![1, 2, 5, 6],
        "the two tombstones that end first went"
    );
}

#[test]
fn the_list_shows_digest_prefixes_and_leaves_expired_tombstones_out() {
    let now = Instant::now();
    let mut persisted = state(now);
    persisted.bindings.push(PersistedBinding {
        tombstone_until: Some(now),
        ..binding(now, 5, OTHER, None)
    });
    persisted.blocked = vec![OTHER, Fingerprint([0xff; 32])];
    let list = list_of(config(DAY), now, persisted, |_| 1_764_460_800_000);
    assert_eq!(list.bindings.len(), 4);
    assert_eq!(list.bindings[0].fingerprint, OTHER.to_hex());
    assert_eq!(list.bindings[0].digest_prefix, "040404040404");
    assert!(list.bindings[0].blocked);
    assert!(list.bindings[1..].iter().all(|b| !b.blocked));
    assert_eq!(list.bindings.iter().filter(|b| b.tombstone).count(), 1);

    let lines = list_lines(&list);
    assert_eq!(lines.len(), 5);
    assert_eq!(
        lines[0],
        format!(
            "{} digest=040404040404 last_use=2025-11-30T00:00:00Z tombstone=no blocked=yes",
            OTHER.to_hex()
        )
    );
    assert_eq!(
        lines[4],
        format!(
            "{} digest=- last_use=- tombstone=- blocked=yes",
            "ff".repeat(32)
        )
    );
    // A digest prefix is 12 hex characters, never a whole digest.
    assert!(lines.iter().all(|l| !l.contains(&"04".repeat(7))));
}
