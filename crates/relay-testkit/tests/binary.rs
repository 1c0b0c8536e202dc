//! The `relay-stand-in` binary: announces its address, serves, and exits when its stdin ends or on SIGTERM.
//! The `relay-bare-proxy` binary: the same announcement, and the stand-in's answers passed on unchanged.

// The set-up helpers sit outside `#[test]` functions, where clippy's allow-unwrap-in-tests does not reach.
#![allow(
    clippy::unwrap_used,
    reason = "test set-up helpers fail the test on error"
)]

use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const WAIT: Duration = Duration::from_secs(10);

async fn start(args: &[&str]) -> (Child, String) {
    start_program(env!("CARGO_BIN_EXE_relay-stand-in"), args).await
}

async fn start_program(program: &str, args: &[&str]) -> (Child, String) {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    tokio::time::timeout(WAIT, BufReader::new(stdout).read_line(&mut line))
        .await
        .unwrap()
        .unwrap();
    let addr = line
        .strip_prefix("listening ")
        .unwrap()
        .trim_end()
        .to_owned();
    assert!(addr.starts_with("127.0.0.1:"), "{line:?}");
    (child, addr)
}

async fn exits_when_stdin_ends(mut child: Child) {
    drop(child.stdin.take());
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
}

async fn post(addr: &str, path: &str, body: &'static str) -> Bytes {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = http::Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .unwrap();
    let res = client.request(req).await.unwrap();
    assert_eq!(res.status(), 200);
    res.into_body().collect().await.unwrap().to_bytes()
}

#[tokio::test]
async fn serves_the_fixture_stream_and_exits_when_stdin_ends() {
    let (child, addr) = start(&["--port", "0", "--chunk-size", "7"]).await;
    let body = post(&addr, "/v1/chat/completions", r#"{"stream":true}"#).await;
    assert_eq!(body, relay_testkit::OPENAI_CHAT_SSE);
    exits_when_stdin_ends(child).await;
}

#[cfg(unix)]
#[tokio::test]
async fn stream_events_and_sigterm() {
    let (mut child, addr) = start(&["--port", "0", "--stream-events", "3", "--pace-ms", "1"]).await;
    let body = post(&addr, "/v1/messages", r#"{"stream":true}"#).await;
    let deltas = body
        .windows(b"text_delta".len())
        .filter(|w| w == b"text_delta")
        .count();
    assert_eq!(deltas, 3);
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn the_bare_proxy_passes_answers_on_and_exits_when_stdin_ends() {
    let (_stand_in, upstream) = start(&["--port", "0", "--chunk-size", "7"]).await;
    let (proxy, addr) = start_program(
        env!("CARGO_BIN_EXE_relay-bare-proxy"),
        &["--port", "0", "--upstream", &upstream],
    )
    .await;
    // Twice, so the second goes on the upstream connection the first opened.
    for _ in 0..2 {
        let body = post(&addr, "/v1/chat/completions", r#"{"stream":true}"#).await;
        assert_eq!(body, relay_testkit::OPENAI_CHAT_SSE);
    }
    exits_when_stdin_ends(proxy).await;
}
