use super::*;

const SECRET: [u8; 8] = [0x52, 0x45, 0x00, 0x0b, 0xb0, b'"', b'\\', 0x7f];

#[test]
fn the_debug_form_matches_what_tungstenite_logs() {
    assert_eq!(bytes_debug(&SECRET), r#"RE\0\x0b\xb0\"\\\x7f"#);
}

#[test]
fn a_secret_is_found_in_a_json_line_in_every_form() {
    let mut secrets = Secrets::new();
    secrets.add_bytes("s", &SECRET);
    for (form, needle) in forms(&SECRET) {
        let text = String::from_utf8_lossy(&needle).into_owned();
        // A JSON line escapes backslashes and quotes: the decoded value is what matches.
        let line = serde_json::json!({"message": format!("payload: b\"{text}\" end")}).to_string();
        let found = secrets.find_in("log", line.as_bytes());
        if form == "raw" {
            // Raw bytes that are not UTF-8 cannot travel in a JSON string unchanged.
            continue;
        }
        assert_eq!(found.len(), 1, "form {form}: {line}");
    }
    assert!(secrets.find_in("log", b"nothing here").is_empty());
    assert_eq!(secrets.find_in("log", &SECRET).len(), 1, "raw bytes");
}

#[test]
fn the_seed_is_taken_from_a_ring_document() {
    let mut document = vec![
        0x30, 0x53, 0x02, 0x01, 0x01, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70,
    ];
    document.extend_from_slice(&[0x04, 0x22, 0x04, 0x20]);
    document.extend_from_slice(&[7; 32]);
    document.extend_from_slice(&[0xa1, 0x23, 0x03, 0x21, 0x00]);
    document.extend_from_slice(&[8; 32]);
    assert_eq!(ed25519_seed(&document), Some(&[7u8; 32][..]));
}
