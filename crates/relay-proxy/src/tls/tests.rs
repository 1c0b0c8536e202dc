use super::*;

fn wrapped(error: rustls::Error) -> std::io::Error {
    // What tokio-rustls returns for a failed handshake.
    std::io::Error::new(std::io::ErrorKind::InvalidData, error)
}

#[test]
fn an_unknown_issuer_is_named_with_the_ca_variable() {
    let text = describe_handshake_error(&wrapped(rustls::Error::InvalidCertificate(
        rustls::CertificateError::UnknownIssuer,
    )));
    assert!(text.contains("not signed by a trusted CA"), "{text}");
    assert!(text.contains("RELAY_EXTRA_CA_FILE"), "{text}");
    assert!(text.contains("UnknownIssuer"), "{text}");
}

#[test]
fn a_certificate_for_another_host_is_named() {
    let text = describe_handshake_error(&wrapped(rustls::Error::InvalidCertificate(
        rustls::CertificateError::NotValidForName,
    )));
    assert!(text.contains("does not name the host"), "{text}");
}

#[test]
fn other_errors_keep_their_own_words() {
    let error = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
    assert_eq!(describe_handshake_error(&error), "reset by peer");
}

#[test]
fn a_failed_handshake_is_told_by_what_the_client_did() {
    use rustls::AlertDescription as A;
    let cases = [
        (
            rustls::Error::AlertReceived(A::UnknownCA),
            HandshakeFailure::CertificateRefused,
        ),
        (
            rustls::Error::AlertReceived(A::BadCertificate),
            HandshakeFailure::CertificateRefused,
        ),
        (
            rustls::Error::AlertReceived(A::CertificateExpired),
            HandshakeFailure::CertificateRefused,
        ),
        (
            rustls::Error::AlertReceived(A::DecryptError),
            HandshakeFailure::CertificateRefused,
        ),
        (
            rustls::Error::AlertReceived(A::AccessDenied),
            HandshakeFailure::CertificateRefused,
        ),
        (
            rustls::Error::AlertReceived(A::ProtocolVersion),
            HandshakeFailure::NoCommonProtocol,
        ),
        (
            rustls::Error::PeerIncompatible(rustls::PeerIncompatible::Tls12NotOffered),
            HandshakeFailure::NoCommonProtocol,
        ),
        (
            rustls::Error::NoApplicationProtocol,
            HandshakeFailure::NoCommonProtocol,
        ),
        (
            rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType),
            HandshakeFailure::NotTls,
        ),
        (
            rustls::Error::InappropriateMessage {
                expect_types: vec![rustls::ContentType::Handshake],
                got_type: rustls::ContentType::ApplicationData,
            },
            HandshakeFailure::Malformed,
        ),
        (
            rustls::Error::AlertReceived(A::DecodeError),
            HandshakeFailure::Malformed,
        ),
    ];
    for (error, failure) in cases {
        let said = HandshakeFailure::of(&wrapped(error.clone()));
        assert_eq!(said, Some(failure), "{error}");
    }
    // A client that only went away (a TCP health check, a port scan) is worth no line.
    for kind in [
        std::io::ErrorKind::UnexpectedEof,
        std::io::ErrorKind::ConnectionReset,
        std::io::ErrorKind::BrokenPipe,
    ] {
        assert_eq!(HandshakeFailure::of(&std::io::Error::from(kind)), None);
    }
    let all = [
        HandshakeFailure::CertificateRefused,
        HandshakeFailure::NoCommonProtocol,
        HandshakeFailure::NotTls,
        HandshakeFailure::Malformed,
        HandshakeFailure::TimedOut,
    ];
    // Each cause has its own place in a listener's lines.
    assert_eq!(all.len(), HandshakeFailure::COUNT);
    for (index, failure) in all.into_iter().enumerate() {
        assert_eq!(failure as usize, index);
    }
    let reasons = all.map(HandshakeFailure::reason);
    assert_eq!(
        reasons,
        [
            "client_refused_certificate",
            "no_common_protocol",
            "not_tls",
            "malformed",
            "timed_out"
        ]
    );
}

/// A CA file that never ends (`/dev/zero`) is refused after a bounded read, not read until
/// the memory is full.
#[test]
fn a_ca_file_without_end_is_refused_after_a_bounded_read() {
    let error = client_config(Some(Path::new("/dev/zero"))).unwrap_err();
    assert!(matches!(error, TlsError::TooLarge { .. }), "{error}");
    assert!(error.to_string().contains("/dev/zero"), "{error}");
}

#[test]
fn a_certificate_webpki_finds_unfit_for_a_server_is_named() {
    let webpki = std::io::Error::other("CaUsedAsEndEntity");
    let text = describe_handshake_error(&wrapped(rustls::Error::InvalidCertificate(
        rustls::CertificateError::Other(rustls::OtherError(std::sync::Arc::new(webpki))),
    )));
    assert!(text.contains("not one a server may use"), "{text}");
}

/// A certificate issued by a fresh CA for `names`, with `edit` applied to its parameters,
/// written as PEM to a file in `dir`: the file. With `serve_the_ca`, the CA's own
/// certificate is written instead.
fn certificate_file(
    dir: &Path,
    names: &[&str],
    edit: impl FnOnce(&mut rcgen::CertificateParams),
    serve_the_ca: bool,
) -> PathBuf {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "served certificate test ca");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
            .unwrap();
    edit(&mut params);
    let leaf = params.signed_by(&leaf_key, &ca).unwrap();
    let file = dir.join(format!("cert-{}.pem", names.join("-")));
    std::fs::write(&file, if serve_the_ca { ca.pem() } else { leaf.pem() }).unwrap();
    file
}

#[test]
fn a_served_certificate_clients_will_refuse_is_named_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let now = std::time::SystemTime::now();
    let good = certificate_file(dir.path(), &["relay.test", "10.0.0.1"], |_| {}, false);
    for host in ["relay.test", "10.0.0.1"] {
        assert_eq!(
            served_certificate_problems(&good, host, now).unwrap(),
            Vec::<String>::new(),
            "{host}"
        );
    }
    let problems = served_certificate_problems(&good, "relay.example.com", now).unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("does not name relay.example.com"),
        "{problems:?}"
    );

    for (host, from, to, problem) in [
        ("expired.test", 2020, 2021, "it has expired"),
        ("early.test", 2090, 2091, "it is not valid yet"),
    ] {
        let file = certificate_file(
            dir.path(),
            &[host],
            |params| {
                params.not_before = rcgen::date_time_ymd(from, 1, 1);
                params.not_after = rcgen::date_time_ymd(to, 1, 1);
            },
            false,
        );
        assert_eq!(
            served_certificate_problems(&file, host, now).unwrap(),
            [problem]
        );
    }
    let ca = certificate_file(dir.path(), &["ca.test"], |_| {}, true);
    let problems = served_certificate_problems(&ca, "ca.test", now).unwrap();
    assert!(
        problems[0].contains("certificate authority's own certificate"),
        "{problems:?}"
    );
    let client_only = certificate_file(
        dir.path(),
        &["client.test"],
        |params| params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth],
        false,
    );
    let problems = served_certificate_problems(&client_only, "client.test", now).unwrap();
    assert!(problems[0].contains("not for servers"), "{problems:?}");
}
