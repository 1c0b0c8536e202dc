use std::time::{Duration, Instant};

use super::DropLog;

#[test]
fn the_first_drop_logs_then_one_line_per_interval_with_the_suppressed_count() {
    let base = Instant::now();
    let log = DropLog::new(base, Duration::from_secs(10));
    let at = |ms| base + Duration::from_millis(ms);
    assert_eq!(log.on_drop(at(0), 1), Some(0));
    assert_eq!(log.on_drop(at(1), 1), None);
    assert_eq!(log.on_drop(at(9_999), 3), None);
    assert_eq!(log.on_drop(at(10_000), 1), Some(4));
    assert_eq!(log.on_drop(at(10_001), 1), None);
    assert_eq!(log.on_drop(at(25_000), 2), Some(1));
}
