use std::time::Duration;

use tokio_tungstenite::tungstenite;

use super::{ConnectError, MAX_RETRY_AFTER};

fn refused_upgrade(status: u16, retry_after: Option<&str>) -> ConnectError {
    let mut res = http::Response::builder().status(status);
    if let Some(value) = retry_after {
        res = res.header(http::header::RETRY_AFTER, value);
    }
    let res = res.body(None).unwrap();
    ConnectError::Handshake(tungstenite::Error::Http(Box::new(res)))
}

#[test]
fn only_a_429_asks_the_client_to_wait_and_never_longer_than_the_cap() {
    assert_eq!(
        refused_upgrade(429, Some("7")).retry_after(),
        Some(Duration::from_secs(7))
    );
    assert_eq!(
        refused_upgrade(429, Some("86400")).retry_after(),
        Some(MAX_RETRY_AFTER)
    );
    // No usable value, or a 503 for want of a handshake place: the client's own schedule.
    for error in [
        refused_upgrade(429, None),
        refused_upgrade(429, Some("soon")),
        refused_upgrade(429, Some("-1")),
        refused_upgrade(503, Some("30")),
        ConnectError::Timeout(Duration::from_secs(1)),
    ] {
        assert_eq!(error.retry_after(), None, "{error}");
    }
}
