use http::{HeaderMap, HeaderValue, Method};

use super::*;

fn config(openai: &str, anthropic: &str) -> UpstreamConfig {
    UpstreamConfig {
        openai_base_url: BaseUrl::parse(openai).unwrap(),
        anthropic_base_url: BaseUrl::parse(anthropic).unwrap(),
        allowed_base_urls: vec![BaseUrl::parse("http://127.0.0.1:9999/custom/v1").unwrap()],
        ..UpstreamConfig::default()
    }
}

fn target(
    config: &UpstreamConfig,
    method: &Method,
    path_and_query: &str,
    headers: &[(&str, &str)],
    selected: Option<&str>,
) -> Result<UpstreamTarget, TargetError> {
    let path = path_and_query
        .split_once('?')
        .map_or(path_and_query, |(p, _)| p);
    let PathClass::Model { family, .. } = PathClass::classify(method, path) else {
        panic!("{path} is not a model route");
    };
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.insert(
            http::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    let request: Uri = path_and_query.parse().unwrap();
    upstream_target(
        config,
        family,
        &ModelHeaders::read(&map),
        selected,
        &request,
    )
}

fn url(config: &UpstreamConfig, method: &Method, path: &str, headers: &[(&str, &str)]) -> String {
    target(config, method, path, headers, None)
        .unwrap()
        .uri
        .to_string()
}

#[test]
fn openai_joining_rule() {
    let post = Method::POST;
    let with_v1 = config("https://api.openai.com/v1", "https://api.anthropic.com");
    assert_eq!(
        url(&with_v1, &post, "/v1/responses", &[]),
        "https://api.openai.com/v1/responses"
    );
    assert_eq!(
        url(&with_v1, &post, "/responses", &[]),
        "https://api.openai.com/v1/responses"
    );
    assert_eq!(
        url(&with_v1, &post, "/chat/completions", &[]),
        "https://api.openai.com/v1/chat/completions"
    );
    let bare = config("http://127.0.0.1:9000", "http://127.0.0.1:9001");
    assert_eq!(
        url(&bare, &post, "/responses", &[]),
        "http://127.0.0.1:9000/v1/responses"
    );
    assert_eq!(
        url(&bare, &post, "/v1/responses", &[]),
        "http://127.0.0.1:9000/v1/responses"
    );
    let prefixed = config("http://127.0.0.1:9000/openai", "http://127.0.0.1:9001");
    assert_eq!(
        url(&prefixed, &post, "/v1/chat/completions?x=1", &[]),
        "http://127.0.0.1:9000/openai/v1/chat/completions?x=1"
    );
}

#[test]
fn anthropic_concatenates_and_keeps_the_query() {
    let c = config("https://api.openai.com/v1", "http://127.0.0.1:9001/prefix");
    assert_eq!(
        url(&c, &Method::POST, "/v1/messages?beta=true", &[]),
        "http://127.0.0.1:9001/prefix/v1/messages?beta=true"
    );
    assert_eq!(
        url(
            &c,
            &Method::POST,
            "/v1/messages/count_tokens?beta=true",
            &[]
        ),
        "http://127.0.0.1:9001/prefix/v1/messages/count_tokens?beta=true"
    );
}

#[test]
fn models_follow_anthropic_version() {
    let c = config("https://api.openai.com/v1", "https://api.anthropic.com");
    assert_eq!(
        url(&c, &Method::GET, "/v1/models", &[]),
        "https://api.openai.com/v1/models"
    );
    let t = target(
        &c,
        &Method::GET,
        "/v1/models",
        &[("anthropic-version", "2023-06-01")],
        None,
    )
    .unwrap();
    assert_eq!(t.family, Family::Anthropic);
    assert_eq!(t.uri.to_string(), "https://api.anthropic.com/v1/models");
    assert_eq!(
        url(
            &c,
            &Method::GET,
            "/models",
            &[("anthropic-version", "2023-06-01")]
        ),
        "https://api.anthropic.com/v1/models"
    );
}

#[test]
fn chatgpt_sign_in_reroutes_only_when_every_condition_holds() {
    let default = config("https://api.openai.com/v1", "https://api.anthropic.com");
    let jwt = ("authorization", "Bearer eyJhbGciOi.x.y");
    let account = ("chatgpt-account-id", "acct");
    assert_eq!(
        url(&default, &Method::POST, "/v1/responses", &[jwt, account]),
        "https://chatgpt.com/backend-api/codex/responses"
    );
    // The scheme's name is read in any case, as HTTP reads it.
    assert_eq!(
        url(
            &default,
            &Method::POST,
            "/v1/responses",
            &[("authorization", "bearer  eyJhbGciOi.x.y"), account]
        ),
        "https://chatgpt.com/backend-api/codex/responses"
    );
    // Any condition failing keeps the OpenAI base.
    assert_eq!(
        url(&default, &Method::POST, "/v1/responses", &[jwt]),
        "https://api.openai.com/v1/responses"
    );
    assert_eq!(
        url(
            &default,
            &Method::POST,
            "/v1/responses",
            &[("authorization", "Bearer sk-1"), account]
        ),
        "https://api.openai.com/v1/responses"
    );
    let custom = config("http://127.0.0.1:9000/v1", "https://api.anthropic.com");
    assert_eq!(
        url(&custom, &Method::POST, "/v1/responses", &[jwt, account]),
        "http://127.0.0.1:9000/v1/responses"
    );
    let selected = target(
        &default,
        &Method::POST,
        "/v1/responses",
        &[jwt, account],
        Some("http://127.0.0.1:9999/custom/v1"),
    )
    .unwrap();
    assert_eq!(
        selected.uri.to_string(),
        "http://127.0.0.1:9999/custom/v1/responses"
    );
    // The Codex backend path always goes to the ChatGPT base.
    assert_eq!(
        url(&custom, &Method::POST, "/backend-api/codex/responses", &[]),
        "https://chatgpt.com/backend-api/codex/responses"
    );
}

#[test]
fn selected_bases_must_be_allowed() {
    let c = config("https://api.openai.com/v1", "https://api.anthropic.com");
    let ok = target(
        &c,
        &Method::POST,
        "/v1/chat/completions",
        &[],
        Some("http://127.0.0.1:9999/custom/v1/"),
    )
    .unwrap();
    assert_eq!(ok.base, UpstreamBase::Selected);
    assert_eq!(
        ok.uri.to_string(),
        "http://127.0.0.1:9999/custom/v1/chat/completions"
    );
    for bad in [
        "http://127.0.0.1:9998/custom/v1",
        "not a url",
        "http://evil.example/",
    ] {
        assert!(matches!(
            target(&c, &Method::POST, "/v1/chat/completions", &[], Some(bad)),
            Err(TargetError::NotAllowed(_))
        ));
    }
    assert_eq!(
        target(&c, &Method::POST, "/v1/messages", &[], None)
            .unwrap()
            .base,
        UpstreamBase::Configured
    );
}

/// A base the caller names is joined as the caller would join it: a shared `/v1` once, and
/// no `/v1` added to a base without one (the configured base of the same shape gets one).
#[test]
fn a_named_base_gets_the_path_as_its_caller_would_send_it() {
    let mut c = config("https://api.openai.com/v1", "https://api.anthropic.com");
    c.allowed_base_urls = vec![
        BaseUrl::parse("https://gemini.test/v1beta/openai").unwrap(),
        BaseUrl::parse("https://compat.test/v1").unwrap(),
    ];
    let named = |base: &str, path: &str| {
        target(&c, &Method::POST, path, &[], Some(base))
            .unwrap()
            .uri
            .to_string()
    };
    assert_eq!(
        named("https://gemini.test/v1beta/openai", "/chat/completions"),
        "https://gemini.test/v1beta/openai/chat/completions"
    );
    assert_eq!(
        named("https://gemini.test/v1beta/openai", "/responses"),
        "https://gemini.test/v1beta/openai/responses"
    );
    assert_eq!(
        named("https://compat.test/v1", "/v1/chat/completions"),
        "https://compat.test/v1/chat/completions"
    );
    assert_eq!(
        named("https://compat.test/v1", "/chat/completions"),
        "https://compat.test/v1/chat/completions"
    );
    let configured = config(
        "https://gemini.test/v1beta/openai",
        "https://api.anthropic.com",
    );
    assert_eq!(
        url(&configured, &Method::POST, "/chat/completions", &[]),
        "https://gemini.test/v1beta/openai/v1/chat/completions"
    );
}

/// pi names its provider's base on every request; naming the family's configured base is
/// allowed without listing it, and still counts as selected (so no daemon key is added).
/// The other family's configured base is not the family's own, and stays refused.
#[test]
fn the_configured_base_of_the_family_may_be_named() {
    let c = config("https://api.openai.com/v1", "https://api.anthropic.com");
    let named = target(
        &c,
        &Method::POST,
        "/v1/messages",
        &[],
        Some("https://api.anthropic.com/"),
    )
    .unwrap();
    assert_eq!(named.base, UpstreamBase::Selected);
    assert_eq!(
        named.uri.to_string(),
        "https://api.anthropic.com/v1/messages"
    );
    let openai = target(
        &c,
        &Method::POST,
        "/v1/chat/completions",
        &[],
        Some("https://api.openai.com/v1"),
    )
    .unwrap();
    assert_eq!(
        openai.uri.to_string(),
        "https://api.openai.com/v1/chat/completions"
    );
    assert!(matches!(
        target(
            &c,
            &Method::POST,
            "/v1/messages",
            &[],
            Some("https://api.openai.com/v1")
        ),
        Err(TargetError::NotAllowed(_))
    ));
}

#[test]
fn classification() {
    assert_eq!(PathClass::classify(&Method::HEAD, "/"), PathClass::HeadRoot);
    assert_eq!(PathClass::classify(&Method::GET, "/"), PathClass::NotFound);
    assert_eq!(
        PathClass::classify(&Method::GET, "/v1/messages"),
        PathClass::MethodNotAllowed { allow: "POST" }
    );
    assert_eq!(
        PathClass::classify(&Method::POST, "/healthz"),
        PathClass::MethodNotAllowed { allow: "GET, HEAD" }
    );
    assert_eq!(
        PathClass::classify(&Method::HEAD, "/healthz"),
        PathClass::Healthz
    );
    assert_eq!(
        PathClass::classify(&Method::POST, "/hooks/pi"),
        PathClass::Hook(Agent::Pi)
    );
    assert_eq!(
        PathClass::classify(&Method::POST, "/hooks/other"),
        PathClass::NotFound
    );
    assert_eq!(
        PathClass::classify(&Method::GET, "/_relay/v1/workers/not-a-uuid/status"),
        PathClass::WorkerStatus(None)
    );
    let id = uuid::Uuid::now_v7();
    assert_eq!(
        PathClass::classify(&Method::GET, &format!("/_relay/v1/workers/{id}/status")),
        PathClass::WorkerStatus(Some(id))
    );
    assert!(matches!(
        PathClass::classify(&Method::GET, "/v1/responses"),
        PathClass::Model {
            responses: true,
            ..
        }
    ));
}

#[test]
fn the_chatgpt_base_is_never_the_configured_base() {
    let c = config("https://api.openai.com/v1", "https://api.anthropic.com");
    let codex = target(&c, &Method::POST, "/backend-api/codex/responses", &[], None).unwrap();
    assert_eq!(codex.base, UpstreamBase::ChatGptCodex);
    assert_eq!(codex.family, Family::OpenAi);
    // A ChatGPT sign-in rerouted from the OpenAI paths is the ChatGPT base too.
    let signed_in = target(
        &c,
        &Method::POST,
        "/v1/responses",
        &[
            ("chatgpt-account-id", "acct"),
            ("authorization", "Bearer eyJhbGciOi"),
        ],
        None,
    )
    .unwrap();
    assert_eq!(signed_in.base, UpstreamBase::ChatGptCodex);
    assert_eq!(
        target(&c, &Method::POST, "/v1/responses", &[], None)
            .unwrap()
            .base,
        UpstreamBase::Configured
    );
}
