use super::*;

#[test]
fn each_cause_of_a_failed_handshake_has_a_line_of_its_own() {
    let lines = PeerLines::default();
    let now = Instant::now();
    // Scanners sending plain HTTP keep their cause's line busy ...
    assert_eq!(
        admit(&lines.handshakes[HandshakeFailure::NotTls as usize], now),
        Some(0)
    );
    for _ in 0..100 {
        assert_eq!(
            admit(&lines.handshakes[HandshakeFailure::NotTls as usize], now),
            None
        );
    }
    // ... and a client refusing the certificate is still said, with none of theirs counted.
    assert_eq!(
        admit(
            &lines.handshakes[HandshakeFailure::CertificateRefused as usize],
            now
        ),
        Some(0)
    );
    assert_eq!(
        admit(
            &lines.handshakes[HandshakeFailure::CertificateRefused as usize],
            now
        ),
        None
    );
    // Ten seconds on, each line says how many of its own cause it held back.
    let later = now + FLOOD_LOG_EVERY;
    assert_eq!(
        admit(&lines.handshakes[HandshakeFailure::NotTls as usize], later),
        Some(100)
    );
    assert_eq!(
        admit(
            &lines.handshakes[HandshakeFailure::CertificateRefused as usize],
            later
        ),
        Some(1)
    );
    assert_eq!(
        admit(
            &lines.handshakes[HandshakeFailure::TimedOut as usize],
            later
        ),
        Some(0)
    );
}
