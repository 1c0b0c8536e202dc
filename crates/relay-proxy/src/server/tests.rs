use super::*;

#[test]
fn failed_accepts_are_logged_once_per_interval_with_the_count_left_out() {
    let mut failures = AcceptFailures::default();
    let start = Instant::now();
    assert_eq!(failures.note(start), Some(0));
    // About 50 a second while descriptors are out.
    for ms in (20..10_000).step_by(20) {
        assert_eq!(failures.note(start + Duration::from_millis(ms)), None);
    }
    assert_eq!(failures.note(start + ACCEPT_FAILURE_LOG_EVERY), Some(499));
    assert_eq!(failures.note(start + ACCEPT_FAILURE_LOG_EVERY), None);
}
