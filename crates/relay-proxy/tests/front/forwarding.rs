//! §3.2: every model route forwards the body byte for byte, keeps the query, passes headers
//! unchanged except the hop-by-hop ones, `host` and Relay's own, and joins the upstream path
//! per the URL rule.

use bytes::Bytes;
use http::{HeaderValue, Method, StatusCode};
use http_body_util::Full;
use relay_testkit::{
    ANTHROPIC_MESSAGES_SSE, Behaviour, CannedResponse, OPENAI_CHAT_SSE, OPENAI_RESPONSES_SSE,
    StandIn, fixture_request,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{
    Setup, WAIT, assert_no_relay_headers, base, forwarded_headers, raw_exchange, token,
};

/// Valid JSON in a form no encoder would write: odd spacing, key order, escapes and
/// non-ASCII, so any re-encoding shows.
const ODD_BODY: &[u8] =
    b"{ \"z\" :1,\"model\":\"m\" ,\n \"a\":[ 2 ,1],\"t\":\"caf\xc3\xa9 \\u00e9 \\/\" , \"n\":1.0e0 }\r\n";

/// Headers every forwarded request carries, in the order sent; the ones that must arrive.
const PASSED: [(&str, &str); 9] = [
    ("content-type", "application/json"),
    ("session_id", "01a229cd-932c-724f-a8b4-11cf8ed6fe4d"),
    ("x-multi", "one"),
    ("x-multi", "two"),
    ("anthropic-beta", "a-2025,b-2026"),
    ("user-agent", "relay-test/1"),
    ("accept-encoding", "gzip, br, zstd"),
    ("x-stainless-retry-count", "0"),
    ("anthropic-dangerous-direct-browser-access", "true"),
];

/// Headers that must not arrive.
fn dropped(token: &str) -> Vec<(&'static str, String)> {
    vec![
        ("connection", "keep-alive, x-hop-listed, upgrade".into()),
        ("upgrade", "example/1".into()),
        ("x-hop-listed", "listed in connection".into()),
        ("keep-alive", "timeout=5".into()),
        ("te", "trailers".into()),
        ("trailer", "x-checksum".into()),
        ("proxy-authorization", "Basic cHJveHk6c2VjcmV0".into()),
        ("proxy-connection", "keep-alive".into()),
        ("expect", "100-continue".into()),
        ("x-relay-client-token", token.to_owned()),
        ("x-relay-session-id", "pi-session".into()),
        ("x-relay-anything", "relay's own".into()),
    ]
}

struct Case {
    method: Method,
    path: &'static str,
    /// Extra headers deciding the family (`anthropic-version` on `/v1/models`).
    extra: &'static [(&'static str, &'static str)],
    /// The path and query the stand-in must see.
    upstream: &'static str,
}

fn cases() -> Vec<Case> {
    let post = |path, upstream| Case {
        method: Method::POST,
        path,
        extra: &[],
        upstream,
    };
    let anthropic: &'static [(&str, &str)] = &[("anthropic-version", "2023-06-01")];
    vec![
        post("/v1/messages?beta=true", "/v1/messages?beta=true"),
        post(
            "/v1/messages/count_tokens?beta=true",
            "/v1/messages/count_tokens?beta=true",
        ),
        post("/v1/responses", "/v1/responses"),
        post("/responses?a=1&b=%20x", "/v1/responses?a=1&b=%20x"),
        post(
            "/backend-api/codex/responses",
            "/backend-api/codex/responses",
        ),
        post("/v1/chat/completions", "/v1/chat/completions"),
        post("/chat/completions", "/v1/chat/completions"),
        Case {
            method: Method::GET,
            path: "/v1/models",
            extra: &[],
            upstream: "/v1/models",
        },
        Case {
            method: Method::GET,
            path: "/models?limit=5",
            extra: &[],
            upstream: "/v1/models?limit=5",
        },
        Case {
            method: Method::GET,
            path: "/v1/models",
            extra: anthropic,
            upstream: "/v1/models",
        },
        Case {
            method: Method::GET,
            path: "/models",
            extra: anthropic,
            upstream: "/v1/models",
        },
    ]
}

#[tokio::test]
async fn every_model_route_forwards_bytes_query_and_headers_exactly() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    let token = token();
    for case in cases() {
        stand_in.clear_requests();
        let body = if case.method == Method::GET {
            Bytes::new()
        } else {
            Bytes::from_static(ODD_BODY)
        };
        let mut req = relay.request(case.method.clone(), case.path);
        for (name, value) in PASSED.iter().chain(case.extra) {
            req = req.header(*name, *value);
        }
        for (name, value) in dropped(&token) {
            req = req.header(name, value);
        }
        let answer = relay.send(req.body(Full::new(body.clone())).unwrap()).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", case.path);
        let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
        let got = &recorded[0];
        assert_eq!(got.method, case.method, "{}", case.path);
        assert_eq!(got.path_and_query, case.upstream, "{}", case.path);
        assert!(got.body_complete);
        assert_eq!(got.body, body, "{}: body changed", case.path);
        // Exactly the passed headers, in order, multi-values kept; nothing else but the
        // hop's own host and framing.
        let mut want: Vec<(String, Vec<u8>)> = Vec::new();
        for (name, value) in PASSED.iter().chain(case.extra) {
            want.push(((*name).to_owned(), value.as_bytes().to_vec()));
        }
        let mut got_headers = forwarded_headers(got);
        got_headers.sort();
        want.sort();
        assert_eq!(got_headers, want, "{}: forwarded headers differ", case.path);
        assert_eq!(
            got.header_values("x-multi"),
            [&b"one"[..], b"two"],
            "order of a multi-valued header"
        );
        assert_eq!(
            got.header_str("host"),
            Some(stand_in.addr().to_string().as_str()),
            "host is the upstream's"
        );
        assert_no_relay_headers(got);
        if case.method == Method::GET {
            assert!(got.header("content-length").is_none_or(|v| v == b"0"));
            assert!(got.header("transfer-encoding").is_none());
        } else {
            assert_eq!(
                got.header_str("content-length"),
                Some(ODD_BODY.len().to_string().as_str())
            );
        }
    }
}

#[tokio::test]
async fn the_url_rule_joins_paths_for_bases_with_and_without_v1_and_with_a_path() {
    let stand_in = StandIn::start().await.unwrap();
    let upstream = stand_in.base_url();
    // (openai base, anthropic base, request path, upstream path)
    let table = [
        (format!("{upstream}/v1"), "/v1/responses", "/v1/responses"),
        (format!("{upstream}/v1"), "/responses", "/v1/responses"),
        (upstream.clone(), "/v1/responses", "/v1/responses"),
        (upstream.clone(), "/responses", "/v1/responses"),
        (
            upstream.clone(),
            "/chat/completions?x=1",
            "/v1/chat/completions?x=1",
        ),
        (
            format!("{upstream}/v1/"),
            "/v1/chat/completions",
            "/v1/chat/completions",
        ),
        // A gateway base with a path of its own that does not end in /v1.
        (
            format!("{upstream}/gw"),
            "/v1/chat/completions",
            "/gw/v1/chat/completions",
        ),
        (format!("{upstream}/gw"), "/responses", "/gw/v1/responses"),
    ];
    for (openai, path, want) in table {
        let mut setup = Setup::new(&upstream);
        setup.config.upstream.openai_base_url = base(&openai);
        let relay = setup.start().await;
        stand_in.clear_requests();
        let answer = relay.post(path, &[], "{}").await;
        // The stand-in answers 404 for a path it does not serve; the path is what counts.
        assert!(
            answer.status == 200 || answer.status == 404,
            "{openai} {path}"
        );
        let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
        assert_eq!(
            recorded[0].path_and_query, want,
            "base {openai} path {path}"
        );
    }
    // Anthropic concatenates, with a gateway path too.
    let mut setup = Setup::new(&upstream);
    setup.config.upstream.anthropic_base_url = base(&format!("{upstream}/anthropic"));
    let relay = setup.start().await;
    stand_in.clear_requests();
    relay.post("/v1/messages?beta=true", &[], "{}").await;
    let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
    assert_eq!(
        recorded[0].path_and_query,
        "/anthropic/v1/messages?beta=true"
    );
}

/// The requests real harnesses sent: replayed through Relay, the stand-in receives the same
/// bytes and headers, and the client receives the stand-in's stream unchanged.
#[tokio::test]
async fn harness_fixture_requests_arrive_unchanged() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    let base_url = relay.url("");
    for name in [
        "claude-code-messages-1",
        "codex-responses-0",
        "codex-responses-1",
        "pi-0",
        "pi-1",
        "pi-2",
    ] {
        stand_in.clear_requests();
        let fixture = fixture_request(name).unwrap();
        let answer = relay.send(fixture.to_request(&base_url).unwrap()).await;
        assert_eq!(answer.status, 200, "{name}");
        let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
        let got = &recorded[0];
        assert_eq!(got.path_and_query, fixture.path, "{name}");
        assert!(got.body_complete, "{name}");
        assert_eq!(got.body, fixture.body, "{name}: body changed");
        let mut want: Vec<(String, Vec<u8>)> = fixture
            .headers
            .iter()
            .filter(|(n, _)| !n.eq_ignore_ascii_case("connection"))
            .map(|(n, v)| (n.to_ascii_lowercase(), v.as_bytes().to_vec()))
            .collect();
        want.sort();
        let mut got_headers = forwarded_headers(got);
        got_headers.sort();
        assert_eq!(got_headers, want, "{name}: headers changed");
        let streamed: &[u8] = if fixture.path.starts_with("/v1/messages") {
            ANTHROPIC_MESSAGES_SSE
        } else if fixture.path.starts_with("/v1/chat/completions") {
            OPENAI_CHAT_SSE
        } else {
            OPENAI_RESPONSES_SSE
        };
        let is_stream = serde_json::from_slice::<serde_json::Value>(&fixture.body).unwrap()["stream"]
            == serde_json::Value::Bool(true);
        if is_stream {
            assert_eq!(answer.header("content-type"), Some("text/event-stream"));
            assert_eq!(answer.body, streamed, "{name}: stream changed");
        }
    }
    // pi's `session_id` (an underscore name) made it through.
    let pi = fixture_request("pi-1").unwrap();
    stand_in.clear_requests();
    relay.send(pi.to_request(&base_url).unwrap()).await;
    let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
    assert_eq!(
        recorded[0].header_str("session_id"),
        Some("01a229cd-932c-724f-a8b4-11cf8ed6fe4d")
    );
}

/// `/v1/models` answers are forced to `Cache-Control: no-store`, whatever the provider said;
/// other answers keep the provider's headers, multi-values and all.
#[tokio::test]
async fn models_answers_are_not_cacheable_and_other_headers_pass_unchanged() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    stand_in.set_behaviour(Behaviour {
        status: Some(
            CannedResponse::json(StatusCode::OK, r#"{"data":[]}"#)
                .header(
                    http::header::CACHE_CONTROL,
                    HeaderValue::from_static("max-age=3600"),
                )
                .header(http::header::SET_COOKIE, HeaderValue::from_static("a=1"))
                .header(http::header::SET_COOKIE, HeaderValue::from_static("b=2"))
                .header(
                    http::header::CONNECTION,
                    HeaderValue::from_static("x-upstream-hop"),
                )
                .header(
                    http::HeaderName::from_static("x-upstream-hop"),
                    HeaderValue::from_static("1"),
                ),
        ),
        ..Behaviour::default()
    });
    for (path, extra) in [
        ("/v1/models", None),
        ("/models", None),
        ("/v1/models", Some(("anthropic-version", "2023-06-01"))),
    ] {
        let headers: Vec<(&str, &str)> = extra.into_iter().collect();
        let answer = relay.get(path, &headers).await;
        assert_eq!(answer.status, 200);
        let cache: Vec<_> = answer.headers.get_all("cache-control").iter().collect();
        assert_eq!(cache, ["no-store"], "{path}");
        let cookies: Vec<_> = answer.headers.get_all("set-cookie").iter().collect();
        assert_eq!(cookies, ["a=1", "b=2"]);
        assert!(answer.headers.get("x-upstream-hop").is_none());
        assert_eq!(answer.body, r#"{"data":[]}"#);
    }
    // A model request keeps the provider's own cache-control.
    let answer = relay.post("/v1/chat/completions", &[], "{}").await;
    assert_eq!(answer.header("cache-control"), Some("max-age=3600"));
}

/// `Expect: 100-continue` is answered by Relay and never forwarded; the body still arrives.
#[tokio::test]
async fn expect_continue_is_answered_here_and_not_forwarded() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    let mut stream = relay.connect().await;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Expect: 100-continue\r\nContent-Length: 2\r\n\r\n",
        relay.host()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut first = [0u8; 25];
    stream.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 100 Continue\r\n\r\n");
    let res = raw_exchange(&mut stream, b"{}").await;
    assert_eq!(res.status, 200);
    let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
    assert_eq!(recorded[0].body, "{}");
    assert!(recorded[0].header("expect").is_none());
}

/// A caller hides a header behind a `Connection` token that is no header name, or names a
/// `proxy-*` header outside the well-known three: neither reaches the provider.
#[tokio::test]
async fn connection_listed_and_proxy_headers_never_reach_the_provider() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    let mut stream = relay.connect().await;
    let mut head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: 2\r\nx-api-key: sk-caller-listed\r\nProxy-Status: relay-test\r\n\
         Proxy-Anything: 1\r\nConnection: x-api-key, ",
        relay.host()
    )
    .into_bytes();
    head.extend_from_slice(b"caf\xe9\r\n\r\n{}");
    let res = raw_exchange(&mut stream, &head).await;
    assert_eq!(res.status, 200);
    let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
    for name in ["x-api-key", "proxy-status", "proxy-anything", "connection"] {
        assert!(recorded[0].header(name).is_none(), "{name} was forwarded");
    }
}

/// An HTTP/2 client may split its cookie list into several `Cookie` fields; the provider is
/// reached over HTTP/1.1, where they must be one (RFC 9113), joined in order by `; `.
#[tokio::test]
async fn cookie_fields_of_an_http2_request_reach_the_provider_as_one() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    let req = relay
        .request(Method::POST, "/v1/messages")
        .header("content-type", "application/json")
        .header("cookie", "a=1")
        .header("cookie", "b=2")
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let answer = relay.send_h2(req).await;
    assert_eq!(answer.status, StatusCode::OK);
    let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
    let cookies: Vec<&[u8]> = recorded[0]
        .headers
        .iter()
        .filter(|(name, _)| name == "cookie")
        .map(|(_, value)| value.as_slice())
        .collect();
    assert_eq!(cookies, [&b"a=1; b=2"[..]]);
}
