use std::time::{Duration, Instant};

use relay_logging::LogCapture;

use super::{Counters, DropLog};

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

#[test]
fn a_collector_refusing_every_batch_is_logged_once_per_interval() {
    let (capture, dispatch) = LogCapture::jsonl("warn");
    let counters = Counters::new("http");
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..300 {
            counters.add_refused(10, 500);
        }
    });
    let logged = capture.contents();
    assert_eq!(logged.lines().count(), 2, "{logged}");
    assert_eq!(logged.matches(r#""event":"sink_batch_refused""#).count(), 1);
    assert!(logged.contains(r#""status":500"#), "{logged}");
    assert_eq!(
        logged.matches(r#""event":"sink_records_dropped""#).count(),
        1
    );
    assert_eq!(counters.stats().dropped, 3000);
}
