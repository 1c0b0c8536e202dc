use std::time::{Duration, Instant};

use super::*;

/// DER of the named-curve OID of P-256 (1.2.840.10045.3.1.7).
const P256_OID: [u8; 10] = [0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
/// DER of the OID of rsaEncryption (1.2.840.113549.1.1.1).
const RSA_OID: [u8; 11] = [
    0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01,
];

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn the_key_is_p256_and_the_digest_is_of_the_certificate() {
    let identity = WorkerIdentity::generate("127.0.0.1").unwrap();
    let der = identity.certificate_der().as_ref();
    assert!(contains(der, &P256_OID), "not a P-256 key");
    assert!(!contains(der, &RSA_OID), "an RSA key");
    assert_eq!(identity.certificate_sha256(), tls::certificate_sha256(der));
    assert_eq!(
        identity.server_config().alpn_protocols,
        vec![b"http/1.1".to_vec()]
    );
}

#[test]
fn every_generation_gets_a_fresh_key_and_certificate() {
    let a = WorkerIdentity::generate("127.0.0.1").unwrap();
    let b = WorkerIdentity::generate("127.0.0.1").unwrap();
    assert_ne!(a.certificate_sha256(), b.certificate_sha256());
}

#[test]
fn generation_is_fast() {
    // P-256 generation takes milliseconds even unoptimised; RSA would take far longer.
    let started = Instant::now();
    for _ in 0..10 {
        WorkerIdentity::generate("127.0.0.1").unwrap();
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_secs(2),
        "10 identities took {elapsed:?}"
    );
}

#[test]
fn the_advertised_address_or_name_is_the_subject_alternative_name() {
    // An IP SAN is tagged [7] with the address bytes.
    let local = WorkerIdentity::generate("127.0.0.1").unwrap();
    assert!(contains(
        local.certificate_der().as_ref(),
        &[0x87, 4, 127, 0, 0, 1]
    ));
    let remote = WorkerIdentity::generate("10.1.2.3").unwrap();
    assert!(contains(
        remote.certificate_der().as_ref(),
        &[0x87, 4, 10, 1, 2, 3]
    ));
    let v6 = WorkerIdentity::generate("fd00::1").unwrap();
    let mut tagged = vec![0x87, 16, 0xfd, 0];
    tagged.extend_from_slice(&[0; 13]);
    tagged.push(1);
    assert!(contains(v6.certificate_der().as_ref(), &tagged));
    // A DNS SAN is tagged [2].
    let named = WorkerIdentity::generate("worker-7.example.internal").unwrap();
    let mut tagged = vec![0x82, 25];
    tagged.extend_from_slice(b"worker-7.example.internal");
    assert!(contains(named.certificate_der().as_ref(), &tagged));
}

#[test]
fn a_host_that_is_neither_address_nor_name_is_refused() {
    for host in [
        "",
        "bad host",
        "-lead.example",
        "a..b",
        "ünïcode.example",
        "x/y",
    ] {
        let error = WorkerIdentity::generate(host).unwrap_err();
        assert!(
            matches!(error, IdentityError::InvalidHost { .. }),
            "{host:?}: {error}"
        );
    }
}

#[test]
fn debug_shows_only_the_digest() {
    let identity = WorkerIdentity::generate("127.0.0.1").unwrap();
    let shown = format!("{identity:?}");
    assert!(shown.contains(&hex::encode(identity.certificate_sha256())));
    assert!(!shown.to_lowercase().contains("key"), "{shown}");
}
