//! §3.5 as far as it exists before the broker: no route is ever bound, so a well-formed
//! credential is "unbound". The credential header never travels upstream.

use std::net::Ipv4Addr;

use relay_proxy::front::Mode;
use relay_testkit::StandIn;
use serde_json::{Value, json};

use crate::support::{Relay, Setup, WAIT, assert_no_relay_headers, token};

/// Sends a model request and a hook with these headers; returns (model status, hook status).
async fn statuses(relay: &Relay, headers: &[(&str, &str)]) -> (u16, u16) {
    let mut with_own = vec![("authorization", "Bearer caller-own-key")];
    with_own.extend_from_slice(headers);
    let model = relay.post("/v1/chat/completions", &with_own, "{}").await;
    let hook = relay.post("/hooks/claude-code", headers, "{}").await;
    for answer in [&model, &hook] {
        if answer.status == 401 {
            answer.assert_error(401, "relay_unauthorized");
        }
    }
    if hook.status == 200 {
        assert_eq!(hook.body, r#"{"continue":true}"#);
    }
    (model.status.as_u16(), hook.status.as_u16())
}

#[tokio::test]
async fn the_credential_table_for_unbound_routes() {
    let stand_in = StandIn::start().await.unwrap();
    let valid = token();
    let other = token();
    let malformed = [
        "short".to_owned(),
        format!("{valid}A"),
        valid[..42].to_owned(),
        valid.replace(|c: char| c.is_ascii_alphanumeric(), "+")[..43].to_owned(),
        format!("{}=", &valid[..42]),
        format!(" {valid}x"),
    ];
    let missing: &[(&str, &str)] = &[];
    // (mode, bind, anonymous allowed) → expected statuses for missing / unbound.
    let table = [
        (Mode::Managed, Ipv4Addr::LOCALHOST, false, 200, 200),
        (Mode::PassThrough, Ipv4Addr::LOCALHOST, false, 200, 200),
        (Mode::RequireWorker, Ipv4Addr::LOCALHOST, false, 401, 401),
        (Mode::Managed, Ipv4Addr::UNSPECIFIED, false, 401, 401),
        (Mode::PassThrough, Ipv4Addr::UNSPECIFIED, false, 401, 401),
        (Mode::Managed, Ipv4Addr::UNSPECIFIED, true, 200, 200),
        (Mode::PassThrough, Ipv4Addr::UNSPECIFIED, true, 200, 200),
        (Mode::RequireWorker, Ipv4Addr::UNSPECIFIED, true, 401, 401),
        // Any non-loopback address counts like 0.0.0.0.
        (Mode::Managed, Ipv4Addr::new(192, 0, 2, 2), false, 401, 401),
    ];
    for (mode, bind, anonymous, if_missing, if_unbound) in table {
        let mut setup = Setup::new(&stand_in.base_url());
        setup.mode = mode;
        setup.bind = bind;
        setup.allow_anonymous_pass_through = anonymous;
        let relay = setup.start().await;
        let case = format!("{mode:?} {bind} anonymous={anonymous}");
        stand_in.clear_requests();
        assert_eq!(
            statuses(&relay, missing).await,
            (if_missing, if_missing),
            "{case} missing"
        );
        assert_eq!(
            statuses(&relay, &[("x-relay-client-token", &valid)]).await,
            (if_unbound, if_unbound),
            "{case} unbound"
        );
        // A refused token that is well formed is told apart from a missing or malformed
        // one: the session that registers it is what is missing.
        if if_unbound == 401 {
            let token = [("x-relay-client-token", valid.as_str())];
            let unbound = relay.post("/hooks/claude-code", &token, "{}").await;
            let unbound = String::from_utf8_lossy(&unbound.body);
            assert!(unbound.contains("bound to no route"), "{case}: {unbound}");
            let missing = relay.post("/hooks/claude-code", &[], "{}").await;
            let missing = String::from_utf8_lossy(&missing.body);
            assert!(
                missing.contains("x-relay-client-token is required"),
                "{case}: {missing}"
            );
        }
        for bad in &malformed {
            assert_eq!(
                statuses(&relay, &[("x-relay-client-token", bad)]).await,
                (401, 401),
                "{case} malformed {bad:?}"
            );
        }
        for twice in [[&valid, &valid], [&valid, &other]] {
            assert_eq!(
                statuses(
                    &relay,
                    &[
                        ("x-relay-client-token", twice[0]),
                        ("x-relay-client-token", twice[1])
                    ]
                )
                .await,
                (401, 401),
                "{case} duplicated"
            );
        }
        // What passed through carried the caller's own credential and never the token.
        let expected = usize::from(if_missing == 200) + usize::from(if_unbound == 200);
        let recorded = stand_in.requests();
        assert_eq!(recorded.len(), expected, "{case}");
        for got in &recorded {
            assert_no_relay_headers(got);
            assert_eq!(
                got.header_str("authorization"),
                Some("Bearer caller-own-key")
            );
            assert!(got.body_complete);
        }
    }
}

#[tokio::test]
async fn the_route_endpoint_answers_for_the_caller_alone() {
    let stand_in = StandIn::start().await.unwrap();
    let valid = token();
    for mode in [Mode::Managed, Mode::PassThrough, Mode::RequireWorker] {
        let mut setup = Setup::new(&stand_in.base_url());
        setup.mode = mode;
        let relay = setup.start().await;
        let answer = relay.get("/_relay/v1/route", &[]).await;
        answer.assert_error(401, "relay_unauthorized");
        let answer = relay
            .get(
                "/_relay/v1/route",
                &[("x-relay-client-token", "not-a-token")],
            )
            .await;
        answer.assert_error(401, "relay_unauthorized");
        let answer = relay
            .get(
                "/_relay/v1/route",
                &[
                    ("x-relay-client-token", &valid),
                    ("x-relay-client-token", &valid),
                ],
            )
            .await;
        answer.assert_error(401, "relay_unauthorized");
        let answer = relay
            .get("/_relay/v1/route", &[("x-relay-client-token", &valid)])
            .await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.header("cache-control"), Some("no-store"));
        let mut body = answer.json();
        // `control_available` is null for a route without a worker; the SPEC example
        // leaves it out, so accept both.
        if let Some(map) = body.as_object_mut()
            && map.get("control_available") == Some(&Value::Null)
        {
            map.remove("control_available");
        }
        assert_eq!(
            body,
            json!({"route_mode":"pass_through","reason":"unbound_credential","worker_id":null,"state":"none"}),
            "{mode:?}"
        );
    }
    assert_eq!(stand_in.request_count(), 0);
}

#[tokio::test]
async fn hooks_answer_each_agent_its_pass_through_body() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    let valid = token();
    for (path, want) in [
        ("/hooks/claude-code", r#"{"continue":true}"#),
        ("/hooks/codex", "{}"),
        ("/hooks/pi", "{}"),
    ] {
        for headers in [vec![], vec![("x-relay-client-token", valid.as_str())]] {
            let answer = relay
                .post(path, &headers, r#"{"hook_event_name":"SessionStart"}"#)
                .await;
            assert_eq!(answer.status, 200, "{path}");
            assert_eq!(answer.body, want, "{path}");
            assert_eq!(answer.header("content-type"), Some("application/json"));
            // relayd's own answer, for this one event: nothing a cache may keep.
            assert_eq!(answer.header("cache-control"), Some("no-store"));
        }
    }
    assert_eq!(stand_in.request_count(), 0, "hooks never reach a provider");
}

#[tokio::test]
async fn the_route_credential_never_reaches_the_provider() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    let valid = token();
    for (path, own) in [
        ("/v1/messages?beta=true", ("x-api-key", "caller")),
        ("/v1/responses", ("authorization", "Bearer caller")),
        ("/v1/chat/completions", ("authorization", "Bearer caller")),
    ] {
        stand_in.clear_requests();
        let answer = relay
            .post(
                path,
                &[
                    ("x-relay-client-token", &valid),
                    own,
                    ("x-relay-upstream-base-url-typo", "x"),
                    ("X-Relay-Session-Id", "s"),
                ],
                "{}",
            )
            .await;
        assert_eq!(answer.status, 200);
        let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
        assert_no_relay_headers(&recorded[0]);
        let raw = format!("{:?}", recorded[0].headers);
        assert!(!raw.contains(&valid));
        assert_eq!(recorded[0].header_str(own.0), Some(own.1));
    }
}
