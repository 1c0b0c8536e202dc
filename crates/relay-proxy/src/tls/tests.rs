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
