use http::HeaderMap;

use super::*;

fn map(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

fn names(map: &HeaderMap) -> Vec<String> {
    let mut names: Vec<String> = map.keys().map(|n| n.to_string()).collect();
    names.sort();
    names
}

/// The names left of `headers` by the request strip toward `toward`, and by the response
/// strip.
fn kept_both_ways(headers: HeaderMap, toward: Toward) -> [Vec<String>; 2] {
    let mut request = headers.clone();
    strip_request_headers(&mut request, toward);
    let mut response = headers;
    strip_response_headers(&mut response);
    [names(&request), names(&response)]
}

#[test]
fn request_headers_drop_hop_by_hop_framing_and_relay_headers() {
    let headers = map(&[
        ("host", "127.0.0.1:47632"),
        ("connection", "keep-alive, x-drop-me"),
        ("keep-alive", "timeout=5"),
        ("x-drop-me", "1"),
        ("te", "trailers"),
        ("transfer-encoding", "chunked"),
        ("content-length", "12"),
        ("upgrade", "h2c"),
        ("proxy-authorization", "Basic x"),
        ("x-relay-client-token", "secret"),
        ("x-relay-upstream-base-url", "http://x"),
        ("x-relay-session-id", "s1"),
        ("authorization", "Bearer sk-1"),
        ("x-api-key", "sk-ant"),
        ("anthropic-version", "2023-06-01"),
        ("anthropic-beta", "a"),
        ("anthropic-beta", "b"),
        ("session_id", "pi-session"),
        ("accept-encoding", "gzip"),
        ("user-agent", "claude-cli/2"),
    ]);
    let mut to_provider = headers.clone();
    strip_request_headers(&mut to_provider, Toward::Provider);
    assert_eq!(
        names(&to_provider),
        [
            "accept-encoding",
            "anthropic-beta",
            "anthropic-version",
            "authorization",
            "session_id",
            "user-agent",
            "x-api-key"
        ]
    );
    let betas: Vec<_> = to_provider.get_all("anthropic-beta").iter().collect();
    assert_eq!(betas, ["a", "b"]);
    let mut to_worker = headers;
    strip_request_headers(&mut to_worker, Toward::Worker);
    assert!(to_worker.contains_key("x-relay-upstream-base-url"));
    assert!(to_worker.contains_key("x-relay-session-id"));
    assert!(!to_worker.contains_key("x-relay-client-token"));
}

#[test]
fn every_proxy_header_is_hop_by_hop_both_ways() {
    let headers = map(&[
        ("proxy-status", "x"),
        ("proxy-anything", "1"),
        ("proxyish", "kept"),
        ("x-proxy-id", "kept"),
    ]);
    let kept = ["proxyish", "x-proxy-id"];
    assert_eq!(kept_both_ways(headers, Toward::Provider), [kept, kept]);
}

#[test]
fn a_connection_token_that_is_no_header_name_hides_none_of_the_others() {
    let mut headers = map(&[("x-api-key", "sk-caller"), ("x-kept", "1")]);
    headers.append(
        header::CONNECTION,
        HeaderValue::from_bytes(b"X-Api-Key, caf\xe9 ,, bad name").unwrap(),
    );
    assert_eq!(
        kept_both_ways(headers, Toward::Worker),
        [["x-kept"], ["x-kept"]]
    );
}

#[test]
fn names_listed_on_any_connection_line_are_dropped_whatever_their_case() {
    let headers = map(&[
        ("connection", "Keep-Alive, PROXY-X"),
        ("keep-alive", "timeout=5"),
        ("proxy-x", "1"),
        ("x-first", "1"),
        ("connection", "X-Second ,X-THIRD"),
        ("x-second", "2"),
        ("x-third", "3"),
        ("x-kept", "4"),
    ]);
    let kept = ["x-first", "x-kept"];
    assert_eq!(kept_both_ways(headers, Toward::Provider), [kept, kept]);
}

#[test]
fn a_connection_token_is_judged_hop_by_hop_in_any_case_and_length() {
    for token in [
        &b"Keep-Alive"[..],
        b"TE",
        b"Transfer-Encoding",
        b"PROXY-",
        b"proxy-a-name-longer-than-eighteen-bytes",
    ] {
        assert!(
            names_hop_by_hop(token),
            "{}",
            String::from_utf8_lossy(token)
        );
    }
    for token in [
        &b""[..],
        b"close",
        b"x-te",
        b"transfer-encoding-x",
        b"transfer-encodings",
        b"prox",
        b"caf\xe9",
    ] {
        assert!(
            !names_hop_by_hop(token),
            "{}",
            String::from_utf8_lossy(token)
        );
    }
}

proptest::proptest! {
    #[test]
    fn a_token_is_hop_by_hop_as_its_lowercase_name_is(token in "(?i:connection|keep-alive|te|trailer|transfer-encoding|upgrade|proxy-[a-z-]{0,30})[a-z-]{0,2}|[A-Za-z-]{0,40}") {
        proptest::prop_assert_eq!(
            names_hop_by_hop(token.as_bytes()),
            is_hop_by_hop(&token.to_ascii_lowercase())
        );
    }
}

#[test]
fn debug_output_never_shows_a_credential() {
    let headers = map(&[
        ("x-relay-client-token", "route-token-secret"),
        ("authorization", "Bearer sk-secret"),
    ]);
    let shown = format!("{:?}", ModelHeaders::read(&headers));
    assert!(!shown.contains("secret"), "{shown}");
    assert!(shown.contains("Present"), "{shown}");
}

#[test]
fn response_headers_keep_length_and_multi_values() {
    let headers = map(&[
        ("content-length", "5"),
        ("connection", "close"),
        ("set-cookie", "a=1"),
        ("set-cookie", "b=2"),
        ("retry-after", "7"),
    ]);
    let mut out = headers;
    strip_response_headers(&mut out);
    assert_eq!(names(&out), ["content-length", "retry-after", "set-cookie"]);
    assert_eq!(out.get_all("set-cookie").iter().count(), 2);
}

#[test]
fn credential_header_states() {
    assert_eq!(credential_header(&map(&[])), CredentialHeader::Missing);
    assert!(matches!(
        credential_header(&map(&[("x-relay-client-token", "a")])),
        CredentialHeader::Present(_)
    ));
    assert_eq!(
        credential_header(&map(&[
            ("x-relay-client-token", "a"),
            ("x-relay-client-token", "a")
        ])),
        CredentialHeader::Duplicated
    );
}

#[test]
fn json_media_type_allows_parameters_only() {
    assert!(is_json_media_type(&map(&[(
        "content-type",
        "application/json"
    )])));
    assert!(is_json_media_type(&map(&[(
        "content-type",
        "Application/JSON; charset=utf-8"
    )])));
    assert!(!is_json_media_type(&map(&[("content-type", "text/plain")])));
    assert!(!is_json_media_type(&map(&[(
        "content-type",
        "application/jsonx"
    )])));
    assert!(!is_json_media_type(&map(&[])));
}

/// Two `Content-Type` lines name no media type, whichever comes first: Relay would judge
/// the body by one while the provider might read it by the other.
#[test]
fn two_content_type_lines_are_not_json() {
    for pair in [
        [
            ("content-type", "application/json"),
            ("content-type", "text/plain"),
        ],
        [
            ("content-type", "text/plain"),
            ("content-type", "application/json"),
        ],
        [
            ("content-type", "application/json"),
            ("content-type", "application/json"),
        ],
    ] {
        let headers = map(&pair);
        assert!(!is_json_media_type(&headers), "{pair:?}");
        assert!(!ModelHeaders::read(&headers).is_json(), "{pair:?}");
    }
}

#[test]
fn provider_credentials_and_forwarding_marks() {
    for name in ["authorization", "x-api-key", "api-key", "anthropic-api-key"] {
        assert!(has_provider_credential(&map(&[(name, "k")])), "{name}");
    }
    assert!(!has_provider_credential(&map(&[(
        "anthropic-version",
        "1"
    )])));
    for name in ["forwarded", "x-forwarded-for", "via"] {
        assert!(has_forwarding_headers(&map(&[(name, "x")])), "{name}");
    }
}

/// The one pass over a model request's headers finds what a look-up of each would find,
/// whatever names, values, repeats and order the request carries.
mod model_headers {
    use proptest::prelude::*;

    use super::*;

    const NAMES: [&str; 12] = [
        "content-type",
        "content-length",
        "upgrade",
        "authorization",
        "x-relay-client-token",
        "x-relay-upstream-base-url",
        "anthropic-version",
        "chatgpt-account-id",
        "x-relay-session-id",
        "accept",
        "user-agent",
        "x-api-key",
    ];
    const VALUES: [&str; 7] = [
        "application/json",
        "text/plain",
        "WebSocket",
        "h2c",
        "12",
        "Bearer eyJ",
        "",
    ];

    proptest! {
        #[test]
        fn agree_with_look_ups(
            pairs in proptest::collection::vec((0..NAMES.len(), 0..VALUES.len()), 0..16)
        ) {
            let pairs: Vec<(&str, &str)> =
                pairs.into_iter().map(|(n, v)| (NAMES[n], VALUES[v])).collect();
            let headers = map(&pairs);
            let found = ModelHeaders::read(&headers);
            prop_assert_eq!(found.content_type, headers.get(header::CONTENT_TYPE));
            prop_assert_eq!(found.content_length, headers.get(header::CONTENT_LENGTH));
            prop_assert_eq!(found.authorization, headers.get(header::AUTHORIZATION));
            prop_assert_eq!(found.upstream_base_url, headers.get(UPSTREAM_BASE_URL));
            prop_assert_eq!(found.client_token, credential_header(&headers));
            prop_assert_eq!(found.is_json(), is_json_media_type(&headers));
            prop_assert_eq!(
                found.websocket,
                headers.get_all(header::UPGRADE).iter().any(names_websocket)
            );
            prop_assert_eq!(found.anthropic_version, headers.contains_key("anthropic-version"));
            prop_assert_eq!(found.chatgpt_account_id, headers.contains_key("chatgpt-account-id"));
        }
    }
}

proptest::proptest! {
    /// The media-type check with its shortcuts answers as the rule it states: the first
    /// `Content-Type` is visible ASCII, and without parameters and surrounding whitespace
    /// its type and subtype are the essence in any case.
    #[test]
    fn media_type_shortcuts_keep_the_rule(
        value in proptest::collection::vec(
            proptest::sample::select(b"aAjJsSoOnN/;= \t\x7f\xe9pplicatio".to_vec()),
            0..24,
        ),
        prefix in proptest::sample::select(vec!["", "application/json", " Application/JSON", "text/event-stream"]),
    ) {
        let mut bytes = prefix.as_bytes().to_vec();
        bytes.extend(value);
        let Ok(value) = HeaderValue::from_bytes(&bytes) else {
            return Ok(());
        };
        for essence in [&b"application/json"[..], b"text/event-stream"] {
            let rule = value.to_str().is_ok_and(|text| {
                let text = text.split(';').next().unwrap_or("");
                text.trim_matches([' ', '\t']).as_bytes().eq_ignore_ascii_case(essence)
            });
            proptest::prop_assert_eq!(media_type_is(Some(&value), essence), rule);
        }
    }
}

#[test]
fn content_codings_join_every_line_in_order() {
    assert_eq!(content_codings(&map(&[])), None);
    assert_eq!(
        content_codings(&map(&[("content-encoding", "gzip")])).as_deref(),
        Some("gzip")
    );
    assert_eq!(
        content_codings(&map(&[
            ("content-encoding", "identity"),
            ("content-encoding", "gzip, br")
        ]))
        .as_deref(),
        Some("identity,gzip, br")
    );
    let mut headers = HeaderMap::new();
    headers.append(
        header::CONTENT_ENCODING,
        HeaderValue::from_bytes(b"gz\xffip").unwrap(),
    );
    assert_eq!(content_codings(&headers).as_deref(), Some("gz\u{fffd}ip"));
}

#[test]
fn a_decimal_is_digits_only() {
    assert_eq!(decimal(b"0"), Some(0));
    assert_eq!(decimal(b"047900"), Some(47_900));
    assert_eq!(decimal(b"18446744073709551615"), Some(u64::MAX));
    for refused in [
        &b""[..],
        b"+5",
        b"-5",
        b" 5",
        b"5 ",
        b"5,5",
        b"0x10",
        b"\xd9\xa5",
        b"18446744073709551616",
    ] {
        assert_eq!(
            decimal(refused),
            None,
            "{:?}",
            String::from_utf8_lossy(refused)
        );
    }
}

proptest::proptest! {
    /// Beside the standard library's parse, which takes a sign as well.
    #[test]
    fn a_decimal_reads_as_the_standard_parse_without_a_sign(text in "[+0-9a]{0,22}") {
        let std = text.parse::<u64>().ok().filter(|_| !text.starts_with('+'));
        proptest::prop_assert_eq!(decimal(text.as_bytes()), std);
    }
}

#[test]
fn cookie_fields_split_over_http2_are_joined_in_order() {
    let mut headers = map(&[
        ("cookie", "a=1"),
        ("x-other", "v"),
        ("cookie", "b=2"),
        ("cookie", "c=3"),
    ]);
    join_cookies(&mut headers);
    let cookies: Vec<&HeaderValue> = headers.get_all("cookie").iter().collect();
    assert_eq!(cookies, ["a=1; b=2; c=3"]);
    assert_eq!(headers["x-other"], "v");
    // One field, or none, stays as it is.
    let mut one = map(&[("cookie", "a=1")]);
    join_cookies(&mut one);
    assert_eq!(one, map(&[("cookie", "a=1")]));
}
