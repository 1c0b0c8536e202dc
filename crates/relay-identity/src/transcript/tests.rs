use super::*;

struct Keys {
    client: SigningKey,
    daemon: SigningKey,
}

fn keys() -> Keys {
    Keys {
        client: SigningKey::generate().unwrap(),
        daemon: SigningKey::generate().unwrap(),
    }
}

fn fields<'a>(keys: &Keys, origin: &'a str) -> HandshakeFields<'a> {
    HandshakeFields {
        target_origin: origin,
        role: 1,
        selected_protocol: 1,
        challenge_id: [3; 16],
        client_nonce: [4; 32],
        daemon_nonce: [5; 32],
        client_key: keys.client.public_key(),
        daemon_key: keys.daemon.public_key(),
    }
}

#[test]
fn layout_is_the_documented_one() {
    let keys = keys();
    let transcript = Transcript::new(&fields(&keys, "http://127.0.0.1:47632"));
    let mut expected = Vec::new();
    expected.extend_from_slice(&26u64.to_be_bytes());
    expected.extend_from_slice(b"relay/control-handshake/v1");
    expected.extend_from_slice(&22u64.to_be_bytes());
    expected.extend_from_slice(b"http://127.0.0.1:47632");
    expected.push(1);
    expected.extend_from_slice(&[0, 1]);
    expected.extend_from_slice(&[3; 16]);
    expected.extend_from_slice(&[4; 32]);
    expected.extend_from_slice(&[5; 32]);
    expected.extend_from_slice(keys.client.public_key().as_bytes());
    expected.extend_from_slice(keys.daemon.public_key().as_bytes());
    assert_eq!(transcript.as_bytes(), expected.as_slice());

    let mut challenge = expected.clone();
    challenge.extend_from_slice(&9u64.to_be_bytes());
    challenge.extend_from_slice(b"challenge");
    assert_eq!(transcript.challenge_message(), challenge);

    let mut register = expected;
    register.extend_from_slice(&8u64.to_be_bytes());
    register.extend_from_slice(b"register");
    register.extend_from_slice(&3u64.to_be_bytes());
    register.extend_from_slice(b"abc");
    assert_eq!(transcript.registration_message(b"abc"), register);
}

#[test]
fn challenge_signature_verifies_only_for_its_own_handshake() {
    let keys = keys();
    let base = fields(&keys, "http://127.0.0.1:47632");
    let signature = Transcript::new(&base).sign_challenge(&keys.daemon);
    assert_eq!(Transcript::new(&base).verify_challenge(&signature), Ok(()));

    let other_key = SigningKey::generate().unwrap().public_key();
    let variants = [
        HandshakeFields {
            target_origin: "http://localhost:47632",
            ..base
        },
        HandshakeFields { role: 2, ..base },
        HandshakeFields {
            selected_protocol: 2,
            ..base
        },
        HandshakeFields {
            challenge_id: [6; 16],
            ..base
        },
        HandshakeFields {
            client_nonce: [6; 32],
            ..base
        },
        HandshakeFields {
            daemon_nonce: [6; 32],
            ..base
        },
        HandshakeFields {
            client_key: other_key,
            ..base
        },
        HandshakeFields {
            daemon_key: other_key,
            ..base
        },
    ];
    for variant in variants {
        assert_eq!(
            Transcript::new(&variant).verify_challenge(&signature),
            Err(BadSignature),
            "{variant:?}"
        );
    }
}

#[test]
fn registration_signature_covers_the_transcript_and_the_fields() {
    let keys = keys();
    let base = fields(&keys, "https://relay.example.com:8443");
    let transcript = Transcript::new(&base);
    let signature = transcript.sign_registration(&keys.client, b"fields");
    assert_eq!(
        transcript.verify_registration(b"fields", &signature),
        Ok(())
    );
    assert_eq!(
        transcript.verify_registration(b"fieldz", &signature),
        Err(BadSignature)
    );
    let elsewhere = Transcript::new(&HandshakeFields {
        target_origin: "https://relay.example.com:443",
        ..base
    });
    assert_eq!(
        elsewhere.verify_registration(b"fields", &signature),
        Err(BadSignature)
    );
}

#[test]
fn a_challenge_signature_never_passes_as_a_registration() {
    let keys = keys();
    // Even if one key played both parts, the labels keep the two messages apart.
    let same = HandshakeFields {
        daemon_key: keys.client.public_key(),
        ..fields(&keys, "http://127.0.0.1:1")
    };
    let transcript = Transcript::new(&same);
    let challenge_signature = transcript.sign_challenge(&keys.client);
    assert_eq!(transcript.verify_challenge(&challenge_signature), Ok(()));
    assert_eq!(
        transcript.verify_registration(b"", &challenge_signature),
        Err(BadSignature)
    );
    assert_ne!(
        transcript.challenge_message(),
        transcript.registration_message(b"")
    );
}

#[test]
fn length_prefixes_keep_origin_and_fields_apart() {
    let keys = keys();
    // Shifting bytes between the origin and the role cannot produce the same transcript.
    let a = Transcript::new(&fields(&keys, "http://a:1"));
    let b = Transcript::new(&fields(&keys, "http://a:1\u{1}"));
    assert_ne!(a.as_bytes(), b.as_bytes());
    // Register fields are length-prefixed too.
    assert_ne!(a.registration_message(b"ab"), a.registration_message(b"a"));
}
