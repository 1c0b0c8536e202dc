//! Waiting in tests for a condition other code makes true, with a deadline instead of a sleep.

use std::future::Future;
use std::time::Duration;

/// Polls `check` every 10 ms until it holds (true) or `within` passes (false).
pub async fn eventually(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    eventually_some(within, || std::future::ready(check().then_some(())))
        .await
        .is_some()
}

/// Polls the asynchronous `check` every 10 ms until it gives a value, or `within` passes
/// (`None`): for a condition only a request can observe.
pub async fn eventually_some<T, F>(within: Duration, mut check: impl FnMut() -> F) -> Option<T>
where
    F: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    let mut poll = tokio::time::interval(Duration::from_millis(10));
    loop {
        poll.tick().await;
        if let Some(value) = check().await {
            return Some(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
    }
}
