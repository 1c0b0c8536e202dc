//! STYLE "Logging" and §4.1: no token, key or request body ever reaches a log line, even at
//! `trace` with every dependency's events enabled.

use bytes::Bytes;
use http::Method;
use http_body_util::Full;
use relay_logging::{LogCapture, LogConfig, LogFormat};
use relay_proxy::config::DaemonKeys;
use relay_proxy::front::{Mode, ProviderKeys};
use relay_testkit::{Behaviour, StandIn};
use tokio::io::AsyncWriteExt;

use crate::support::{Setup, WAIT, raw_exchange, read_response, token};

const OPENAI_KEY: &str = "sk-daemon-openai-SECRET-5d0e77";
const ANTHROPIC_KEY: &str = "sk-ant-daemon-SECRET-c41a09";
const CALLER_KEY: &str = "sk-caller-SECRET-8e21f3";
const MARKER: &str = "PROMPT-MARKER-SECRET-0b7d";

// Everything runs on this one thread, so the thread's default subscriber sees the events
// of every task: the front's connections, the upstream client and the stand-in.
#[tokio::test(flavor = "current_thread")]
async fn no_secret_reaches_the_log_at_trace_level() {
    let capture = LogCapture::new();
    let dispatch = relay_logging::subscriber(
        &LogConfig {
            level: "trace".into(),
            format: LogFormat::Jsonl,
        },
        capture.clone(),
    )
    .unwrap();
    let _default = tracing::dispatcher::set_default(&dispatch);

    let route_token = token();
    let other_token = token();
    let body = format!(
        r#"{{"model":"m","stream":true,"messages":[{{"role":"user","content":"{MARKER}"}}]}}"#
    );
    let stand_in = StandIn::start().await.unwrap();

    // Managed mode: a credentialed pass-through (logged), own keys, streams and failures.
    let relay = Setup::new(&stand_in.base_url()).start().await;
    let token_header = [
        ("x-relay-client-token", route_token.as_str()),
        ("authorization", &*format!("Bearer {CALLER_KEY}")),
        ("x-api-key", CALLER_KEY),
    ];
    for path in [
        "/v1/messages?beta=true",
        "/v1/responses",
        "/v1/chat/completions",
    ] {
        assert_eq!(relay.post(path, &token_header, &body).await.status, 200);
    }
    let h2 = relay
        .send_h2(
            relay
                .request(Method::POST, "/v1/messages")
                .header("content-type", "application/json")
                .header("x-relay-client-token", &route_token)
                .header("x-api-key", CALLER_KEY)
                .body(Full::new(Bytes::from(body.clone())))
                .unwrap(),
        )
        .await;
    assert_eq!(h2.status, 200);
    let hook = relay
        .post(
            "/hooks/claude-code",
            &[("x-relay-client-token", &route_token)],
            &format!(r#"{{"prompt":"{MARKER}"}}"#),
        )
        .await;
    assert_eq!(hook.status, 200);
    // Refusals that carry secrets: a malformed, a duplicated and a mistyped credential.
    let malformed = format!("{route_token}{MARKER}");
    assert_eq!(
        relay
            .post(
                "/v1/messages",
                &[("x-relay-client-token", &malformed)],
                &body
            )
            .await
            .status,
        401
    );
    assert_eq!(
        relay
            .post(
                "/v1/messages",
                &[
                    ("x-relay-client-token", &route_token),
                    ("x-relay-client-token", &other_token)
                ],
                &body,
            )
            .await
            .status,
        401
    );
    assert_eq!(
        relay
            .get(
                "/_relay/v1/route",
                &[("x-relay-client-token", &route_token)]
            )
            .await
            .status,
        200
    );
    // A provider error, a broken stream, a hang cut by the client.
    stand_in.set_behaviour(Behaviour {
        fail_after_bytes: Some(40),
        ..Behaviour::default()
    });
    let broken = crate::support::http1_client()
        .request(
            relay
                .request(Method::POST, "/v1/messages")
                .header("content-type", "application/json")
                .header("x-api-key", CALLER_KEY)
                .body(Full::new(Bytes::from(body.clone())))
                .unwrap(),
        )
        .await
        .unwrap();
    assert!(
        http_body_util::BodyExt::collect(broken.into_body())
            .await
            .is_err()
    );
    stand_in.set_behaviour(Behaviour::default());
    // Smuggling attempt and an oversized chunked body, both carrying the marker.
    let mut stream = relay.connect().await;
    let res = raw_exchange(
        &mut stream,
        format!(
            "POST /v1/messages HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             x-relay-client-token: {route_token}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n\
             {:x}\r\n{body}\r\n0\r\n\r\n",
            relay.host(),
            body.len()
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(res.status, 400);
    drop(relay);

    // Pass-through with daemon keys: the keys are sent upstream and logged nowhere.
    let mut setup = Setup::new(&stand_in.base_url());
    setup.mode = Mode::PassThrough;
    setup.config.upstream.daemon_keys = DaemonKeys::AnyLocal;
    setup.config.daemon.max_request_body_bytes = 64;
    setup.keys = ProviderKeys::new(Some(OPENAI_KEY), Some(ANTHROPIC_KEY)).unwrap();
    let relay = setup.start().await;
    stand_in.clear_requests();
    let small = format!(r#"{{"c":"{MARKER}"}}"#);
    for path in ["/v1/messages", "/v1/chat/completions"] {
        assert_eq!(relay.post(path, &[], &small).await.status, 200);
    }
    let recorded = stand_in.wait_for_requests(2, WAIT).await.unwrap();
    assert_eq!(recorded[0].header_str("x-api-key"), Some(ANTHROPIC_KEY));
    assert_eq!(
        recorded[1].header_str("authorization"),
        Some(&*format!("Bearer {OPENAI_KEY}"))
    );
    let mut stream = relay.connect().await;
    stream
        .write_all(
            format!(
                "POST /v1/messages HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
                 Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n",
                relay.host(),
                body.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    assert_eq!(read_response(&mut stream).await.status, 413);
    // An unreachable provider with the keys in hand.
    drop(relay);
    let closed = {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        listener.local_addr().unwrap()
    };
    let mut setup = Setup::new(&format!("http://{closed}"));
    setup.mode = Mode::PassThrough;
    setup.config.upstream.daemon_keys = DaemonKeys::AnyLocal;
    setup.keys = ProviderKeys::new(Some(OPENAI_KEY), Some(ANTHROPIC_KEY)).unwrap();
    let relay = setup.start().await;
    assert_eq!(
        relay
            .post(
                "/v1/chat/completions",
                &[("x-relay-client-token", &route_token)],
                &small
            )
            .await
            .status,
        502
    );
    relay.stop().await;
    stand_in.shutdown().await;

    let log = capture.contents();
    // The capture really saw this run: lifecycle events and dependency traces.
    assert!(log.contains("public_request_pass_through"), "{log}");
    assert!(log.contains("upstream_request_failed"), "{log}");
    // A body over the limit is the client's doing, not a provider failure.
    assert!(!log.contains(r#""reason":"body_too_large""#), "{log}");
    assert!(log.lines().count() > 20, "{log}");
    for secret in [
        route_token.as_str(),
        other_token.as_str(),
        OPENAI_KEY,
        ANTHROPIC_KEY,
        CALLER_KEY,
        MARKER,
    ] {
        assert!(!log.contains(secret), "{secret:?} appears in the log");
    }
    // Not even a recognisable piece of a key.
    assert!(
        !log.contains("SECRET"),
        "a secret fragment appears in the log"
    );
}
