//! §3.6 answers reach a client that writes its whole request before it reads (Python's
//! urllib, many SDKs): relayd closes such a connection gently, discarding what the client
//! still sends, instead of resetting it under the client's feet.

use relay_testkit::StandIn;
use tokio::io::AsyncWriteExt;

use crate::support::{Setup, Tripwire, read_response};

/// Well over what the loopback socket buffers hold, so a server that stops reading makes
/// the client's write fail unless it lingers.
const BODY: usize = 16 * 1024 * 1024;

fn post(host: &str, extra: &str, body_len: usize) -> Vec<u8> {
    let mut bytes = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         {extra}\r\n"
    )
    .into_bytes();
    bytes.resize(bytes.len() + body_len, b'x');
    bytes
}

/// Writes everything, then reads one response, as a write-first client does.
async fn write_all_then_read(relay: &crate::support::Relay, request: &[u8]) -> crate::support::RawResponse {
    let mut stream = relay.connect().await;
    if let Err(error) = stream.write_all(request).await {
        panic!("the client could not finish writing its request: {error}");
    }
    read_response(&mut stream).await
}

#[tokio::test]
async fn a_413_reaches_a_client_that_sends_its_whole_body_first() {
    let tripwire = Tripwire::new().await;
    let mut setup = Setup::new(&tripwire.base_url());
    setup.config.daemon.max_request_body_bytes = 1024;
    let relay = setup.start().await;
    let request = post(&relay.host(), &format!("Content-Length: {BODY}\r\n"), BODY);
    let res = write_all_then_read(&relay, &request).await;
    res.assert_error(413, "relay_payload_too_large");
    assert!(!tripwire.was_touched().await);
}

#[tokio::test]
async fn a_431_reaches_a_client_that_sends_its_whole_body_first() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    let fields: String = (0..150).map(|i| format!("x-h{i}: {i}\r\n")).collect();
    let request = post(
        &relay.host(),
        &format!("{fields}Content-Length: {BODY}\r\n"),
        BODY,
    );
    let res = write_all_then_read(&relay, &request).await;
    assert_eq!(res.status, 431);
    assert_eq!(stand_in.request_count(), 0);
}

#[tokio::test]
async fn a_400_reaches_a_client_that_sends_its_whole_body_first() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    let request = post(
        &relay.host(),
        &format!("Content-Length: {BODY}\r\nTransfer-Encoding: chunked\r\n"),
        BODY,
    );
    let res = write_all_then_read(&relay, &request).await;
    res.assert_error(400, "relay_bad_request");
    assert_eq!(stand_in.request_count(), 0);
}
