use std::time::Duration;

use relay_identity::DaemonAddress;
use tokio_tungstenite::tungstenite;

use super::{ConnectError, MAX_RETRY_AFTER};

const GRACE: Duration = Duration::from_secs(30);

fn remote() -> DaemonAddress {
    DaemonAddress::parse("https://10.0.0.1:8443").unwrap()
}

fn refused_upgrade(status: u16, retry_after: Option<&str>) -> ConnectError {
    let mut res = http::Response::builder().status(status);
    if let Some(value) = retry_after {
        res = res.header(http::header::RETRY_AFTER, value);
    }
    let res = res.body(None).unwrap();
    ConnectError::Handshake(tungstenite::Error::Http(Box::new(res)))
}

#[test]
fn only_a_remote_daemons_429_asks_the_client_to_wait() {
    assert_eq!(
        refused_upgrade(429, Some("7")).retry_after(&remote(), GRACE),
        Some(Duration::from_secs(7))
    );
    // No usable value, or a 503 for want of a handshake place: the client's own schedule.
    for error in [
        refused_upgrade(429, None),
        refused_upgrade(429, Some("soon")),
        refused_upgrade(429, Some("-1")),
        refused_upgrade(503, Some("30")),
        ConnectError::Timeout(Duration::from_secs(1)),
    ] {
        assert_eq!(error.retry_after(&remote(), GRACE), None, "{error}");
    }
}

/// Whoever answers the upgrade can send a 429 before the daemon has proved its key: it may
/// not hold a client back for its whole grace, nor at all on loopback, where relayd never
/// limits handshakes and another local user could hold the port while relayd restarts.
#[test]
fn a_429_cannot_hold_a_client_past_half_its_grace_nor_at_all_on_loopback() {
    let forever = refused_upgrade(429, Some("86400"));
    assert_eq!(forever.retry_after(&remote(), GRACE), Some(GRACE / 2));
    assert_eq!(
        forever.retry_after(&remote(), Duration::from_secs(600)),
        Some(MAX_RETRY_AFTER)
    );
    for local in ["http://127.0.0.1:47632", "http://localhost:47632"] {
        let daemon = DaemonAddress::parse(local).unwrap();
        assert_eq!(forever.retry_after(&daemon, GRACE), None, "{local}");
    }
}
