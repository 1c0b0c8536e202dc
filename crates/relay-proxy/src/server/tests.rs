use super::*;

#[test]
fn each_cause_of_a_failed_handshake_has_a_line_of_its_own() {
    let lines = PeerLines::default();
    let now = Instant::now();
    // Scanners sending plain HTTP keep their cause's line busy ...
    assert_eq!(
        lines.admit_handshake_line(HandshakeFailure::NotTls, now),
        Some(0)
    );
    for _ in 0..100 {
        assert_eq!(
            lines.admit_handshake_line(HandshakeFailure::NotTls, now),
            None
        );
    }
    // ... and a client refusing the certificate is still said, with none of theirs counted.
    assert_eq!(
        lines.admit_handshake_line(HandshakeFailure::CertificateRefused, now),
        Some(0)
    );
    assert_eq!(
        lines.admit_handshake_line(HandshakeFailure::CertificateRefused, now),
        None
    );
    // Ten seconds on, each line says how many of its own cause it held back.
    let later = now + FLOOD_LOG_EVERY;
    assert_eq!(
        lines.admit_handshake_line(HandshakeFailure::NotTls, later),
        Some(100)
    );
    assert_eq!(
        lines.admit_handshake_line(HandshakeFailure::CertificateRefused, later),
        Some(1)
    );
    assert_eq!(
        lines.admit_handshake_line(HandshakeFailure::TimedOut, later),
        Some(0)
    );
}
