//! Transcripts of what each detector and action does, and the universal rules as
//! properties: nothing an enabled detector matches survives, the prefilter never hides a
//! match, clean input comes back borrowed, and a redacted JSON body stays the same JSON
//! with only its secrets replaced.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::OnceLock;

use expect_test::{Expect, expect};
use proptest::prelude::*;
use regex::Regex;

use super::*;

const KEY: &[u8] = b"worker-generation-key-for-tests!";

fn custom() -> CustomDetector {
    CustomDetector {
        name: "employee_id".to_owned(),
        regex: Regex::new("EMP-[0-9]{6}").unwrap(),
        keywords: vec!["EMP-".to_owned()],
    }
}

/// One redactor per action, built once: the properties run hundreds of cases.
fn redactor(action: RedactAction) -> &'static Redactor {
    static REDACTORS: OnceLock<[Redactor; 3]> = OnceLock::new();
    let all = REDACTORS.get_or_init(|| {
        [RedactAction::Redact, RedactAction::Hash, RedactAction::Mask].map(|action| {
            Redactor::new(
                &RedactionConfig {
                    detectors: Detector::ALL.to_vec(),
                    custom: vec![custom()],
                    action,
                    redact_requests: true,
                },
                KEY,
            )
        })
    });
    match action {
        RedactAction::Redact => &all[0],
        RedactAction::Hash => &all[1],
        RedactAction::Mask => &all[2],
    }
}

fn check(action: RedactAction, inputs: &[&str], expect: Expect) {
    let redactor = redactor(action);
    let mut out = String::new();
    for input in inputs {
        let (text, replaced) = redactor.redact_str_counted(input);
        let counts: Vec<String> = replaced.iter().map(|(d, n)| format!("{d}={n}")).collect();
        let borrowed = if matches!(text, Cow::Borrowed(_)) {
            " (borrowed)"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "{input:?}\n  -> {text:?}{borrowed} {}",
            counts.join(" ")
        );
    }
    expect.assert_eq(&out);
}

const SAMPLES: &[&str] = &[
    "hello, nothing to see here: version 1.2, 42 apples",
    "mail alice.smith+relay@example.co.uk and bob@corp.example.com",
    "git@github.com:org/repo.git is not a secret but looks like one",
    "OPENAI_API_KEY=sk-proj-abcdefghijklmnop1234 and ANTHROPIC=sk-ant-api03-ABCDEFGHIJKLMNOP_qrstu-vwxyz",
    "sk-short and disk-abcdefghijklmnopqrstuvwxyz stay",
    "token ghp_0123456789abcdefghijABCDEFGHIJ0123 for the bot, slack xoxb-1234567890-abcdefghij",
    "Authorization: Bearer abc.DEF-ghi_jkl~mno+pqr/stu==",
    "bearer of bad news",
    "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c end",
    "aws AKIAIOSFODNN7EXAMPLE and ASIAXXXXXXXXXXXXXXXX1 (too long) and AKIA123 (too short)",
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA\n-----END OPENSSH PRIVATE KEY-----\nafter",
    "cut off: -----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA",
    "-----BEGIN PUBLIC KEY-----\nMFkwEwYH\n-----END PUBLIC KEY-----",
    "card 4111 1111 1111 1111, also 5500-0000-0000-0004, not 4111 1111 1111 1112",
    "order 12345678901234567890123 and 378282246310005",
    "from 192.168.1.20 to 10.0.0.255, not 256.1.1.1 nor 1.2.3",
    "staff EMP-123456 and emp-654321 (case matters for the regex)",
    "mixed: Bearer sk-abcdefghijklmnopqrstu and x@y.io@z.io",
];

#[test]
fn redact_replaces_each_detector_by_name() {
    check(
        RedactAction::Redact,
        SAMPLES,
        expect![[r#"
            "hello, nothing to see here: version 1.2, 42 apples"
              -> "hello, nothing to see here: version 1.2, 42 apples" (borrowed) 
            "mail alice.smith+relay@example.co.uk and bob@corp.example.com"
              -> "mail [REDACTED:email] and [REDACTED:email]" email=2
            "git@github.com:org/repo.git is not a secret but looks like one"
              -> "[REDACTED:email]:org/repo.git is not a secret but looks like one" email=1
            "OPENAI_API_KEY=sk-proj-abcdefghijklmnop1234 and ANTHROPIC=sk-ant-api03-ABCDEFGHIJKLMNOP_qrstu-vwxyz"
              -> "OPENAI_API_KEY=[REDACTED:api_key] and ANTHROPIC=[REDACTED:api_key]" api_key=2
            "sk-short and disk-abcdefghijklmnopqrstuvwxyz stay"
              -> "sk-short and disk-abcdefghijklmnopqrstuvwxyz stay" (borrowed) 
            "token ghp_0123456789abcdefghijABCDEFGHIJ0123 for the bot, slack xoxb-1234567890-abcdefghij"
              -> "token [REDACTED:api_key] for the bot, slack [REDACTED:api_key]" api_key=2
            "Authorization: Bearer abc.DEF-ghi_jkl~mno+pqr/stu=="
              -> "Authorization: Bearer [REDACTED:bearer_token]" bearer_token=1
            "bearer of bad news"
              -> "bearer of bad news" (borrowed) 
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c end"
              -> "jwt [REDACTED:jwt] end" jwt=1
            "aws AKIAIOSFODNN7EXAMPLE and ASIAXXXXXXXXXXXXXXXX1 (too long) and AKIA123 (too short)"
              -> "aws [REDACTED:aws_access_key_id] and ASIAXXXXXXXXXXXXXXXX1 (too long) and AKIA123 (too short)" aws_access_key_id=1
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA\n-----END OPENSSH PRIVATE KEY-----\nafter"
              -> "[REDACTED:private_key]\nafter" private_key=1
            "cut off: -----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA"
              -> "cut off: [REDACTED:private_key]" private_key=1
            "-----BEGIN PUBLIC KEY-----\nMFkwEwYH\n-----END PUBLIC KEY-----"
              -> "-----BEGIN PUBLIC KEY-----\nMFkwEwYH\n-----END PUBLIC KEY-----" (borrowed) 
            "card 4111 1111 1111 1111, also 5500-0000-0000-0004, not 4111 1111 1111 1112"
              -> "card [REDACTED:credit_card], also [REDACTED:credit_card], not 4111 1111 1111 1112" credit_card=2
            "order 12345678901234567890123 and 378282246310005"
              -> "order 12345678901234567890123 and [REDACTED:credit_card]" credit_card=1
            "from 192.168.1.20 to 10.0.0.255, not 256.1.1.1 nor 1.2.3"
              -> "from [REDACTED:ip_address] to [REDACTED:ip_address], not 256.1.1.1 nor 1.2.3" ip_address=2
            "staff EMP-123456 and emp-654321 (case matters for the regex)"
              -> "staff [REDACTED:employee_id] and emp-654321 (case matters for the regex)" employee_id=1
            "mixed: Bearer sk-abcdefghijklmnopqrstu and x@y.io@z.io"
              -> "mixed: Bearer [REDACTED:api_key] and [REDACTED:email]@z.io" api_key=1 email=1
        "#]],
    );
}

#[test]
fn hash_correlates_equal_values_without_showing_them() {
    check(
        RedactAction::Hash,
        &[
            "alice@example.com wrote to alice@example.com and bob@example.com",
            "sk-ant-api03-ABCDEFGHIJKLMNOP",
        ],
        expect![[r#"
            "alice@example.com wrote to alice@example.com and bob@example.com"
              -> "[HASH:email:42c9a5a12957] wrote to [HASH:email:42c9a5a12957] and [HASH:email:06f76d49c1b1]" email=3
            "sk-ant-api03-ABCDEFGHIJKLMNOP"
              -> "[HASH:api_key:17573f4951f7]" api_key=1
        "#]],
    );
    // Another generation's key gives other hashes.
    let other = Redactor::new(
        &RedactionConfig {
            action: RedactAction::Hash,
            ..RedactionConfig::default()
        },
        b"another-generation",
    );
    let mine = redactor(RedactAction::Hash);
    assert_ne!(
        other.redact_str("alice@example.com"),
        mine.redact_str("alice@example.com")
    );
}

#[test]
fn mask_keeps_the_edges() {
    check(
        RedactAction::Mask,
        &[
            "alice@example.com",
            "sk-ant-api03-ABCDEFGHIJKLMNOP",
            "4111111111111111",
            "1.2.3.4",
            "Bearer abcdefgh",
        ],
        expect![[r#"
            "alice@example.com"
              -> "al*************om" email=1
            "sk-ant-api03-ABCDEFGHIJKLMNOP"
              -> "sk*************************OP" api_key=1
            "4111111111111111"
              -> "41************11" credit_card=1
            "1.2.3.4"
              -> "*******" ip_address=1
            "Bearer abcdefgh"
              -> "Bearer ab****gh" bearer_token=1
        "#]],
    );
}

#[test]
fn only_enabled_detectors_run() {
    let redactor = Redactor::new(
        &RedactionConfig {
            detectors: vec![Detector::Email],
            ..RedactionConfig::default()
        },
        KEY,
    );
    assert_eq!(
        redactor.redact_str("a@b.io sk-abcdefghijklmnopqrst 10.0.0.1"),
        "[REDACTED:email] sk-abcdefghijklmnopqrst 10.0.0.1"
    );
    let none = Redactor::new(
        &RedactionConfig {
            detectors: Vec::new(),
            ..RedactionConfig::default()
        },
        KEY,
    );
    assert!(matches!(none.redact_str("a@b.io"), Cow::Borrowed(_)));
}

#[test]
fn luhn_accepts_valid_numbers_only() {
    for valid in [
        "4111111111111111",
        "5500 0000 0000 0004",
        "378282246310005",
        "6011-1111-1111-1117",
    ] {
        assert!(luhn(valid), "{valid}");
    }
    for invalid in ["4111111111111112", "123", "0000", "12345678901234567890"] {
        assert!(!luhn(invalid), "{invalid}");
    }
}

fn check_body(action: RedactAction, bodies: &[&str], expect: Expect) {
    let redactor = redactor(action);
    let mut out = String::new();
    for body in bodies {
        let result = redactor.redact_json_body(body.as_bytes());
        let counts: Vec<String> = result
            .replaced
            .iter()
            .map(|(d, n)| format!("{d}={n}"))
            .collect();
        let text = String::from_utf8_lossy(&result.body);
        let borrowed = if matches!(result.body, Cow::Borrowed(_)) {
            " (borrowed)"
        } else {
            ""
        };
        let _ = writeln!(out, "{body}\n  -> {text}{borrowed} {}", counts.join(" "));
    }
    expect.assert_eq(&out);
}

#[test]
fn bodies_are_rewritten_only_inside_the_strings_that_hold_a_secret() {
    check_body(
        RedactAction::Redact,
        &[
            r#"{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}],"max_tokens":8192}"#,
            r#"{"z":1,  "messages" : [ {"role":"user","content":"mail bob@example.com"} ], "a":"10.0.0.1.x"}"#,
            r#"{"content":"line\nbob@example.com\n\"quoted\" \u00e9\u00E9 sk-abcdefghijklmnopqrst"}"#,
            r#"{"tool_result":"-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----\n","other":"\ud83d\ude00 ok"}"#,
            r#"{"bob@example.com":true,"k":"v"}"#,
            r#"{"broken":"a@b.io"#,
            "not json at all: a@b.io",
            r#"  ["a@b.io", "unterminated c@d.io"#,
        ],
        expect![[r#"
            {"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}],"max_tokens":8192}
              -> {"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}],"max_tokens":8192} (borrowed) 
            {"z":1,  "messages" : [ {"role":"user","content":"mail bob@example.com"} ], "a":"10.0.0.1.x"}
              -> {"z":1,  "messages" : [ {"role":"user","content":"mail [REDACTED:email]"} ], "a":"[REDACTED:ip_address].x"} email=1 ip_address=1
            {"content":"line\nbob@example.com\n\"quoted\" \u00e9\u00E9 sk-abcdefghijklmnopqrst"}
              -> {"content":"line\n[REDACTED:email]\n\"quoted\" éé [REDACTED:api_key]"} email=1 api_key=1
            {"tool_result":"-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----\n","other":"\ud83d\ude00 ok"}
              -> {"tool_result":"[REDACTED:private_key]\n","other":"\ud83d\ude00 ok"} private_key=1
            {"bob@example.com":true,"k":"v"}
              -> {"[REDACTED:email]":true,"k":"v"} email=1
            {"broken":"a@b.io
              -> {"broken":"[REDACTED:email] email=1
            not json at all: a@b.io
              -> not json at all: [REDACTED:email] email=1
              ["a@b.io", "unterminated c@d.io
              ->   ["[REDACTED:email]", "unterminated [REDACTED:email] email=2
        "#]],
    );
}

/// Bytes that are not UTF-8 hide nothing around them: a JSON body keeps its structure and
/// each string is redacted by its UTF-8 parts, as is a body that is not JSON; the invalid
/// bytes stay as they were.
#[test]
fn bytes_that_are_not_utf8_do_not_hide_a_secret() {
    let redactor = redactor(RedactAction::Redact);
    let cases: [(&[u8], &[u8]); 5] = [
        (
            b"{\"content\":\"x\xff key sk-ant-api03-abcdefghijklmnop end\",\"n\":1}",
            b"{\"content\":\"x\xff key [REDACTED:api_key] end\",\"n\":1}",
        ),
        (
            b"{\"content\":\"\xed\xa0\x80 mail bob@example.com\",\"other\":\"\xc3\"}",
            b"{\"content\":\"\xed\xa0\x80 mail [REDACTED:email]\",\"other\":\"\xc3\"}",
        ),
        // An escape beside the bad byte: the literal is decoded leniently.
        (
            b"{\"content\":\"\xfe\\n bob@example.com\"}",
            "{\"content\":\"\u{FFFD}\\n [REDACTED:email]\"}".as_bytes(),
        ),
        (
            b"not json \xff sk-ant-api03-abcdefghijklmnop",
            b"not json \xff [REDACTED:api_key]",
        ),
        // Cut in the middle of a character, and of the document.
        (
            b"{\"content\":\"bob@example.com \xc3",
            b"{\"content\":\"[REDACTED:email] \xc3",
        ),
    ];
    for (body, expected) in cases {
        let result = redactor.redact_json_body(body);
        assert_eq!(
            String::from_utf8_lossy(&result.body),
            String::from_utf8_lossy(expected),
            "{}",
            String::from_utf8_lossy(body)
        );
        assert_eq!(&*result.body, expected);
        assert!(!result.replaced.is_empty());
    }
}

// Properties.

/// Pieces that hold one secret each, and noise that may hold none (or accidentally one).
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("alice@example.com".to_owned()),
        Just("sk-ant-api03-ABCDEFGHIJKLMNOP".to_owned()),
        Just("ghp_0123456789abcdefghijABCDEFGHIJ".to_owned()),
        Just("Bearer abcdefgh12345678".to_owned()),
        Just("eyJhbGciOi.eyJzdWIiOi.sig_nature".to_owned()),
        Just("AKIAIOSFODNN7EXAMPLE".to_owned()),
        Just("-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----".to_owned()),
        Just("4111 1111 1111 1111".to_owned()),
        Just("378282246310005".to_owned()),
        Just("192.168.0.1".to_owned()),
        Just("EMP-123456".to_owned()),
        "[a-zA-Z0-9 .@:_/=+-]{0,12}",
        "[0-9 .-]{0,20}",
        "[\\PC\n\t\"\\\\]{0,8}",
    ]
}

fn text() -> impl Strategy<Value = String> {
    proptest::collection::vec(fragment(), 0..8).prop_map(|parts| parts.concat())
}

/// Every detector's matches, ignoring the prefilters.
fn all_matches(redactor: &Redactor, text: &str) -> Vec<(usize, usize, usize)> {
    let mut found = Vec::new();
    for (index, detector) in redactor.detectors.iter().enumerate() {
        find_spans(detector, text, |s, e| found.push((s, e, index)));
    }
    found
}

fn any_action() -> impl Strategy<Value = RedactAction> {
    prop_oneof![
        Just(RedactAction::Redact),
        Just(RedactAction::Hash),
        Just(RedactAction::Mask)
    ]
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(|n| serde_json::json!(n)),
        text().prop_map(serde_json::Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            proptest::collection::btree_map(text(), inner, 0..4)
                .prop_map(|map| serde_json::Value::Object(map.into_iter().collect())),
        ]
    })
}

/// The expected result of body redaction: every string (keys too) redacted as a text.
fn redact_value(redactor: &Redactor, value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(s) => Value::String(redactor.redact_str(s).into_owned()),
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| redact_value(redactor, v)).collect())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    (
                        redactor.redact_str(k).into_owned(),
                        redact_value(redactor, v),
                    )
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

proptest! {
    #[test]
    fn no_output_holds_a_match_of_an_enabled_detector(text in text(), action in any_action()) {
        let redactor = redactor(action);
        let out = redactor.redact_str(&text);
        prop_assert_eq!(all_matches(redactor, &out), Vec::new(), "{:?} -> {:?}", text, out);
    }

    #[test]
    fn the_prefilter_never_hides_a_match(text in text()) {
        let redactor = redactor(RedactAction::Redact);
        let triggered = redactor.triggered(text.as_bytes());
        for (_, _, index) in all_matches(redactor, &text) {
            prop_assert!(triggered & (1 << index) != 0, "{} in {:?}", redactor.detectors[index].name, text);
        }
    }

    #[test]
    fn clean_input_is_returned_borrowed(text in text()) {
        let redactor = redactor(RedactAction::Redact);
        let (out, replaced) = redactor.redact_str_counted(&text);
        if all_matches(redactor, &text).is_empty() {
            prop_assert!(matches!(out, Cow::Borrowed(_)));
            prop_assert!(replaced.is_empty());
        } else {
            prop_assert!(matches!(out, Cow::Owned(_)));
            prop_assert!(replaced.total() > 0);
        }
    }

    #[test]
    fn a_redacted_body_is_the_same_json_with_its_strings_redacted(
        value in json_value(),
        pretty in any::<bool>(),
        action in any_action(),
    ) {
        let redactor = redactor(action);
        let body = if pretty {
            serde_json::to_vec_pretty(&value)
        } else {
            serde_json::to_vec(&value)
        };
        let body = body.unwrap();
        let result = redactor.redact_json_body(&body);
        let parsed: serde_json::Value = serde_json::from_slice(&result.body)
            .map_err(|e| TestCaseError::fail(format!("{e}: {}", String::from_utf8_lossy(&result.body))))?;
        prop_assert_eq!(&parsed, &redact_value(redactor, &value));
        if result.replaced.is_empty() {
            prop_assert!(matches!(result.body, Cow::Borrowed(_)));
        }
    }

    /// A client may escape any character; `\u0040` is still an `@`.
    #[test]
    fn escapes_do_not_hide_a_secret_from_body_redaction(value in json_value(), action in any_action()) {
        let redactor = redactor(action);
        let mut body = Vec::new();
        // These bytes occur only inside strings in the generated JSON (no floats, and no
        // `true`, `false` or `null` holds them).
        for &b in serde_json::to_vec(&value).unwrap().iter() {
            match b {
                b'@' | b'k' | b'.' | b'A' => {
                    body.extend_from_slice(format!("\\u{:04x}", b).as_bytes())
                }
                b => body.push(b),
            }
        }
        let result = redactor.redact_json_body(&body);
        let parsed: serde_json::Value = serde_json::from_slice(&result.body)
            .map_err(|e| TestCaseError::fail(format!("{e}: {}", String::from_utf8_lossy(&result.body))))?;
        prop_assert_eq!(&parsed, &redact_value(redactor, &value));
    }
}

/// Anthropic refuses a thinking block that does not come back as it was sent, and OpenAI
/// its encrypted reasoning: those values are left alone, every other string is redacted.
#[test]
fn what_the_provider_signed_comes_back_unchanged() {
    let redactor = redactor(RedactAction::Redact);
    let body = serde_json::json!({
        "model": "claude-sonnet-4-5",
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [
            {"role": "user", "content": "write to jane.doe@example.com"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "The user wants mail sent to jane@example.org.", "signature": "sig-jane@example.org"},
                {"type": "redacted_thinking", "data": "opaque bob@example.net"},
                {"type": "text", "text": "Mailing jane@example.org now."}
            ]},
        ],
        "input": [{"type": "reasoning", "encrypted_content": "gAAA carol@example.com", "summary": []}]
    });
    let body = serde_json::to_vec(&body).unwrap();
    let result = redactor.redact_json_body(&body);
    let sent: serde_json::Value = serde_json::from_slice(&result.body).unwrap();
    let text = sent.to_string();
    assert!(!text.contains("jane.doe@example.com"), "{text}");
    assert_eq!(
        sent["messages"][1]["content"][0],
        serde_json::json!({"type": "thinking", "thinking": "The user wants mail sent to jane@example.org.", "signature": "sig-jane@example.org"})
    );
    assert_eq!(
        sent["messages"][1]["content"][1]["data"],
        "opaque bob@example.net"
    );
    assert_eq!(
        sent["input"][0]["encrypted_content"],
        "gAAA carol@example.com"
    );
    // The same address in the assistant's visible text is redacted.
    let visible = sent["messages"][1]["content"][2]["text"].as_str().unwrap();
    assert!(!visible.contains("jane@example.org"), "{visible}");
    assert_eq!(result.replaced.total(), 2);

    // A lone surrogate elsewhere (a tool output cut in the middle of an emoji) leaves the
    // thinking block alone all the same, though serde_json refuses the document as sent.
    let cut = br#"{"messages":[{"role":"user","content":"ran \ud83d ok, mail jane.doe@example.com"},{"role":"assistant","content":[{"type":"thinking","thinking":"mail jane@example.org","signature":"s"}]}]}"#;
    let result = redactor.redact_json_body(cut);
    let text = String::from_utf8(result.body.into_owned()).unwrap();
    assert!(
        text.contains(r#""thinking":"mail jane@example.org""#),
        "{text}"
    );
    assert!(!text.contains("jane.doe@example.com"), "{text}");

    // So does a byte that is not UTF-8 elsewhere in the body.
    let invalid = b"{\"messages\":[{\"role\":\"user\",\"content\":\"ran \xff ok, mail jane.doe@example.com\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"mail jane@example.org\",\"signature\":\"s\"}]}]}";
    let result = redactor.redact_json_body(invalid);
    let text = String::from_utf8_lossy(&result.body);
    assert!(
        text.contains(r#""thinking":"mail jane@example.org""#),
        "{text}"
    );
    assert!(!text.contains("jane.doe@example.com"), "{text}");

    // A block of the same shape in a user turn is the client's own text: redacted.
    let forged = serde_json::json!({
        "messages": [{"role": "user", "content": [
            {"type": "thinking", "thinking": "key jane@example.org", "signature": "s"}
        ]}]
    });
    let forged = serde_json::to_vec(&forged).unwrap();
    let result = redactor.redact_json_body(&forged);
    let text = String::from_utf8(result.body.into_owned()).unwrap();
    assert!(!text.contains("jane@example.org"), "{text}");
}

/// Tokens that platforms print on their own (`gcloud auth print-access-token`, `vault print
/// token`, `npm token create`, `heroku auth:token`), with no name before them to say what
/// they are; and words that only start alike, which stay.
#[test]
fn platform_tokens_printed_alone_are_api_keys() {
    check(
        RedactAction::Redact,
        &[
            "ya29.a0AfB_byC1dEfGhIjKlMnOpQrStUvWxYz0123456789",
            "hvs.CAESIJ5xsecretvaulttokenvalue1234GiCgpodnMuVnN3",
            "glpat-xY3zAbCdEfGhIjKlMnOp",
            "npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
            "pypi-AgEIcHlwaS5vcmcCJGFiY2RlZmdoLWlqa2wtbW5vcC1xcnN0LXV2d3h5ejAxMjM0",
            "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
            "dop_v1_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "STRIPE_SECRET=sk_live_51HxyzAbCdEfGhIjKl and rk_test_51HxyzAbCdEfGhIjKl",
            "SG.AbCdEfGhIjKlMnOpQr.StUvWxYz0123456789AbCd",
            "HRKU-AbCdEf0123456789-GhIjKl",
            "shpat_0123456789abcdef0123456789abcdef and xapp-1-A0123-456-abcdef",
            "pk_live_51HxyzAbCdEfGhIjKl, npm_config_cache, hf_hub, SG.x, ya29.short, hvs.short",
        ],
        expect![[r#"
            "ya29.a0AfB_byC1dEfGhIjKlMnOpQrStUvWxYz0123456789"
              -> "[REDACTED:api_key]" api_key=1
            "hvs.CAESIJ5xsecretvaulttokenvalue1234GiCgpodnMuVnN3"
              -> "[REDACTED:api_key]" api_key=1
            "glpat-xY3zAbCdEfGhIjKlMnOp"
              -> "[REDACTED:api_key]" api_key=1
            "npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
              -> "[REDACTED:api_key]" api_key=1
            "pypi-AgEIcHlwaS5vcmcCJGFiY2RlZmdoLWlqa2wtbW5vcC1xcnN0LXV2d3h5ejAxMjM0"
              -> "[REDACTED:api_key]" api_key=1
            "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567"
              -> "[REDACTED:api_key]" api_key=1
            "dop_v1_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
              -> "[REDACTED:api_key]" api_key=1
            "STRIPE_SECRET=sk_live_51HxyzAbCdEfGhIjKl and rk_test_51HxyzAbCdEfGhIjKl"
              -> "STRIPE_SECRET=[REDACTED:api_key] and [REDACTED:api_key]" api_key=2
            "SG.AbCdEfGhIjKlMnOpQr.StUvWxYz0123456789AbCd"
              -> "[REDACTED:api_key]" api_key=1
            "HRKU-AbCdEf0123456789-GhIjKl"
              -> "[REDACTED:api_key]" api_key=1
            "shpat_0123456789abcdef0123456789abcdef and xapp-1-A0123-456-abcdef"
              -> "[REDACTED:api_key] and [REDACTED:api_key]" api_key=2
            "pk_live_51HxyzAbCdEfGhIjKl, npm_config_cache, hf_hub, SG.x, ya29.short, hvs.short"
              -> "pk_live_51HxyzAbCdEfGhIjKl, npm_config_cache, hf_hub, SG.x, ya29.short, hvs.short" (borrowed) 
        "#]],
    );
}
