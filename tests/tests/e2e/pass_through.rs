//! Pass-through through the real binary (SPEC §3.2, §3.3, §3.5): the requests real harnesses
//! sent reach the provider byte for byte and the provider's streams come back byte for byte;
//! credentialed pass-through is logged with its reason; and no token, key or body ever
//! reaches relayd's logs.

use http::StatusCode;
use relay_e2e::Relayd;
use relay_e2e::http::{fetch, post_json, send};
use relay_testkit::{
    ANTHROPIC_MESSAGES_SSE, Behaviour, OPENAI_RESPONSES_SSE, REQUEST_ID_HEADER, StandIn,
    fixture_request,
};

use super::support::{
    EVENT_TIMEOUT, field, fresh_token, marker, passes_unchanged, upstream_config,
};

/// Replays the fixture request `name` through relayd (with `extra` headers) and checks that
/// the client got `stream` and the stand-in got the fixture's body, path and headers.
async fn replay(
    relayd: &Relayd,
    stand_in: &StandIn,
    name: &str,
    extra: &[(&str, &str)],
    stream: &[u8],
) -> anyhow::Result<relay_testkit::Recorded> {
    let fixture = fixture_request(name)?;
    let mut req = fixture.to_request("")?;
    for (header, value) in extra {
        req.headers_mut().insert(
            http::HeaderName::from_bytes(header.as_bytes())?,
            value.parse()?,
        );
    }
    let (status, headers, body) = fetch(relayd.addr(), req).await?;
    assert_eq!(
        status,
        StatusCode::OK,
        "{name}: {}",
        String::from_utf8_lossy(&body)
    );
    assert!(
        body == stream,
        "{name}: the stream changed on its way through relayd"
    );
    assert_eq!(
        headers.get("content-type").map(|v| v.as_bytes()),
        Some(&b"text/event-stream"[..]),
        "{name}"
    );
    assert_eq!(
        headers.get("x-accel-buffering").map(|v| v.as_bytes()),
        Some(&b"no"[..]),
        "{name}: SSE answers get X-Accel-Buffering: no"
    );
    let id: u64 = headers
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .parse()?;
    let recorded = stand_in
        .request(id)
        .ok_or_else(|| anyhow::anyhow!("{name}: the stand-in has no request {id}"))?;
    assert_eq!(recorded.method, fixture.method, "{name}");
    assert_eq!(recorded.path_and_query, fixture.path, "{name}");
    assert!(recorded.body_complete, "{name}");
    assert!(
        recorded.body == fixture.body,
        "{name}: the body was changed on its way to the provider"
    );
    for (header, value) in fixture
        .headers
        .iter()
        .filter(|(header, _)| passes_unchanged(header))
    {
        assert_eq!(
            recorded.header_str(header),
            Some(value.as_str()),
            "{name}: header {header} did not pass unchanged"
        );
    }
    assert_eq!(
        recorded.header("x-relay-client-token"),
        None,
        "{name}: the route credential reached the provider"
    );
    Ok(recorded)
}

#[tokio::test]
async fn harness_requests_pass_through_byte_for_byte() -> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let mut relayd = Relayd::builder()?
        .config(upstream_config(&stand_in, ""))
        .start()
        .await?;
    let anthropic = replay(
        &relayd,
        &stand_in,
        "claude-code-messages-1",
        &[],
        ANTHROPIC_MESSAGES_SSE,
    )
    .await?;
    assert_eq!(anthropic.path_and_query, "/v1/messages?beta=true");
    let openai = replay(
        &relayd,
        &stand_in,
        "codex-responses-0",
        &[],
        OPENAI_RESPONSES_SSE,
    )
    .await?;
    assert_eq!(openai.path_and_query, "/v1/responses");
    assert!(
        openai
            .header_str("authorization")
            .is_some_and(|value| value.starts_with("Bearer ")),
        "the caller's bearer key passes"
    );

    // With a well-formed route credential that no route holds, the default mode passes
    // through and says why; the credential itself stops at relayd.
    let token = fresh_token()?;
    let headers = [("x-relay-client-token", token.as_str())];
    replay(
        &relayd,
        &stand_in,
        "claude-code-messages-1",
        &headers,
        ANTHROPIC_MESSAGES_SSE,
    )
    .await?;
    replay(
        &relayd,
        &stand_in,
        "codex-responses-0",
        &headers,
        OPENAI_RESPONSES_SSE,
    )
    .await?;
    let (status, _, body) = fetch(
        relayd.addr(),
        post_json(
            "/hooks/claude-code",
            &headers,
            r#"{"hook_event_name":"Stop","session_id":"s"}"#,
        )?,
    )
    .await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(&body[..], br#"{"continue":true}"#);

    let status = relayd.stop().await?;
    assert_eq!(status.code(), Some(0));
    let passes: Vec<_> = relayd
        .logs()
        .events_named("public_request_pass_through")
        .into_iter()
        .map(|event| {
            (
                field(&event, "route").to_owned(),
                field(&event, "route_mode").to_owned(),
                field(&event, "reason").to_owned(),
            )
        })
        .collect();
    let expected = |route: &str| {
        (
            route.to_owned(),
            "pass_through".to_owned(),
            "unbound_credential".to_owned(),
        )
    };
    for route in ["anthropic", "openai", "hook"] {
        assert!(
            passes.contains(&expected(route)),
            "no public_request_pass_through for the credentialed {route} request: {passes:?}\n{}",
            relayd.logs().text()
        );
    }
    assert!(!relayd.logs().contains(token.as_bytes()));
    Ok(())
}

#[tokio::test]
async fn no_token_key_or_body_reaches_the_logs() -> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let token = fresh_token()?;
    let anthropic_key = marker("anthropic-daemon-key")?;
    let openai_key = marker("openai-daemon-key")?;
    let caller_key = marker("caller-key")?;
    let body_marker = marker("body")?;
    let header_marker = marker("header")?;
    let hook_marker = marker("hook")?;

    let builder = Relayd::builder()?;
    let anthropic_file =
        builder.write_private_file("anthropic.key", &format!("{anthropic_key}\n"))?;
    let openai_file = builder.write_private_file("openai.key", &format!("{openai_key}\n"))?;
    let config = upstream_config(
        &stand_in,
        &format!(
            "daemon_keys = \"any_local\"\nanthropic_api_key_file = \"{}\"\nopenai_api_key_file = \"{}\"\n",
            anthropic_file.display(),
            openai_file.display()
        ),
    );
    // Trace logging: the secrets must stay out of every level an operator may turn on.
    let mut relayd = builder
        .config(config)
        .args(["--pass-through", "--log-level", "trace"])
        .start()
        .await?;
    let enabled = relayd
        .wait_for_log_event("daemon_pass_through_enabled", EVENT_TIMEOUT)
        .await?;
    assert_eq!(enabled["anthropic_key_configured"], true, "{enabled}");
    assert_eq!(enabled["openai_key_configured"], true, "{enabled}");
    assert_eq!(field(&enabled, "daemon_keys"), "any_local");

    let credential = ("x-relay-client-token", token.as_str());
    let marked = ("x-e2e-marker", header_marker.as_str());
    let anthropic_body = format!(
        r#"{{"model":"m","max_tokens":16,"stream":true,"messages":[{{"role":"user","content":"{body_marker}"}}]}}"#
    );
    let responses_body = format!(r#"{{"model":"m","stream":true,"input":"{body_marker}"}}"#);

    // Without a credential of its own, each request gets the daemon's key.
    let (status, headers, _) = fetch(
        relayd.addr(),
        post_json(
            "/v1/messages",
            &[credential, marked, ("anthropic-version", "2023-06-01")],
            anthropic_body.clone(),
        )?,
    )
    .await?;
    assert_eq!(status, StatusCode::OK);
    let recorded = recorded_by_header(&stand_in, &headers)?;
    assert_eq!(
        recorded.header_str("x-api-key"),
        Some(anthropic_key.as_str())
    );
    assert_eq!(recorded.header("x-relay-client-token"), None);

    let (status, headers, _) = fetch(
        relayd.addr(),
        post_json(
            "/v1/responses",
            &[credential, marked],
            responses_body.clone(),
        )?,
    )
    .await?;
    assert_eq!(status, StatusCode::OK);
    let recorded = recorded_by_header(&stand_in, &headers)?;
    assert_eq!(
        recorded.header_str("authorization"),
        Some(format!("Bearer {openai_key}").as_str())
    );

    // A caller's own key is used as it is, never replaced by the daemon's.
    let (status, headers, _) = fetch(
        relayd.addr(),
        post_json(
            "/v1/messages",
            &[credential, ("x-api-key", caller_key.as_str())],
            anthropic_body.clone(),
        )?,
    )
    .await?;
    assert_eq!(status, StatusCode::OK);
    let recorded = recorded_by_header(&stand_in, &headers)?;
    assert_eq!(recorded.header_str("x-api-key"), Some(caller_key.as_str()));

    // A provider that breaks off mid-stream: the failure path logs too.
    stand_in.set_behaviour(Behaviour {
        fail_after_bytes: Some(100),
        ..Behaviour::default()
    });
    let mut res = send(
        relayd.addr(),
        post_json(
            "/v1/responses",
            &[credential, marked],
            responses_body.clone(),
        )?,
    )
    .await?;
    assert_eq!(res.status(), StatusCode::OK);
    assert!(
        res.read_to_end().await.is_err(),
        "a provider stream that breaks off must end the client's stream with an error"
    );
    stand_in.set_behaviour(Behaviour::default());
    // And an operator sees why.
    let broke = relayd
        .wait_for_log_event("upstream_request_failed", EVENT_TIMEOUT)
        .await?;
    assert_eq!(field(&broke, "reason"), "response_body_failed", "{broke}");
    assert_eq!(field(&broke, "route"), "openai", "{broke}");

    let (status, _, _) = fetch(
        relayd.addr(),
        post_json(
            "/hooks/claude-code",
            &[credential],
            format!(r#"{{"hook_event_name":"UserPromptSubmit","prompt":"{hook_marker}"}}"#),
        )?,
    )
    .await?;
    assert_eq!(status, StatusCode::OK);

    // A malformed credential is refused; the refusal does not echo it.
    let malformed = format!("{token}x");
    let (status, _, body) = fetch(
        relayd.addr(),
        post_json(
            "/v1/messages",
            &[("x-relay-client-token", malformed.as_str())],
            anthropic_body.clone(),
        )?,
    )
    .await?;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(!String::from_utf8_lossy(&body).contains(&token));

    let status = relayd.stop().await?;
    assert_eq!(status.code(), Some(0));
    let reasons: Vec<_> = relayd
        .logs()
        .events_named("public_request_pass_through")
        .iter()
        .map(|event| field(event, "reason").to_owned())
        .collect();
    assert!(
        reasons.len() >= 5 && reasons.iter().all(|r| r == "configured_pass_through"),
        "{reasons:?}"
    );

    let logs = relayd.logs();
    assert!(!logs.raw().is_empty());
    for (what, secret) in [
        ("route token", &token),
        ("anthropic daemon key", &anthropic_key),
        ("openai daemon key", &openai_key),
        ("caller key", &caller_key),
        ("request body", &body_marker),
        ("request header", &header_marker),
        ("hook body", &hook_marker),
    ] {
        assert!(
            !logs.contains(secret.as_bytes()),
            "the {what} appears in relayd's stderr:\n{}",
            logs.text()
        );
    }
    Ok(())
}

/// The stand-in's record of the request whose answer carried `headers`.
fn recorded_by_header(
    stand_in: &StandIn,
    headers: &http::HeaderMap,
) -> anyhow::Result<relay_testkit::Recorded> {
    let id: u64 = headers
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .parse()?;
    stand_in
        .request(id)
        .ok_or_else(|| anyhow::anyhow!("the stand-in has no request {id}"))
}
