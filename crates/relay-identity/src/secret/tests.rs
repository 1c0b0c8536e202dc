use super::*;

#[test]
fn ct_eq_compares_bytes_and_lengths() {
    let secret = Secret32::from_bytes([7; 32]);
    assert!(secret.ct_eq(&[7; 32]));
    assert!(!secret.ct_eq(&[8; 32]));
    let mut one_off = [7u8; 32];
    one_off[31] = 6;
    assert!(!secret.ct_eq(&one_off));
    assert!(!secret.ct_eq(&[7; 31]), "a shorter value is not equal");
    assert!(!secret.ct_eq(&[7; 33]), "a longer value is not equal");
    assert!(!secret.ct_eq(&[]));
}

#[test]
fn generated_secrets_differ_and_compare_equal_to_themselves() {
    let a = Secret32::generate().unwrap();
    let b = Secret32::generate().unwrap();
    assert_ne!(a, b);
    assert_eq!(a, a.clone());
    assert_ne!(random_id_bytes().unwrap(), random_id_bytes().unwrap());
}

#[test]
fn debug_is_redacted() {
    let secret = Secret32::from_bytes([0xab; 32]);
    let debug = format!("{secret:?}");
    assert_eq!(debug, "Secret32(..)");
    assert!(!debug.contains("ab"));
    assert!(!debug.contains("171"));
}

#[test]
fn base64url_round_trips_and_is_strict() {
    let secret = Secret32::generate().unwrap();
    let text = secret.encode_base64url();
    assert_eq!(text.len(), 43);
    assert_eq!(Secret32::parse_base64url(&text), Some(secret));
    assert_eq!(Secret32::parse_base64url(&format!("{text}=")), None);
    assert_eq!(Secret32::parse_base64url(&text[1..]), None);
    assert_eq!(
        Secret32::parse_base64url(&text.replace(|_| true, "+")),
        None
    );
}

#[test]
fn constant_time_eq_of_slices() {
    assert!(constant_time_eq(b"abc", b"abc"));
    assert!(!constant_time_eq(b"abc", b"abd"));
    assert!(!constant_time_eq(b"abc", b"ab"));
}
