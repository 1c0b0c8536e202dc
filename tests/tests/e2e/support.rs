//! What several test modules share: timeouts, the config that points relayd at a stand-in,
//! and fresh secrets.

use std::time::Duration;

use http::{Method, StatusCode};
use relay_e2e::Relayd;
use relay_e2e::http::{fetch, request};
use relay_identity::RouteToken;
use relay_testkit::StandIn;

/// For a log line or a recorded request that should appear almost at once.
pub(crate) const EVENT_TIMEOUT: Duration = Duration::from_secs(10);
/// For a relayd command that should exit at once (help, usage errors, subcommands).
pub(crate) const CLI_TIMEOUT: Duration = Duration::from_secs(20);

/// The `[upstream]` table that sends both provider families to `stand_in`, plus `extra`
/// lines appended to it.
pub(crate) fn upstream_config(stand_in: &StandIn, extra: &str) -> String {
    let base = stand_in.base_url();
    format!("[upstream]\nanthropic_base_url = \"{base}\"\nopenai_base_url = \"{base}/v1\"\n{extra}")
}

/// A fresh route token in its wire form (43 characters of base64url).
pub(crate) fn fresh_token() -> anyhow::Result<String> {
    Ok(RouteToken::generate()?.encode())
}

/// A fresh string that appears nowhere unless a test put it there.
pub(crate) fn marker(label: &str) -> anyhow::Result<String> {
    let bytes = relay_identity::random_id_bytes()?;
    let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    Ok(format!("relay-e2e-{label}-{hex}"))
}

/// The JSON event's string field, or "" (for assertions with readable failures).
pub(crate) fn field<'a>(event: &'a serde_json::Value, name: &str) -> &'a str {
    event[name].as_str().unwrap_or_default()
}

/// Whether SPEC §3.2 has relayd forward a request header unchanged: everything but the
/// hop-by-hop headers, `host`, Relay's own `x-relay-*`, and the framing headers (outgoing
/// framing comes from the body, §3.6).
pub(crate) fn passes_unchanged(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    !(matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "host"
            | "content-length"
    ) || name.starts_with("proxy-")
        || name.starts_with("x-relay-"))
}

/// `GET /healthz` answers 200 `ok` from the daemon that was started (same instance id).
pub(crate) async fn assert_healthy(relayd: &Relayd) -> anyhow::Result<()> {
    let (status, headers, body) = fetch(
        relayd.addr(),
        request(Method::GET, "/healthz", &[], bytes::Bytes::new())?,
    )
    .await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        headers.get("cache-control").map(|v| v.as_bytes()),
        Some(&b"no-store"[..])
    );
    let health: serde_json::Value = serde_json::from_slice(&body)?;
    assert_eq!(health["service"], "relayd");
    assert_eq!(health["status"], "ok");
    assert_eq!(
        health["instance_id"],
        relayd.listening_event()["instance_id"],
        "the daemon that answered is the one that was started"
    );
    Ok(())
}
