//! Waiting in tests for a condition other code makes true, with a deadline instead of a sleep.

use std::time::Duration;

/// Polls `check` every 10 ms until it holds (true) or `within` passes (false).
pub async fn eventually(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    let mut poll = tokio::time::interval(Duration::from_millis(10));
    loop {
        poll.tick().await;
        if check() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
    }
}
