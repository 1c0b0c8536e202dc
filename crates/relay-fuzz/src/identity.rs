//! The text parsers of `relay-identity` (route tokens, origins and daemon addresses, pin files,
//! fingerprints and keys) and the admin socket's `parse_fingerprint`.

use relay_identity::{
    DaemonAddress, Fingerprint, Origin, PublicKey, RouteToken, TokenDigest, format_pin, parse_pin,
    parse_token_contents,
};

use crate::text;

/// Route tokens (SPEC §4.1): a token that parses is its own canonical spelling, and the token
/// file check accepts exactly a token with an optional line end.
pub fn token(data: &[u8]) {
    let text = text(data);
    if let Ok(token) = RouteToken::parse(text) {
        assert_eq!(token.encode(), text, "a parsed token is not canonical");
        assert_eq!(text.len(), 43);
    }
    if let Ok(token) = parse_token_contents(data) {
        let body = data
            .strip_suffix(b"\r\n")
            .or_else(|| data.strip_suffix(b"\n"))
            .unwrap_or(data);
        assert_eq!(
            token.encode().as_bytes(),
            body,
            "the token file check accepted more than one token and a line end"
        );
    }
    if let Ok(digest) = TokenDigest::parse_hex(text) {
        assert_eq!(digest.to_string(), text, "a digest is only lowercase hex");
    }
}

/// Origins and daemon addresses (SPEC §2.6, §4.3): a parsed origin's text is normalized and
/// parses back to itself; a daemon address is an origin that passed its extra rules.
pub fn origin(data: &[u8]) {
    let text = text(data);
    if let Ok(origin) = Origin::parse(text) {
        let normalized = origin.to_string();
        match Origin::parse(&normalized) {
            Ok(again) => {
                assert_eq!(again, origin, "{normalized:?} parses to another origin");
                assert_eq!(
                    again.to_string(),
                    normalized,
                    "normalizing is not idempotent"
                );
            }
            Err(error) => panic!("the normalized origin {normalized:?} does not parse: {error}"),
        }
        assert_ne!(origin.port(), 0);
        assert_eq!(origin.host(), origin.host().to_ascii_lowercase());
    }
    if let Ok(address) = DaemonAddress::parse(text) {
        let origin = match Origin::parse(text) {
            Ok(origin) => origin,
            Err(error) => panic!("a daemon address is not an origin: {error}"),
        };
        assert_eq!(address.origin(), &origin);
        match DaemonAddress::parse(&address.to_string()) {
            Ok(again) => assert_eq!(again, address),
            Err(error) => panic!("the normalized daemon address does not parse: {error}"),
        }
        if !address.is_tls() {
            assert!(address.is_loopback(), "plain http to {address}");
        }
        let _ = address.ws_url("/_relay/control/v1/mcp");
        let _ = address.connect_addr();
    }
}

/// Pin files (SPEC §4.3): only the exact text `format_pin` writes parses, and what it writes
/// for any origin and key parses back.
pub fn pin(data: &[u8]) {
    let text = text(data);
    if let Ok(pin) = parse_pin(text) {
        assert_eq!(
            format_pin(&pin.origin, &pin.key),
            text,
            "a pin file parsed that format_pin would not write"
        );
    }
    // The bytes as an origin line and a key: what is written must read back.
    let (origin_text, key_bytes) = text.split_at(text.find('\n').unwrap_or(text.len()));
    if let Ok(origin) = Origin::parse(origin_text) {
        let mut key = [0u8; 32];
        for (slot, byte) in key.iter_mut().zip(key_bytes.bytes()) {
            *slot = byte;
        }
        let key = PublicKey::from_bytes(key);
        match parse_pin(&format_pin(&origin, &key)) {
            Ok(pin) => {
                assert_eq!(pin.origin, origin);
                assert_eq!(pin.key, key);
            }
            Err(error) => panic!("a written pin does not parse: {error}"),
        }
    }
}

/// Fingerprints and public keys in hex (SPEC §4.2): `Fingerprint::parse_hex` and the admin
/// socket's `parse_fingerprint` accept the same texts and agree on the value; both print as
/// lowercase hex.
pub fn fingerprint(data: &[u8]) {
    let text = text(data);
    let identity = Fingerprint::parse_hex(text);
    let admin = relay_proxy::admin::parse_fingerprint(text);
    match (&identity, &admin) {
        (Ok(identity), Ok(admin)) => {
            assert_eq!(identity.as_bytes(), &admin.0);
            assert_eq!(identity.to_string(), text.to_ascii_lowercase());
        }
        (Err(_), Err(_)) => {}
        _ => panic!(
            "the two fingerprint parsers disagree: identity {:?}, admin {:?}",
            identity.is_ok(),
            admin.is_ok()
        ),
    }
    if let Ok(key) = PublicKey::parse_hex(text) {
        assert_eq!(key.to_string(), text, "a public key is only lowercase hex");
    }
}
