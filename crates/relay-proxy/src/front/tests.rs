//! The rules of the front that depend on the TCP peer, checked directly: an integration test
//! can only make a non-loopback peer where the machine has a non-loopback address.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderValue, Method, Request, StatusCode};
use http_body_util::BodyExt;
use relay_broker::RequestKind;
use relay_identity::RouteToken;
use relay_proto::PassThroughReason;

use super::credential::{Credential, Refusal, Routed, parse_credential};
use super::hook::hook_event;
use super::*;
use crate::answers::upstream_error;
use crate::config::DaemonKeys;
use crate::conn::ConnState;
use crate::headers;
use crate::routes::Agent;
use crate::upstream::UpstreamError;
use crate::upstream::UpstreamOptions;

const PORT: u16 = 47632;

fn front(bind: Ipv4Addr, mode: Mode, advertised: Advertised, config: Config) -> Front {
    let upstream = UpstreamClient::new(&UpstreamOptions {
        connect_timeout: Duration::from_secs(1),
        response_timeout: None,
        proxy_url: None,
        max_connections: 1024,
        no_proxy: None,
    })
    .unwrap();
    Front::new(
        FrontOptions {
            bind,
            port: PORT,
            advertised,
            mode,
            allow_anonymous_pass_through: false,
            config: Arc::new(config),
            instance_id: Uuid::now_v7(),
        },
        upstream,
        ProviderKeys::new(Some("sk-o"), Some("sk-a")).unwrap(),
        Arc::new(Metrics::new()),
    )
}

fn local_front() -> Front {
    front(
        Ipv4Addr::LOCALHOST,
        Mode::Managed,
        Advertised {
            https: false,
            host: "127.0.0.1".into(),
            port: PORT,
        },
        Config::default(),
    )
}

fn remote_front(config: Config) -> Front {
    front(
        Ipv4Addr::UNSPECIFIED,
        Mode::Managed,
        Advertised {
            https: true,
            host: "relay.example.com".into(),
            port: 443,
        },
        config,
    )
}

fn conn(peer: [u8; 4]) -> ConnContext {
    ConnContext {
        peer: SocketAddr::from((peer, 50000)),
        local: SocketAddr::from(([127, 0, 0, 1], PORT)),
        tls: false,
        state: Arc::new(ConnState::new()),
    }
}

const LOOPBACK: [u8; 4] = [127, 0, 0, 1];
const REMOTE: [u8; 4] = [192, 0, 2, 7];

fn with_host(host: &str) -> Request<()> {
    Request::builder()
        .uri("/v1/messages")
        .header(header::HOST, host)
        .body(())
        .unwrap()
}

#[test]
fn loopback_names_need_a_loopback_peer_and_the_listening_port() {
    let front = remote_front(Config::default());
    let p = PORT;
    for (host, from_loopback, from_remote) in [
        (format!("127.0.0.1:{p}"), true, false),
        (format!("localhost:{p}"), true, false),
        (format!("LocalHost:{p}"), true, false),
        ("localhost".to_owned(), false, false),
        ("127.0.0.1".to_owned(), false, false),
        (format!("localhost:{}", p + 1), false, false),
        (format!("127.0.0.2:{p}"), false, false),
        ("relay.example.com".to_owned(), true, true),
        ("relay.example.com:443".to_owned(), true, true),
        ("RELAY.Example.COM".to_owned(), true, true),
        ("relay.example.com:80".to_owned(), false, false),
        (format!("relay.example.com:{p}"), false, false),
        ("relay.example.com:".to_owned(), false, false),
        ("relay.example.com:https".to_owned(), false, false),
        ("evil.example".to_owned(), false, false),
        ("user@relay.example.com".to_owned(), false, false),
        (String::new(), false, false),
    ] {
        let req = with_host(&host);
        assert_eq!(
            front.host_refusal(&req, &conn(LOOPBACK)).is_none(),
            from_loopback,
            "{host:?} from loopback"
        );
        assert_eq!(
            front.host_refusal(&req, &conn(REMOTE)).is_none(),
            from_remote,
            "{host:?} from a remote peer"
        );
    }
    // No Host at all.
    let req = Request::builder().uri("/").body(()).unwrap();
    assert!(front.host_refusal(&req, &conn(LOOPBACK)).is_some());
}

#[test]
fn the_default_port_of_an_http_origin_is_80() {
    let front = front(
        Ipv4Addr::LOCALHOST,
        Mode::Managed,
        Advertised {
            https: false,
            host: "relay.lan".into(),
            port: 80,
        },
        Config::default(),
    );
    assert!(
        front
            .host_refusal(&with_host("relay.lan"), &conn(REMOTE))
            .is_none()
    );
    assert!(
        front
            .host_refusal(&with_host("relay.lan:80"), &conn(REMOTE))
            .is_none()
    );
    assert!(
        front
            .host_refusal(&with_host("relay.lan:443"), &conn(REMOTE))
            .is_some()
    );
}

/// An absolute-form target (HTTP/1.1) or `:authority` (HTTP/2) names the host the request
/// is for, and so does a Host header beside it: each must be served here, so a foreign name
/// cannot pass beside a good one.
#[test]
fn the_uri_authority_and_the_host_header_must_both_be_served_here() {
    let front = local_front();
    let request = |uri: String, host: String| {
        Request::builder()
            .uri(uri)
            .header(header::HOST, host)
            .body(())
            .unwrap()
    };
    for (uri, host) in [
        (
            format!("http://evil.example:{PORT}/v1/messages"),
            format!("127.0.0.1:{PORT}"),
        ),
        (
            format!("http://localhost:{PORT}/v1/messages"),
            "evil.example".to_owned(),
        ),
    ] {
        assert!(
            front
                .host_refusal(&request(uri, host), &conn(LOOPBACK))
                .is_some()
        );
    }
    let req = request(
        format!("http://localhost:{PORT}/v1/messages"),
        format!("127.0.0.1:{PORT}"),
    );
    assert!(front.host_refusal(&req, &conn(LOOPBACK)).is_none());
}

#[test]
fn status_endpoints_are_visible_to_remote_peers_only_when_public() {
    let local = local_front();
    assert!(local.is_status_visible(IpAddr::from(LOOPBACK)));
    let remote = remote_front(Config::default());
    assert!(remote.is_status_visible(IpAddr::from(LOOPBACK)));
    assert!(remote.is_status_visible(IpAddr::from([127, 1, 2, 3])));
    assert!(!remote.is_status_visible(IpAddr::from(REMOTE)));
    let mut config = Config::default();
    config.daemon.status_public = true;
    let public = remote_front(config);
    assert!(public.is_status_visible(IpAddr::from(REMOTE)));
}

fn keyed(bind: Ipv4Addr, mode: Mode, daemon_keys: DaemonKeys) -> Front {
    let mut config = Config::default();
    config.upstream.daemon_keys = daemon_keys;
    front(
        bind,
        mode,
        Advertised {
            https: false,
            host: "127.0.0.1".into(),
            port: PORT,
        },
        config,
    )
}

#[test]
fn daemon_keys_need_every_condition() {
    let none = HeaderMap::new();
    let yes = keyed(Ipv4Addr::LOCALHOST, Mode::PassThrough, DaemonKeys::AnyLocal);
    assert!(yes.may_add_daemon_keys(&none, &conn(LOOPBACK), true, false));
    // Each condition failing alone.
    let managed = keyed(Ipv4Addr::LOCALHOST, Mode::Managed, DaemonKeys::AnyLocal);
    assert!(!managed.may_add_daemon_keys(&none, &conn(LOOPBACK), true, true));
    let strict = keyed(
        Ipv4Addr::LOCALHOST,
        Mode::RequireWorker,
        DaemonKeys::AnyLocal,
    );
    assert!(!strict.may_add_daemon_keys(&none, &conn(LOOPBACK), true, true));
    let exposed = keyed(
        Ipv4Addr::UNSPECIFIED,
        Mode::PassThrough,
        DaemonKeys::AnyLocal,
    );
    assert!(!exposed.may_add_daemon_keys(&none, &conn(LOOPBACK), true, true));
    // A remote peer on a loopback bind cannot happen through the kernel, but the rule holds
    // on its own.
    assert!(!yes.may_add_daemon_keys(&none, &conn(REMOTE), true, true));
    assert!(!yes.may_add_daemon_keys(&none, &conn(LOOPBACK), false, true));
    for name in [
        "authorization",
        "x-api-key",
        "api-key",
        "anthropic-api-key",
        "forwarded",
        "x-forwarded-for",
        "via",
    ] {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::HeaderName::from_static(name),
            HeaderValue::from_static("x"),
        );
        assert!(
            !yes.may_add_daemon_keys(&headers, &conn(LOOPBACK), true, true),
            "{name}"
        );
    }
    let bound_only = keyed(
        Ipv4Addr::LOCALHOST,
        Mode::PassThrough,
        DaemonKeys::BoundOnly,
    );
    assert!(!bound_only.may_add_daemon_keys(&none, &conn(LOOPBACK), true, false));
    assert!(bound_only.may_add_daemon_keys(&none, &conn(LOOPBACK), true, true));
}

fn token() -> RouteToken {
    RouteToken::from_bytes([7; 32])
}

/// A decision as a comparable value: (pass-through reason, credentialed) or `None` for 401
/// (for a well-formed token, the 401 that says it is bound to no route).
fn summary(decision: &Result<Routed, Refusal>) -> Option<(PassThroughReason, bool)> {
    match decision {
        Ok(Routed::PassThrough {
            reason,
            credentialed,
            fingerprint: None,
            ticket: None,
        }) => Some((*reason, *credentialed)),
        Err(Refusal::Unauthorized | Refusal::Unbound) => None,
        other => panic!("unexpected decision without bound routes: {other:?}"),
    }
}

#[tokio::test]
async fn the_credential_table_without_bound_routes() {
    const U: Option<(PassThroughReason, bool)> = None;
    let pass = |reason, credentialed| Some((reason, credentialed));
    let local = |mode| keyed(Ipv4Addr::LOCALHOST, mode, DaemonKeys::BoundOnly);
    let cases = [
        (
            local(Mode::Managed),
            pass(PassThroughReason::MissingCredential, false),
            pass(PassThroughReason::UnboundCredential, true),
        ),
        (
            local(Mode::PassThrough),
            pass(PassThroughReason::ConfiguredPassThrough, false),
            pass(PassThroughReason::ConfiguredPassThrough, true),
        ),
        (local(Mode::RequireWorker), U, U),
        (
            keyed(Ipv4Addr::UNSPECIFIED, Mode::Managed, DaemonKeys::BoundOnly),
            U,
            U,
        ),
        (
            keyed(
                Ipv4Addr::new(10, 0, 0, 5),
                Mode::PassThrough,
                DaemonKeys::BoundOnly,
            ),
            U,
            U,
        ),
    ];
    let decide = |front: &Front, credential: Credential| {
        let decision =
            futures_util::FutureExt::now_or_never(front.decide(&credential, RequestKind::Model));
        summary(&decision.expect("no wait without a broker"))
    };
    for (front, missing, unbound) in cases {
        let mode = front.options.mode;
        assert_eq!(decide(&front, Credential::Missing), missing, "{mode:?}");
        assert_eq!(
            decide(&front, Credential::Token(token())),
            unbound,
            "{mode:?}"
        );
        assert_eq!(decide(&front, Credential::Invalid), U, "{mode:?}");
    }
    // Anonymous pass-through allowed on a non-loopback bind.
    let mut open = keyed(Ipv4Addr::UNSPECIFIED, Mode::Managed, DaemonKeys::BoundOnly);
    open.options.allow_anonymous_pass_through = true;
    assert_eq!(
        decide(&open, Credential::Missing),
        pass(PassThroughReason::MissingCredential, false)
    );
    assert_eq!(decide(&open, Credential::Invalid), U);
    open.options.mode = Mode::RequireWorker;
    assert_eq!(decide(&open, Credential::Token(token())), U);
}

#[test]
fn credentials_are_parsed_strictly() {
    let valid = token().encode();
    let parse = |values: &[&str]| {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(headers::CLIENT_TOKEN, HeaderValue::from_str(value).unwrap());
        }
        parse_credential(&headers)
    };
    assert!(matches!(parse(&[]), Credential::Missing));
    assert!(matches!(parse(&[&valid]), Credential::Token(_)));
    assert!(matches!(parse(&[&valid, &valid]), Credential::Invalid));
    assert!(matches!(parse(&[""]), Credential::Invalid));
    assert!(matches!(parse(&[&valid[..42]]), Credential::Invalid));
    assert!(matches!(
        parse(&[&format!("{valid}=")]),
        Credential::Invalid
    ));
    let mut headers = HeaderMap::new();
    headers.insert(
        headers::CLIENT_TOKEN,
        HeaderValue::from_bytes(b"\xff\xfe").unwrap(),
    );
    assert!(matches!(parse_credential(&headers), Credential::Invalid));
}

#[test]
fn hook_bodies_must_be_json_objects() {
    // A lone surrogate escape is valid JSON (JavaScript writes one for an emoji cut in two),
    // and the worker reads it too.
    for ok in [
        &b"{}"[..],
        b" \r\n{\"a\":[1]}\n",
        b"{\"a\":{\"b\":null}}",
        br#"{"a":"\ud83d"}"#,
    ] {
        assert!(hook_event(ok).is_some(), "{ok:?}");
    }
    for bad in [
        &b""[..],
        b"[]",
        b"null",
        b"\"{}\"",
        b"1",
        b"{} {}",
        b"{",
        b"{\"a\":1,}",
        b"\xef\xbb\xbf{}",
        // Not UTF-8, so not JSON, wherever the byte is.
        b"{\"a\":\"\xff\"}",
        b"{\"hook_event_name\":\"SessionStart\",\"a\":\"\xc3\"}",
    ] {
        assert!(hook_event(bad).is_none(), "{bad:?}");
    }
    // The worker's reading decides, so a body is taken or refused alike with or without a
    // worker: past serde_json's nesting limit, or with a number no f64 holds, neither
    // reads it.
    let nested = |depth: usize| {
        format!(
            "{{\"hook_event_name\":\"PreToolUse\",\"tool_input\":{}{}}}",
            "[".repeat(depth),
            "]".repeat(depth)
        )
    };
    let worker_reads = |body: &[u8]| {
        matches!(
            relay_plugins::parse_value(body),
            Some(serde_json::Value::Object(_))
        )
    };
    for body in (100..200)
        .map(nested)
        .chain(["{\"n\":1e400}".to_owned(), "{\"n\":1e300}".to_owned()])
    {
        let read = hook_event(body.as_bytes()).is_some();
        assert_eq!(read, worker_reads(body.as_bytes()), "{body}");
    }
    assert!(hook_event(nested(100).as_bytes()).is_some());
    assert!(hook_event(nested(199).as_bytes()).is_none());
    assert!(hook_event(b"{\"n\":1e400}").is_none());
}

#[tokio::test]
async fn upstream_failures_map_to_their_statuses() {
    let boxed = || Box::new(std::io::Error::other("x")) as Box<dyn std::error::Error + Send + Sync>;
    for (failure, status, kind) in [
        (
            UpstreamError::BodyTooLarge { limit: 5 },
            StatusCode::PAYLOAD_TOO_LARGE,
            "relay_payload_too_large",
        ),
        (
            UpstreamError::ConnectTimeout,
            StatusCode::GATEWAY_TIMEOUT,
            "relay_upstream_timeout",
        ),
        (
            UpstreamError::ResponseHeadTimeout,
            StatusCode::GATEWAY_TIMEOUT,
            "relay_upstream_timeout",
        ),
        (
            UpstreamError::Unreachable(boxed()),
            StatusCode::BAD_GATEWAY,
            "relay_upstream_unreachable",
        ),
        (
            UpstreamError::Failed(boxed()),
            StatusCode::BAD_GATEWAY,
            "relay_upstream_unreachable",
        ),
    ] {
        let res = upstream_error(&failure);
        assert_eq!(res.status(), status, "{failure:?}");
        assert_eq!(res.headers()[header::CACHE_CONTROL], "no-store");
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value["error"]["type"], kind, "{failure:?}");
    }
}

#[test]
fn refusals_are_counted_under_the_family_of_their_path() {
    let label = |method: Method, path: &str| route_label(PathClass::classify(&method, path));
    assert_eq!(label(Method::POST, "/v1/messages"), RouteLabel::Anthropic);
    assert_eq!(
        label(Method::POST, "/v1/messages/count_tokens"),
        RouteLabel::Anthropic
    );
    assert_eq!(label(Method::POST, "/v1/responses"), RouteLabel::Openai);
    assert_eq!(
        label(Method::POST, "/backend-api/codex/responses"),
        RouteLabel::Openai
    );
    assert_eq!(label(Method::GET, "/v1/models"), RouteLabel::Openai);
    assert_eq!(label(Method::POST, "/hooks/pi"), RouteLabel::Hook);
    assert_eq!(label(Method::GET, "/healthz"), RouteLabel::Status);
    assert_eq!(label(Method::GET, "/nope"), RouteLabel::Other);
}

#[test]
fn hook_events_are_read_from_the_payload() {
    assert_eq!(
        hook_event(br#"{"hook_event_name":"SessionStart","x":[1]}"#),
        Some(Some("SessionStart"))
    );
    assert_eq!(hook_event(br#"{"session_id":"s"}"#), Some(None));
    assert_eq!(hook_event(br#"{"hook_event_name":7}"#), Some(None));
    assert_eq!(
        hook_event(br#"{"hook_event_name":"Session\u0053tart"}"#),
        Some(None)
    );
    assert_eq!(hook_event(br#"["hook_event_name"]"#), None);
    assert!(Agent::ClaudeCode.is_opening_event("SessionStart"));
    assert!(Agent::Codex.is_opening_event("UserPromptSubmit"));
    assert!(!Agent::Codex.is_opening_event("PreToolUse"));
    assert!(Agent::Pi.is_opening_event("session_start"));
    assert!(!Agent::Pi.is_opening_event("SessionStart"));
}
