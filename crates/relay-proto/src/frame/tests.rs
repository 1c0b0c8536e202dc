use expect_test::{Expect, expect};
use proptest::prelude::*;

use super::*;
use crate::message::*;
use crate::types::*;

fn id(n: u8) -> Id {
    Id([n; 16])
}

fn b32(n: u8) -> Bytes32 {
    Bytes32([n; 32])
}

fn text(s: &str) -> Text {
    Text::new(s).unwrap()
}

fn timers() -> Timers {
    Timers::default()
}

fn grant() -> Grant {
    Grant {
        activation_id: id(0x11),
        activation_token: b32(0x22),
        bind_ip: [127, 0, 0, 1],
        port: 0,
        advertise_address: None,
    }
}

/// One sample of every message of §5.6.
fn samples() -> Vec<Message> {
    vec![
        Message::Hello(Hello {
            role: Role::Mcp,
            protocols: ProtocolRange { min: 1, max: 1 },
            binary_version: text("0.1.0"),
            instance_id: id(1),
            machine_key: PublicKey([2; 32]),
            client_nonce: b32(3),
            target_origin: text("http://127.0.0.1:47632"),
        }),
        Message::Challenge(Challenge {
            daemon_key: PublicKey([4; 32]),
            daemon_nonce: b32(5),
            challenge_id: id(6),
            selected_protocol: 1,
            signature: Signature([7; 64]),
        }),
        Message::Refused(Refused {
            code: RefusedCode::GrantReplayed.code(),
            text: text("grant already used"),
            supported: SUPPORTED_PROTOCOLS,
        }),
        Message::RegisterMcp(RegisterMcp {
            signature: Signature([8; 64]),
            fields: RegisterMcpFields {
                credential: b32(9),
                worker_hint: Some(WorkerHint {
                    advertise_address: Some(text("10.0.0.7")),
                    port: Some(47700),
                }),
            },
        }),
        Message::ResumeMcp(ResumeMcp {
            signature: Signature([10; 64]),
            fields: ResumeMcpFields {
                session_id: id(11),
                resume_token: b32(12),
            },
        }),
        Message::RegisterWorker(RegisterWorker {
            signature: Signature([13; 64]),
            fields: RegisterWorkerFields {
                activation_id: id(14),
                activation_token: b32(15),
                endpoint: text("127.0.0.1:40001"),
                certificate_sha256: b32(16),
            },
        }),
        Message::ResumeWorker(ResumeWorker {
            signature: Signature([17; 64]),
            fields: ResumeWorkerFields {
                worker_id: id(18),
                certificate_sha256: b32(19),
            },
        }),
        Message::Registered(Registered::Mcp {
            session_id: id(20),
            resume_token: b32(21),
            directive: Directive::LaunchWorker(grant()),
            timers: timers(),
        }),
        Message::Registered(Registered::Worker {
            worker_id: id(22),
            generation_secret: b32(23),
            drain_deadline_ms: Some(120_000),
            timers: timers(),
        }),
        Message::LaunchWorker(grant()),
        Message::WaitForWorker {
            retry_after_ms: 1000,
        },
        Message::ReuseWorker,
        Message::RouteReady,
        Message::UsePassThrough,
        Message::ActivationFailed(McpActivationFailed {
            activation_id: id(24),
            failure_reason: text("worker_exited_before_ready"),
        }),
        Message::WorkerExited(WorkerExited {
            activation_id: id(25),
            exit_code: None,
            signal: Some(9),
        }),
        Message::LaunchStatus {
            activation_id: id(26),
        },
        Message::LaunchStatusIs(LaunchStatusIs {
            activation_id: id(27),
            outcome: LaunchOutcome::Published,
        }),
        Message::Release,
        Message::Ready,
        Message::WorkerActivationFailed(WorkerActivationFailed {
            failure_reason: text("plugin_config_invalid"),
            diagnostic: text("components[0].config.sink: unknown field"),
        }),
        Message::Drain {
            deadline_ms: 120_000,
        },
        Message::Stopping,
        Message::DaemonStopping {
            restart_expected: true,
        },
    ]
}

fn golden(expect: Expect) {
    let mut out = String::new();
    for message in samples() {
        let bytes = encode(&message).unwrap();
        out.push_str(&format!("{:?}: {}\n", message.kind(), hex(&bytes)));
    }
    expect.assert_eq(&out);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn every_kind_has_a_sample() {
    let mut kinds: Vec<u16> = samples().iter().map(|m| m.kind() as u16).collect();
    kinds.dedup();
    let all: Vec<u16> = Kind::ALL.iter().map(|k| *k as u16).collect();
    assert_eq!(kinds, all);
}

#[test]
fn golden_bytes_pin_the_wire_encoding() {
    golden(expect![[r#"
        Hello: 52450001000100010105302e312e30010101010101010101010101010101010202020202020202020202020202020202020202020202020202020202020202030303030303030303030303030303030303030303030303030303030303030316687474703a2f2f3132372e302e302e313a3437363332
        Challenge: 52450001000204040404040404040404040404040404040404040404040404040404040404040505050505050505050505050505050505050505050505050505050505050505060606060606060606060606060606060107070707070707070707070707070707070707070707070707070707070707070707070707070707070707070707070707070707070707070707070707070707
        Refused: 5245000100030e126772616e7420616c726561647920757365640101
        RegisterMcp: 52450001000a08080808080808080808080808080808080808080808080808080808080808080808080808080808080808080808080808080808080808080808080808080808090909090909090909090909090909090909090909090909090909090909090901010831302e302e302e3701d4f402
        ResumeMcp: 52450001000b0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c
        RegisterWorker: 52450001000c0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f3132372e302e302e313a34303030311010101010101010101010101010101010101010101010101010101010101010
        ResumeWorker: 52450001000d11111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111121212121212121212121212121212121313131313131313131313131313131313131313131313131313131313131313
        Registered: 52450001000e00141414141414141414141414141414141515151515151515151515151515151515151515151515151515151515151515001111111111111111111111111111111122222222222222222222222222222222222222222222222222222222222222227f0000010000c0a907b0ea01e807e0d403e0d403b0ea01904eb0ea01fa01d00f8827
        Registered: 52450001000e0116161616161616161616161616161616171717171717171717171717171717171717171717171717171717171717171701c0a907c0a907b0ea01e807e0d403e0d403b0ea01904eb0ea01fa01d00f8827
        LaunchWorker: 5245000100141111111111111111111111111111111122222222222222222222222222222222222222222222222222222222222222227f0000010000
        WaitForWorker: 524500010015e807
        ReuseWorker: 524500010016
        RouteReady: 524500010017
        UsePassThrough: 524500010018
        ActivationFailed: 52450001001e181818181818181818181818181818181a776f726b65725f6578697465645f6265666f72655f7265616479
        WorkerExited: 52450001001f19191919191919191919191919191919000112
        LaunchStatus: 5245000100201a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a
        LaunchStatusIs: 5245000100211b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b03
        Release: 524500010022
        Ready: 524500010028
        WorkerActivationFailed: 52450001002915706c7567696e5f636f6e6669675f696e76616c696428636f6d706f6e656e74735b305d2e636f6e6669672e73696e6b3a20756e6b6e6f776e206669656c64
        Drain: 52450001002ac0a907
        Stopping: 52450001002b
        DaemonStopping: 52450001003201
    "#]]);
}

#[test]
fn every_sample_round_trips() {
    for message in samples() {
        let bytes = encode(&message).unwrap();
        let frame = decode(&bytes).unwrap();
        assert_eq!(frame.version, PROTOCOL_VERSION);
        assert_eq!(frame.message, message);
    }
}

#[test]
fn hello_decodes_whatever_the_version() {
    let hello = samples().remove(0);
    for version in [0, 2, 7, u16::MAX] {
        let frame = decode(&encode_versioned(version, &hello).unwrap()).unwrap();
        assert_eq!(frame.version, version);
        assert_eq!(frame.message, hello);
    }
}

#[test]
fn other_kinds_with_an_unknown_version_are_refused_as_unsupported() {
    for message in samples().into_iter().skip(1) {
        let err = decode(&encode_versioned(2, &message).unwrap()).unwrap_err();
        assert!(
            matches!(err, FrameError::UnsupportedVersion { version: 2 }),
            "{err:?}"
        );
        assert!(err.is_protocol_unsupported());
    }
}

#[test]
fn unknown_kind_is_a_typed_error() {
    let bytes = [0x52, 0x45, 0x00, 0x01, 0x00, 0x63];
    let err = decode(&bytes).unwrap_err();
    assert!(
        matches!(err, FrameError::UnknownKind { kind: 99 }),
        "{err:?}"
    );
    assert!(err.is_protocol_unsupported());
}

#[test]
fn bad_magic_and_short_header_are_typed_errors() {
    assert!(matches!(
        decode(&[0x52, 0x46, 0, 1, 0, 34]),
        Err(FrameError::BadMagic { magic: 0x5246 })
    ));
    assert!(matches!(
        decode(&[0x52, 0x45, 0]),
        Err(FrameError::TruncatedHeader { len: 3 })
    ));
}

#[test]
fn every_truncation_of_every_sample_is_an_error() {
    for message in samples() {
        let bytes = encode(&message).unwrap();
        for len in 0..bytes.len() {
            let err = decode(&bytes[..len]).unwrap_err();
            assert!(
                matches!(
                    err,
                    FrameError::TruncatedHeader { .. } | FrameError::TruncatedPayload { .. }
                ),
                "{:?} cut at {len}: {err:?}",
                message.kind()
            );
        }
    }
}

#[test]
fn trailing_bytes_are_refused() {
    for message in samples() {
        let mut bytes = encode(&message).unwrap();
        bytes.push(0);
        let err = decode(&bytes).unwrap_err();
        assert!(
            matches!(err, FrameError::TrailingBytes { extra: 1, .. }),
            "{:?}: {err:?}",
            message.kind()
        );
    }
}

#[test]
fn frames_over_the_limit_are_refused_before_decoding() {
    let mut bytes = encode(&Message::Release).unwrap();
    bytes.resize(MAX_FRAME_BYTES + 1, 0);
    assert!(matches!(
        decode(&bytes),
        Err(FrameError::TooLarge { len }) if len == MAX_FRAME_BYTES + 1
    ));
}

#[test]
fn a_string_over_2048_bytes_is_refused_on_decode() {
    // Build a Drain-sized frame by hand: ActivationFailed with a 2049-byte reason.
    let mut bytes = vec![0x52, 0x45, 0x00, 0x01, 0x00, Kind::ActivationFailed as u8];
    bytes.extend_from_slice(&[0x18; 16]);
    bytes.extend_from_slice(&[0x81, 0x10]); // varint 2049
    bytes.extend(std::iter::repeat_n(b'a', 2049));
    let err = decode(&bytes).unwrap_err();
    assert!(matches!(err, FrameError::Malformed { .. }), "{err:?}");
    assert!(Text::new("a".repeat(2049)).is_err());
    assert_eq!(Text::new("a".repeat(2048)).unwrap().as_str().len(), 2048);
}

#[test]
fn a_string_length_beyond_the_input_does_not_allocate_or_panic() {
    let mut bytes = vec![
        0x52,
        0x45,
        0x00,
        0x01,
        0x00,
        Kind::WorkerActivationFailed as u8,
    ];
    bytes.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]); // varint u32::MAX
    assert!(decode(&bytes).is_err());
}

#[test]
fn refused_codes_are_stable_and_unique() {
    let codes: Vec<(u16, &str)> = RefusedCode::ALL
        .iter()
        .map(|c| (c.code(), c.as_str()))
        .collect();
    expect![[r#"
        [
            (
                1,
                "protocol_unsupported",
            ),
            (
                2,
                "bad_signature",
            ),
            (
                3,
                "transcript_mismatch",
            ),
            (
                4,
                "challenge_expired",
            ),
            (
                5,
                "credential_malformed",
            ),
            (
                6,
                "credential_bound_elsewhere",
            ),
            (
                7,
                "token_limit",
            ),
            (
                8,
                "route_table_full",
            ),
            (
                9,
                "rate_limited",
            ),
            (
                10,
                "session_limit",
            ),
            (
                11,
                "session_unknown",
            ),
            (
                12,
                "state_unavailable",
            ),
            (
                13,
                "grant_unknown",
            ),
            (
                14,
                "grant_replayed",
            ),
            (
                15,
                "grant_identity_mismatch",
            ),
            (
                16,
                "endpoint_not_allowed",
            ),
            (
                17,
                "generation_revoked",
            ),
            (
                18,
                "pass_through_mode",
            ),
            (
                19,
                "revoked",
            ),
            (
                20,
                "blocked",
            ),
        ]
    "#]]
    .assert_debug_eq(&codes);
    for code in RefusedCode::ALL {
        assert_eq!(RefusedCode::from_code(code.code()), Some(code));
    }
    assert_eq!(RefusedCode::from_code(999), None);
}

#[test]
fn a_refusal_with_a_code_from_a_newer_daemon_still_decodes() {
    let refused = Message::Refused(Refused {
        code: 4000,
        text: text("a reason from the future"),
        supported: ProtocolRange { min: 2, max: 3 },
    });
    let frame = decode(&encode_versioned(3, &refused).unwrap());
    // A Refused from a newer protocol version is not decodable as v1 traffic, but a v1
    // Refused with an unknown code is.
    assert!(frame.is_err());
    let frame = decode(&encode(&refused).unwrap()).unwrap();
    let Message::Refused(r) = frame.message else {
        panic!("not a refusal")
    };
    assert_eq!(r.reason(), None);
    assert_eq!(r.text.as_str(), "a reason from the future");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn decoding_random_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode(&bytes);
    }

    #[test]
    fn decoding_random_payloads_behind_a_valid_header_never_panics(
        kind in prop::sample::select(Kind::ALL.to_vec()),
        payload in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let mut bytes = vec![0x52, 0x45, 0x00, 0x01];
        bytes.extend_from_slice(&(kind as u16).to_be_bytes());
        bytes.extend_from_slice(&payload);
        if let Ok(frame) = decode(&bytes) {
            // Whatever decodes re-encodes to a frame that decodes to the same message.
            let again = decode(&encode(&frame.message).unwrap()).unwrap();
            prop_assert_eq!(again.message, frame.message);
        }
    }

    #[test]
    fn flipping_any_byte_of_a_sample_never_panics(
        index in 0usize..23,
        position in any::<prop::sample::Index>(),
        value in any::<u8>(),
    ) {
        let message = &samples()[index];
        let mut bytes = encode(message).unwrap();
        let at = position.index(bytes.len());
        bytes[at] = value;
        let _ = decode(&bytes);
    }
}
