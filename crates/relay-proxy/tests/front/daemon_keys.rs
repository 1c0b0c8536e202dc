//! §3.2: the daemon adds its own provider keys only when every condition holds; each
//! condition failing on its own keeps them out.

use std::net::Ipv4Addr;

use relay_proxy::config::DaemonKeys;
use relay_proxy::front::{Mode, ProviderKeys};
use relay_testkit::{Recorded, StandIn};

use crate::support::{Relay, Setup, WAIT, base, raw_exchange, token};

const OPENAI_KEY: &str = "sk-daemon-openai-4f1c";
const ANTHROPIC_KEY: &str = "sk-ant-daemon-9b2e";

/// The set-up under which the keys are added: pass-through, loopback, `any_local`.
fn keyed(upstream: &str) -> Setup {
    let mut setup = Setup::new(upstream);
    setup.mode = Mode::PassThrough;
    setup.config.upstream.daemon_keys = DaemonKeys::AnyLocal;
    setup.keys = ProviderKeys::new(Some(OPENAI_KEY), Some(ANTHROPIC_KEY)).unwrap();
    setup
}

async fn one(stand_in: &StandIn, relay: &Relay, path: &str, headers: &[(&str, &str)]) -> Recorded {
    stand_in.clear_requests();
    let answer = if path.contains("models") {
        relay.get(path, headers).await
    } else {
        relay.post(path, headers, "{}").await
    };
    assert!(
        answer.status.is_success() || answer.status == 404,
        "{path}: {}",
        answer.status
    );
    stand_in.wait_for_requests(1, WAIT).await.unwrap().remove(0)
}

#[track_caller]
fn assert_no_daemon_key(recorded: &Recorded, case: &str) {
    for (name, value) in &recorded.headers {
        let value = String::from_utf8_lossy(value);
        assert!(
            !value.contains(OPENAI_KEY) && !value.contains(ANTHROPIC_KEY),
            "{case}: daemon key sent in {name}"
        );
    }
}

#[tokio::test]
async fn keys_are_added_when_every_condition_holds() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = keyed(&stand_in.base_url()).start().await;
    for path in [
        "/v1/chat/completions",
        "/v1/responses",
        "/responses",
        "/v1/models",
        "/models",
    ] {
        let got = one(&stand_in, &relay, path, &[]).await;
        assert_eq!(
            got.header_values("authorization"),
            [format!("Bearer {OPENAI_KEY}").as_bytes()],
            "{path}"
        );
        assert!(got.header("x-api-key").is_none(), "{path}");
    }
    for (path, headers) in [
        ("/v1/messages?beta=true", vec![]),
        ("/v1/messages/count_tokens", vec![]),
        ("/v1/models", vec![("anthropic-version", "2023-06-01")]),
    ] {
        let got = one(&stand_in, &relay, path, &headers).await;
        assert_eq!(
            got.header_values("x-api-key"),
            [ANTHROPIC_KEY.as_bytes()],
            "{path}"
        );
        assert!(got.header("authorization").is_none(), "{path}");
    }
    // A well-formed unbound credential is still "no credential of its own" for the
    // provider: with any_local the key is added.
    let got = one(
        &stand_in,
        &relay,
        "/v1/chat/completions",
        &[("x-relay-client-token", &token())],
    )
    .await;
    assert_eq!(
        got.header_str("authorization"),
        Some(&*format!("Bearer {OPENAI_KEY}"))
    );
}

#[tokio::test]
async fn each_failing_condition_keeps_the_keys_out() {
    let stand_in = StandIn::start().await.unwrap();
    let upstream = stand_in.base_url();

    // Not --pass-through.
    let mut setup = keyed(&upstream);
    setup.mode = Mode::Managed;
    let relay = setup.start().await;
    for path in ["/v1/chat/completions", "/v1/messages"] {
        let got = one(&stand_in, &relay, path, &[]).await;
        assert_no_daemon_key(&got, "managed mode");
    }

    // A non-loopback bind (anonymous pass-through allowed so the request goes out at all).
    let mut setup = keyed(&upstream);
    setup.bind = Ipv4Addr::UNSPECIFIED;
    setup.allow_anonymous_pass_through = true;
    let relay = setup.start().await;
    for path in ["/v1/chat/completions", "/v1/messages"] {
        let got = one(&stand_in, &relay, path, &[]).await;
        assert_no_daemon_key(&got, "non-loopback bind");
    }

    // bound_only (the default) without a bound credential.
    let mut setup = keyed(&upstream);
    setup.config.upstream.daemon_keys = DaemonKeys::BoundOnly;
    let relay = setup.start().await;
    let valid = token();
    for headers in [vec![], vec![("x-relay-client-token", valid.as_str())]] {
        for path in ["/v1/chat/completions", "/v1/messages"] {
            let got = one(&stand_in, &relay, path, &headers).await;
            assert_no_daemon_key(&got, "bound_only");
        }
    }

    let relay = keyed(&upstream).start().await;
    // The request carries a credential of its own: it is used, unchanged, and alone.
    for (name, value) in [
        ("authorization", "Bearer caller-own"),
        ("x-api-key", "caller-own"),
        ("api-key", "caller-own"),
        ("anthropic-api-key", "caller-own"),
        ("authorization", ""),
    ] {
        for path in ["/v1/chat/completions", "/v1/messages"] {
            let got = one(&stand_in, &relay, path, &[(name, value)]).await;
            assert_no_daemon_key(&got, name);
            assert_eq!(
                got.header_values(name),
                [value.as_bytes()],
                "{name} on {path}"
            );
        }
    }
    // The request says it came through a proxy.
    for (name, value) in [
        ("forwarded", "for=192.0.2.60;proto=http"),
        ("x-forwarded-for", "192.0.2.60"),
        ("via", "1.1 proxy.example"),
    ] {
        for path in ["/v1/chat/completions", "/v1/messages"] {
            let got = one(&stand_in, &relay, path, &[(name, value)]).await;
            assert_no_daemon_key(&got, name);
        }
    }

    // A caller-selected base, even an allowed one.
    stand_in.clear_requests();
    let selected = StandIn::start().await.unwrap();
    let mut setup = keyed(&upstream);
    setup.config.upstream.allowed_base_urls = vec![base(&selected.base_url())];
    let relay = setup.start().await;
    for path in ["/v1/chat/completions", "/v1/messages"] {
        let answer = relay
            .post(
                path,
                &[("x-relay-upstream-base-url", &selected.base_url())],
                "{}",
            )
            .await;
        assert_eq!(answer.status, 200);
        let got = selected.wait_for_requests(1, WAIT).await.unwrap().remove(0);
        selected.clear_requests();
        assert_no_daemon_key(&got, "selected base");
        assert!(got.header("x-relay-upstream-base-url").is_none());
    }
    // A base that is not allowed is refused and goes nowhere.
    for not_allowed in [
        "http://127.0.0.1:1",
        "https://evil.example",
        "not a url",
        &format!("{}/v1", selected.base_url()),
    ] {
        let answer = relay
            .post(
                "/v1/chat/completions",
                &[("x-relay-upstream-base-url", not_allowed)],
                "{}",
            )
            .await;
        answer.assert_error(400, "relay_upstream_not_allowed");
    }
    // Two selectors, even of one allowed base, select none.
    let answer = relay
        .post(
            "/v1/chat/completions",
            &[
                ("x-relay-upstream-base-url", &selected.base_url()),
                ("x-relay-upstream-base-url", &selected.base_url()),
            ],
            "{}",
        )
        .await;
    answer.assert_error(400, "relay_upstream_not_allowed");
    assert_eq!(stand_in.request_count(), 0);
    assert_eq!(selected.request_count(), 0);
}

/// The attack of issue 9: a request without any credential to the ChatGPT Codex path went
/// to `chatgpt_codex_base_url` carrying the daemon's OpenAI key. The stand-in playing the
/// ChatGPT base must never see a daemon key, whatever the path or headers.
#[tokio::test]
async fn the_chatgpt_base_never_sees_a_daemon_key() {
    let stand_in = StandIn::start().await.unwrap();
    let chatgpt = StandIn::start().await.unwrap();
    let mut setup = keyed(&stand_in.base_url());
    setup.config.upstream.chatgpt_codex_base_url =
        base(&format!("{}/backend-api/codex", chatgpt.base_url()));
    let relay = setup.start().await;
    let valid = token();
    for headers in [vec![], vec![("x-relay-client-token", valid.as_str())]] {
        let answer = relay
            .post("/backend-api/codex/responses", &headers, "{}")
            .await;
        assert_eq!(answer.status, 200);
        let got = chatgpt.wait_for_requests(1, WAIT).await.unwrap().remove(0);
        chatgpt.clear_requests();
        assert_no_daemon_key(&got, "chatgpt base");
        assert!(got.header("authorization").is_none());
    }
    // The same daemon still adds its key toward the configured OpenAI base.
    let got = one(&stand_in, &relay, "/v1/responses", &[]).await;
    assert_eq!(
        got.header_str("authorization"),
        Some(&*format!("Bearer {OPENAI_KEY}"))
    );
    assert_eq!(chatgpt.request_count(), 0);
}

/// What a web page can make a browser send never reaches the provider, let alone with the
/// daemon's keys: an Origin header, a text/plain "simple" POST, or a foreign Host (DNS
/// rebinding).
#[tokio::test]
async fn a_web_page_never_reaches_the_provider_or_the_keys() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = keyed(&stand_in.base_url()).start().await;
    for path in ["/v1/chat/completions", "/v1/messages", "/v1/responses"] {
        let answer = relay
            .post(path, &[("origin", "https://evil.example")], "{}")
            .await;
        answer.assert_error(403, "relay_cross_origin");
        // A form POST without Origin (some browsers omit it for simple requests).
        let mut stream = relay.connect().await;
        let res = raw_exchange(
            &mut stream,
            format!(
                "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n{{}}",
                relay.host()
            )
            .as_bytes(),
        )
        .await;
        res.assert_error(415, "relay_unsupported_media_type");
        // DNS rebinding: the page's own host name resolving to 127.0.0.1.
        let mut stream = relay.connect().await;
        let res = raw_exchange(
            &mut stream,
            format!(
                "POST {path} HTTP/1.1\r\nHost: evil.example:{}\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}",
                relay.addr.port()
            )
            .as_bytes(),
        )
        .await;
        res.assert_error(421, "relay_misdirected_request");
    }
    assert_eq!(stand_in.request_count(), 0);
}
