use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;

use super::*;

const SECRET: [u8; 32] = [7; 32];

fn encoded(secret: [u8; 32]) -> String {
    URL_SAFE_NO_PAD.encode(secret)
}

#[test]
fn no_secret_authorizes_nothing() {
    let state = WorkerState::new();
    assert!(!state.is_authorized(b""));
    assert!(!state.is_authorized(encoded(SECRET).as_bytes()));
    assert!(!state.snapshot().has_secret);
}

#[test]
fn the_secret_is_base64url_without_padding_and_replaced_on_resume() {
    let state = WorkerState::new();
    state.set_secret(SECRET);
    let header = encoded(SECRET);
    assert_eq!(header.len(), 43);
    assert!(state.is_authorized(header.as_bytes()));
    // Padded, standard alphabet, truncated, extended, other bytes: all refused.
    let mut other = SECRET;
    other[31] ^= 1;
    for wrong in [
        format!("{header}="),
        base64::engine::general_purpose::STANDARD.encode([0xfb; 32]),
        header[..42].to_owned(),
        format!("{header}A"),
        encoded(other),
        hex::encode(SECRET),
    ] {
        assert!(!state.is_authorized(wrong.as_bytes()), "{wrong}");
    }
    let fresh = [9; 32];
    state.set_secret(fresh);
    assert!(!state.is_authorized(header.as_bytes()));
    assert!(state.is_authorized(encoded(fresh).as_bytes()));
}

#[test]
fn debug_never_shows_the_secret() {
    let state = WorkerState::new();
    state.set_secret(SECRET);
    let shown = format!("{state:?}");
    assert!(!shown.contains(&encoded(SECRET)), "{shown}");
    assert!(shown.contains("has_secret: true"), "{shown}");
}

#[test]
fn admission_follows_phase_and_control() {
    let state = Arc::new(WorkerState::new());
    let admits = |kind| state.admit(kind).is_some();
    // Starting: nothing, and the probe says not ready.
    assert!(!admits(RequestKind::Model));
    assert!(!admits(RequestKind::Hook));
    assert!(!state.is_ready());
    state.set_ready();
    assert!(admits(RequestKind::Model));
    assert!(admits(RequestKind::Hook));
    assert!(state.is_ready());
    // Control lost: nothing new, the probe fails.
    state.set_control(false);
    assert!(!admits(RequestKind::Model));
    assert!(!admits(RequestKind::Hook));
    assert!(!state.is_ready());
    state.set_control(true);
    assert!(admits(RequestKind::Model));
    // Draining: hooks only.
    state.start_drain(Instant::now() + Duration::from_secs(60));
    assert!(!admits(RequestKind::Model));
    assert!(admits(RequestKind::Hook));
    assert!(!state.is_ready());
    // Draining without control: nothing.
    state.set_control(false);
    assert!(!admits(RequestKind::Hook));
    // A drain is never undone.
    state.set_control(true);
    state.set_ready();
    assert!(!admits(RequestKind::Model));
    assert!(matches!(state.snapshot().phase, Phase::Draining { .. }));
}

#[test]
fn a_drain_before_plugins_are_loaded_answers_no_hook_until_they_are() {
    let state = Arc::new(WorkerState::new());
    state.start_drain(Instant::now() + Duration::from_secs(60));
    assert!(state.admit(RequestKind::Hook).is_none());
    state.set_ready();
    assert!(state.admit(RequestKind::Hook).is_some());
    assert!(state.admit(RequestKind::Model).is_none());
}

#[test]
fn a_second_drain_never_moves_the_deadline_later() {
    let state = WorkerState::new();
    state.set_ready();
    let now = Instant::now();
    state.start_drain(now + Duration::from_secs(10));
    state.start_drain(now + Duration::from_secs(20));
    assert_eq!(
        state.snapshot().phase,
        Phase::Draining {
            deadline: now + Duration::from_secs(10),
            plugins_loaded: true
        }
    );
    state.start_drain(now + Duration::from_secs(5));
    assert_eq!(
        state.snapshot().phase,
        Phase::Draining {
            deadline: now + Duration::from_secs(5),
            plugins_loaded: true
        }
    );
}

#[test]
fn drained_resolves_once_the_last_request_ends() {
    let state = Arc::new(WorkerState::new());
    // Nothing in flight: at once.
    assert!(state.drained().now_or_never().is_some());
    state.set_ready();
    let first = state.admit(RequestKind::Model).unwrap();
    let second = state.admit(RequestKind::Hook).unwrap();
    assert_eq!(state.in_flight(), 2);
    assert_eq!(state.snapshot().in_flight, 2);
    let mut drained = Box::pin(state.drained());
    assert!((&mut drained).now_or_never().is_none());
    drop(first);
    assert_eq!(state.in_flight(), 1);
    assert!((&mut drained).now_or_never().is_none());
    drop(second);
    assert_eq!(state.in_flight(), 0);
    assert!(drained.now_or_never().is_some());
}

#[tokio::test(start_paused = true)]
async fn a_draining_worker_stays_for_late_hooks_until_it_has_been_quiet() {
    let state = Arc::new(WorkerState::new());
    state.set_ready();
    state.start_drain(Instant::now() + Duration::from_secs(60));
    let quiet = Duration::from_secs(2);
    let waiting = tokio::spawn({
        let state = state.clone();
        async move { state.quiet_for(quiet).await }
    });
    // A late hook arrives after one quiet second and takes a second itself.
    tokio::time::advance(Duration::from_secs(1)).await;
    let hook = state
        .admit(RequestKind::Hook)
        .expect("hooks are still answered");
    tokio::task::yield_now().await;
    tokio::time::advance(Duration::from_secs(1)).await;
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished());
    let ended = tokio::time::Instant::now();
    drop(hook);
    waiting.await.unwrap();
    assert!(
        ended.elapsed() >= quiet,
        "the quiet time restarts after the hook"
    );
}
