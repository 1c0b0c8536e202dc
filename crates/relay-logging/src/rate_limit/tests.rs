use std::time::{Duration, Instant};

use uuid::Uuid;

use super::*;
use crate::test_support::capture_json;

const FINGERPRINT: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const OTHER_FINGERPRINT: &str = "ffffffffffffabcdef0123456789abcdef0123456789abcdef0123456789abcd";

fn worker_failure(worker: u128, reason: &'static str) -> ProviderFailure<'static> {
    ProviderFailure::WorkerRequestFailed {
        route: PublicRoute::Openai,
        fingerprint: FINGERPRINT,
        worker_id: Uuid::from_u128(worker),
        reason,
    }
}

fn upstream_failure(fingerprint: Option<&'static str>) -> ProviderFailure<'static> {
    ProviderFailure::UpstreamRequestFailed {
        route: PublicRoute::Anthropic,
        fingerprint,
        reason: "connect_failed",
    }
}

fn seconds(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[test]
fn one_emit_per_key_per_interval_reporting_the_suppressed_count() {
    let mut limiter = RateLimiter::default();
    let start = Instant::now();
    let failure = worker_failure(1, "response_head_timeout");
    let outcomes: Vec<bool> = [0, 1, 5, 9]
        .into_iter()
        .map(|at| limiter.emit(start + seconds(at), &failure))
        .collect();
    assert_eq!(outcomes, [true, false, false, false]);

    let lines = capture_json(|| {
        assert!(limiter.emit(start + seconds(10), &failure));
        assert!(!limiter.emit(start + seconds(11), &failure));
        assert!(limiter.emit(start + seconds(25), &failure));
    });
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["suppressed_since_last_emit"], 3);
    assert_eq!(lines[1]["suppressed_since_last_emit"], 1);
    for line in &lines {
        assert_eq!(line["event"], "worker_request_failed");
        assert_eq!(line["level"], "warn");
        assert_eq!(line["reason"], "response_head_timeout");
        assert_eq!(line["route"], "openai");
        assert_eq!(line["fingerprint"], "0123456789ab");
        assert_eq!(line["worker_id"], Uuid::from_u128(1).to_string());
    }
}

#[test]
fn the_first_emit_reports_zero_suppressed() {
    let mut limiter = RateLimiter::default();
    let lines = capture_json(|| {
        limiter.emit(Instant::now(), &upstream_failure(None));
    });
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["suppressed_since_last_emit"], 0);
    assert_eq!(lines[0]["event"], "upstream_request_failed");
    assert!(!lines[0].contains_key("fingerprint"));
}

#[test]
fn different_keys_do_not_hide_each_other() {
    let mut limiter = RateLimiter::default();
    let now = Instant::now();
    let failures = [
        worker_failure(1, "response_head_timeout"),
        worker_failure(2, "response_head_timeout"),
        worker_failure(1, "connect_failed"),
        upstream_failure(None),
        upstream_failure(Some(FINGERPRINT)),
        upstream_failure(Some(OTHER_FINGERPRINT)),
        ProviderFailure::WorkerCommunicationFailed {
            fingerprint: FINGERPRINT,
            worker_id: Uuid::from_u128(1),
            reason: "response_head_timeout",
        },
    ];
    for failure in &failures {
        assert!(limiter.emit(now, failure), "{failure:?}");
    }
    for failure in &failures {
        assert!(!limiter.emit(now + seconds(1), failure), "{failure:?}");
    }
    assert_eq!(limiter.tracked_keys(), failures.len());
}

#[test]
fn the_interval_is_configurable() {
    let mut limiter = RateLimiter::new(Duration::from_millis(500));
    let start = Instant::now();
    let failure = worker_failure(1, "response_aborted");
    assert!(limiter.emit(start, &failure));
    assert!(!limiter.emit(start + Duration::from_millis(499), &failure));
    assert!(limiter.emit(start + Duration::from_millis(500), &failure));
}

#[test]
fn a_clock_going_backwards_suppresses_instead_of_panicking() {
    let mut limiter = RateLimiter::default();
    let start = Instant::now() + seconds(100);
    let failure = worker_failure(1, "connect_failed");
    assert!(limiter.emit(start, &failure));
    assert!(!limiter.emit(start - seconds(50), &failure));
}

#[test]
fn expired_keys_are_pruned_when_many_are_tracked() {
    let mut limiter = RateLimiter::default();
    let start = Instant::now();
    for worker in 0..RateLimiter::PRUNE_ABOVE as u128 {
        assert!(limiter.emit(start, &worker_failure(worker, "connect_failed")));
    }
    assert_eq!(limiter.tracked_keys(), RateLimiter::PRUNE_ABOVE);
    // Still inside the interval: nothing can be dropped, the new key is added.
    assert!(limiter.emit(
        start + seconds(1),
        &worker_failure(u128::MAX, "connect_failed")
    ));
    assert_eq!(limiter.tracked_keys(), RateLimiter::PRUNE_ABOVE + 1);
    // After the interval every old key has expired and is dropped.
    let later = start + RateLimiter::DEFAULT_INTERVAL + seconds(1);
    assert!(limiter.emit(later, &worker_failure(u128::MAX - 1, "connect_failed")));
    assert_eq!(limiter.tracked_keys(), 1);
}

#[test]
fn the_default_interval_is_ten_seconds() {
    assert_eq!(RateLimiter::DEFAULT_INTERVAL, seconds(10));
}

#[test]
fn a_throttle_lets_one_line_through_per_interval_with_the_count_left_out() {
    // A server out of descriptors, retrying its accept about 50 times a second.
    let every = Duration::from_secs(10);
    let mut failures = Throttle::default();
    let start = Instant::now();
    assert_eq!(failures.admit(start, every), Some(0));
    for ms in (20..10_000).step_by(20) {
        assert_eq!(
            failures.admit(start + Duration::from_millis(ms), every),
            None
        );
    }
    assert_eq!(failures.admit(start + every, every), Some(499));
    assert_eq!(failures.admit(start + every, every), None);
}
