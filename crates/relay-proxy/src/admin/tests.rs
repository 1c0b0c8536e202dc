use std::os::unix::fs::PermissionsExt as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Method;
use relay_broker::{
    BrokerConfig, Digest, Fingerprint, PersistedBinding, PersistedGeneration, PersistedState,
};
use relay_proto::{Bytes32, Id};
use tokio::sync::oneshot;

use super::*;
use crate::metrics::Metrics;
use crate::shell::Shell;
use crate::state::StateStore;

const FP: Fingerprint = Fingerprint([0xab; 32]);
const OTHER: Fingerprint = Fingerprint([0x11; 32]);

#[test]
fn fingerprints_are_64_hex_characters_and_uppercase_is_lowered() {
    let lower = "ab".repeat(32);
    assert_eq!(parse_fingerprint(&lower), Ok(FP));
    assert_eq!(parse_fingerprint(&"AB".repeat(32)), Ok(FP));
    assert_eq!(parse_fingerprint(&"aB".repeat(32)), Ok(FP));
    for bad in [
        String::new(),
        "ab".repeat(31) + "a",
        "ab".repeat(32) + "a",
        "ab".repeat(31) + "zz",
        " ".to_owned() + &"ab".repeat(31) + "a",
        // 64 bytes, but not 64 hex characters.
        "é".repeat(32),
        "0x".to_owned() + &"ab".repeat(31),
    ] {
        let error = parse_fingerprint(&bad).unwrap_err();
        assert!(error.to_string().contains("64 hex characters"), "{error}");
        assert!(!error.looks_like_token);
    }
}

/// A route token passed where a fingerprint belongs is not repeated in the error, which
/// lands in terminals and CI logs.
#[test]
fn a_token_given_as_a_fingerprint_is_not_repeated() {
    let token = relay_identity::RouteToken::generate().unwrap().encode();
    let error = parse_fingerprint(&token).unwrap_err();
    let text = error.to_string();
    assert!(!text.contains(&token), "{text}");
    assert!(error.looks_like_token, "{text}");
    assert!(text.contains("route token"), "{text}");
}

#[test]
fn only_the_daemon_account_and_root_are_served() {
    assert!(is_peer_allowed(1000, 1000));
    assert!(is_peer_allowed(0, 1000));
    assert!(is_peer_allowed(0, 0));
    assert!(!is_peer_allowed(1001, 1000));
    assert!(!is_peer_allowed(65534, 0));
    assert!(!is_peer_allowed(65534, 1000));
}

#[test]
fn routes_name_a_fingerprint_and_an_action() {
    let fp = "ab".repeat(32);
    let post = Method::POST;
    let get = Method::GET;
    assert_eq!(admin_route(&get, "/bindings"), AdminRoute::List);
    assert_eq!(
        admin_route(&post, "/bindings"),
        AdminRoute::MethodNotAllowed
    );
    for (segment, action) in [
        ("revoke", Action::Revoke),
        ("block", Action::Block),
        ("unblock", Action::Unblock),
    ] {
        assert_eq!(
            admin_route(&post, &format!("/bindings/{fp}/{segment}")),
            AdminRoute::Act {
                fingerprint: FP,
                action
            }
        );
        assert_eq!(
            admin_route(&get, &format!("/bindings/{fp}/{segment}")),
            AdminRoute::MethodNotAllowed
        );
    }
    assert!(matches!(
        admin_route(&post, "/bindings/xyz/revoke"),
        AdminRoute::BadFingerprint(_)
    ));
    assert_eq!(
        admin_route(&post, &format!("/bindings/{fp}/delete")),
        AdminRoute::NotFound
    );
    assert_eq!(admin_route(&get, "/"), AdminRoute::NotFound);
    assert_eq!(admin_route(&get, "/bindings/"), AdminRoute::NotFound);
}

#[test]
fn the_lock_is_exclusive_until_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let first = StateLock::try_acquire(dir.path()).unwrap().unwrap();
    assert!(StateLock::try_acquire(dir.path()).unwrap().is_none());
    let mode = std::fs::metadata(first.path())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    drop(first);
    assert!(StateLock::try_acquire(dir.path()).unwrap().is_some());
}

#[test]
fn a_symlinked_lock_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("elsewhere");
    std::fs::write(&target, "").unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join(LOCK_FILE)).unwrap();
    assert!(matches!(
        StateLock::try_acquire(dir.path()),
        Err(AdminError::Lock { .. })
    ));
}

/// A state with two live bindings and one tombstone of `FP`, a binding of
/// another fingerprint, and a published generation of `FP` waiting to resume.
fn seeded_state(now: Instant) -> PersistedState {
    let binding = |digest: u8, fingerprint, tombstone: bool| PersistedBinding {
        digest: Digest([digest; 32]),
        fingerprint,
        last_use: now,
        tombstone_until: tombstone.then(|| now + Duration::from_secs(3600)),
    };
    PersistedState {
        bindings: vec![
            binding(1, FP, false),
            binding(2, FP, false),
            binding(3, FP, true),
            binding(4, OTHER, false),
        ],
        blocked: vec![],
        generations: vec![PersistedGeneration {
            worker_id: Id([7; 16]),
            fingerprint: FP,
            endpoint: "127.0.0.1:40001".into(),
            certificate_sha256: Bytes32([5; 32]),
            draining: false,
        }],
    }
}

struct Running {
    dir: tempfile::TempDir,
    lock: Option<StateLock>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    async fn start(state: Option<PersistedState>) -> Running {
        let dir = tempfile::tempdir().unwrap();
        if let Some(state) = state {
            StateStore::new(dir.path()).save(&state).unwrap();
        }
        let (lock, listener) = bind(dir.path()).await.unwrap();
        let shell = Shell::new(
            BrokerConfig::default(),
            StateStore::new(dir.path()),
            Arc::new(Metrics::new()),
        )
        .unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, shell, async move {
            let _ = stopped.await;
        }));
        Running {
            dir,
            lock: Some(lock),
            stop: Some(stop),
            task,
        }
    }

    async fn client(&self) -> AdminClient {
        AdminClient::connect(self.dir.path())
            .await
            .unwrap()
            .unwrap()
    }

    async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await.unwrap();
        self.lock = None;
    }
}

#[tokio::test]
async fn a_running_daemon_lists_revokes_blocks_and_unblocks() {
    let mut daemon = Running::start(Some(seeded_state(Instant::now()))).await;
    let socket = daemon.dir.path().join(SOCKET_FILE);
    let mode = std::fs::symlink_metadata(&socket)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    let listed = daemon.client().await.bindings().await.unwrap();
    assert_eq!(listed.bindings.len(), 4);
    assert!(listed.blocked.is_empty());
    let first = &listed.bindings[0];
    assert_eq!(first.fingerprint, OTHER.to_hex());
    assert_eq!(first.digest_prefix, "04".repeat(6));
    assert!(!first.tombstone && !first.blocked);
    assert_eq!(
        listed.bindings.iter().filter(|b| b.tombstone).count(),
        1,
        "{listed:?}"
    );

    let revoked = daemon
        .client()
        .await
        .act(Action::Revoke, &FP)
        .await
        .unwrap();
    assert_eq!(revoked.action, Action::Revoke);
    assert_eq!(revoked.fingerprint, FP.to_hex());
    assert_eq!(revoked.bindings, 2);
    assert_eq!(revoked.sessions, 0);
    assert!(revoked.worker_retired, "{revoked:?}");
    assert!(revoked.persisted && revoked.persist_error.is_none());
    let on_disk = StateStore::new(daemon.dir.path()).load().unwrap();
    assert!(on_disk.generations.is_empty(), "{on_disk:?}");
    assert!(
        on_disk
            .bindings
            .iter()
            .filter(|b| b.fingerprint == FP)
            .all(|b| b.tombstone_until.is_some())
    );
    assert!(
        on_disk
            .bindings
            .iter()
            .any(|b| b.fingerprint == OTHER && b.tombstone_until.is_none())
    );

    // Revoking again finds nothing left to end, and says so.
    let again = daemon
        .client()
        .await
        .act(Action::Revoke, &FP)
        .await
        .unwrap();
    assert_eq!((again.bindings, again.worker_retired), (0, false));

    let blocked = daemon
        .client()
        .await
        .act(Action::Block, &OTHER)
        .await
        .unwrap();
    assert_eq!(blocked.bindings, 1);
    assert!(!blocked.was_blocked);
    let listed = daemon.client().await.bindings().await.unwrap();
    assert_eq!(listed.blocked, vec![OTHER.to_hex()]);
    assert!(
        listed
            .bindings
            .iter()
            .filter(|b| b.fingerprint == OTHER.to_hex())
            .all(|b| b.blocked && b.tombstone)
    );
    assert_eq!(
        StateStore::new(daemon.dir.path()).load().unwrap().blocked,
        vec![OTHER]
    );

    let unblocked = daemon
        .client()
        .await
        .act(Action::Unblock, &OTHER)
        .await
        .unwrap();
    assert!(unblocked.was_blocked);
    let again = daemon
        .client()
        .await
        .act(Action::Unblock, &OTHER)
        .await
        .unwrap();
    assert!(!again.was_blocked);
    assert!(
        StateStore::new(daemon.dir.path())
            .load()
            .unwrap()
            .blocked
            .is_empty()
    );

    daemon.stop().await;
    assert!(!socket.exists(), "the socket is removed at stop");
    assert!(
        AdminClient::connect(daemon.dir.path())
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn bad_requests_get_json_errors() {
    let mut daemon = Running::start(None).await;
    let mut client = daemon.client().await;
    let error = client
        .request::<BindingsList>(Method::POST, "/bindings/xyz/revoke")
        .await
        .unwrap_err();
    assert!(
        matches!(&error, AdminClientError::Status { status: 400, message } if message.contains("64 hex")),
        "{error:?}"
    );
    let mut client = daemon.client().await;
    let error = client
        .request::<BindingsList>(Method::DELETE, "/bindings")
        .await
        .unwrap_err();
    assert!(
        matches!(error, AdminClientError::Status { status: 405, .. }),
        "{error:?}"
    );
    let mut client = daemon.client().await;
    let error = client
        .request::<BindingsList>(Method::GET, "/metrics")
        .await
        .unwrap_err();
    assert!(
        matches!(error, AdminClientError::Status { status: 404, .. }),
        "{error:?}"
    );
    daemon.stop().await;
}

#[tokio::test]
async fn a_second_daemon_on_the_same_state_directory_is_refused() {
    let mut daemon = Running::start(None).await;
    let error = bind(daemon.dir.path()).await.unwrap_err();
    assert!(
        matches!(error, AdminError::AlreadyRunning { .. }),
        "{error:?}"
    );
    // The refused start left the running daemon's socket alone.
    assert!(daemon.client().await.bindings().await.is_ok());
    daemon.stop().await;
}

#[tokio::test]
async fn a_stale_socket_is_replaced_and_a_foreign_file_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join(SOCKET_FILE);
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    assert_eq!(probe(dir.path()).unwrap(), Probe::Stale);
    let (lock, listener) = bind(dir.path()).await.unwrap();
    assert_eq!(probe(dir.path()).unwrap(), Probe::Answers);
    drop(listener);
    drop(lock);
    assert_eq!(probe(dir.path()).unwrap(), Probe::Absent);

    std::fs::write(&socket, "not a socket").unwrap();
    let error = bind(dir.path()).await.unwrap_err();
    assert!(matches!(error, AdminError::NotASocket { .. }), "{error:?}");
    assert_eq!(std::fs::read_to_string(&socket).unwrap(), "not a socket");
}

#[tokio::test]
async fn a_replaced_socket_file_is_not_removed_by_the_old_listener() {
    let dir = tempfile::tempdir().unwrap();
    let (_lock, listener) = bind(dir.path()).await.unwrap();
    let socket = listener.path().to_owned();
    std::fs::remove_file(&socket).unwrap();
    std::fs::write(&socket, "someone else's").unwrap();
    drop(listener);
    assert_eq!(std::fs::read_to_string(&socket).unwrap(), "someone else's");
}

#[tokio::test(start_paused = true)]
async fn a_start_waits_for_a_held_lock_then_gives_up() {
    let dir = tempfile::tempdir().unwrap();
    let held = StateLock::try_acquire(dir.path()).unwrap().unwrap();
    let error = bind(dir.path()).await.unwrap_err();
    assert!(matches!(error, AdminError::LockBusy { .. }), "{error:?}");
    drop(held);
    assert!(bind(dir.path()).await.is_ok());
}
