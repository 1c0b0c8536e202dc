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

/// The last drops before a quiet spell get their line once the interval has passed, without
/// waiting for another drop; with nothing left to tell, no line.
#[test]
fn drops_left_unlogged_are_told_when_their_interval_has_passed() {
    let (capture, dispatch) = LogCapture::jsonl("warn");
    let counters = Counters::new("otlp");
    let start = Instant::now();
    tracing::dispatcher::with_default(&dispatch, || {
        counters.add_dropped(1, "collector_unreachable");
        counters.add_dropped(4, "queue_full");
        counters.report_suppressed(start + Duration::from_secs(5));
        assert_eq!(capture.contents().lines().count(), 1);
        counters.report_suppressed(start + Duration::from_secs(11));
        counters.report_suppressed(start + Duration::from_secs(30));
    });
    let logged = capture.contents();
    let lines: Vec<&str> = logged.lines().collect();
    assert_eq!(lines.len(), 2, "{logged}");
    assert!(
        lines[1].contains(r#""suppressed_since_last_emit":4"#),
        "{logged}"
    );
    assert!(lines[1].contains(r#""dropped_total":5"#), "{logged}");
    assert!(!lines[1].contains(r#""reason""#), "{logged}");
}
