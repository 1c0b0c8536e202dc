use http::{Method, Request, StatusCode};

use super::*;
use crate::config::BaseUrl;
use crate::routes::Family;

fn upstream() -> UpstreamConfig {
    UpstreamConfig {
        allowed_base_urls: vec![BaseUrl::parse("http://127.0.0.1:9999/custom/v1").unwrap()],
        ..UpstreamConfig::default()
    }
}

fn prologue(upstream: &UpstreamConfig, require_json: bool) -> Prologue<'_> {
    Prologue {
        upstream,
        max_body_bytes: 100,
        stream_idle: Duration::from_secs(1),
        require_json,
    }
}

fn request(method: Method, path: &str, headers: &[(&str, &str)]) -> Request<()> {
    let mut builder = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(()).unwrap()
}

/// The shape check, with the headers read as the callers read them.
fn shape(rules: &Prologue<'_>, req: &Request<()>, responses: bool) -> Result<(), Refused> {
    rules.shape(req, &ModelHeaders::read(req.headers()), responses)
}

/// The target check of an OpenAI request, with the headers read as the callers read them.
fn target(rules: &Prologue<'_>, req: &Request<()>) -> Result<UpstreamTarget, Refused> {
    rules.target(req, &ModelHeaders::read(req.headers()), OPENAI)
}

const JSON: (&str, &str) = ("content-type", "application/json");
const OPENAI: ModelFamily = ModelFamily::Fixed(Family::OpenAi);

#[test]
fn the_shape_is_checked_websocket_first_then_method_then_media_type() {
    let upstream = upstream();
    let daemon = prologue(&upstream, true);
    let upgrade = request(Method::GET, "/v1/responses", &[("upgrade", "websocket")]);
    assert_eq!(
        shape(&daemon, &upgrade, true),
        Err(Refused::UpgradeRequired)
    );
    // Only Responses paths answer 426 and 405 here; the others are classified by path.
    assert_eq!(shape(&daemon, &upgrade, false), Ok(()));
    let get = request(Method::GET, "/v1/responses", &[]);
    assert_eq!(shape(&daemon, &get, true), Err(Refused::MethodNotAllowed));
    let text = request(
        Method::POST,
        "/v1/responses",
        &[("content-type", "text/plain")],
    );
    assert_eq!(
        shape(&daemon, &text, true),
        Err(Refused::UnsupportedMediaType)
    );
    assert_eq!(shape(&prologue(&upstream, false), &text, true), Ok(()));
    let json = request(Method::POST, "/v1/responses", &[JSON]);
    assert_eq!(shape(&daemon, &json, true), Ok(()));
}

#[test]
fn the_target_checks_the_declared_length_before_the_selected_base() {
    let upstream = upstream();
    let rules = prologue(&upstream, true);
    let big = request(
        Method::POST,
        "/v1/responses",
        &[
            JSON,
            ("content-length", "101"),
            ("x-relay-upstream-base-url", "http://evil.example"),
        ],
    );
    assert_eq!(target(&rules, &big), Err(Refused::TooLarge { limit: 100 }));
    let evil = request(
        Method::POST,
        "/v1/responses",
        &[JSON, ("x-relay-upstream-base-url", "http://evil.example")],
    );
    assert_eq!(target(&rules, &evil), Err(Refused::UpstreamNotAllowed));
    let allowed = request(
        Method::POST,
        "/v1/responses",
        &[
            JSON,
            ("content-length", "100"),
            (
                "x-relay-upstream-base-url",
                "http://127.0.0.1:9999/custom/v1",
            ),
        ],
    );
    let target = target(&rules, &allowed).unwrap();
    assert_eq!(
        target.uri.to_string(),
        "http://127.0.0.1:9999/custom/v1/responses"
    );
    assert_eq!(target.base, crate::routes::UpstreamBase::Selected);
}

#[test]
fn a_selected_base_that_is_not_text_is_not_allowed() {
    let upstream = upstream();
    let mut req = request(Method::POST, "/v1/responses", &[JSON]);
    req.headers_mut().insert(
        headers::UPSTREAM_BASE_URL,
        http::HeaderValue::from_bytes(b"http://\xff").unwrap(),
    );
    assert_eq!(
        target(&prologue(&upstream, true), &req),
        Err(Refused::UpstreamNotAllowed)
    );
}

#[test]
fn every_refusal_answers_its_status() {
    for (refused, status) in [
        (Refused::UpgradeRequired, StatusCode::UPGRADE_REQUIRED),
        (Refused::MethodNotAllowed, StatusCode::METHOD_NOT_ALLOWED),
        (
            Refused::UnsupportedMediaType,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
        (
            Refused::TooLarge { limit: 1 },
            StatusCode::PAYLOAD_TOO_LARGE,
        ),
        (Refused::UpstreamNotAllowed, StatusCode::BAD_REQUEST),
        (Refused::BadPath, StatusCode::BAD_REQUEST),
    ] {
        assert_eq!(refused.answer().status(), status, "{refused:?}");
    }
}
