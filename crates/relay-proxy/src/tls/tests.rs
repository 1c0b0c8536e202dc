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
