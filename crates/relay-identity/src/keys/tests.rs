use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use super::*;

fn mode_of(path: &Path) -> u32 {
    fs::metadata(path).unwrap().mode() & 0o7777
}

#[test]
fn created_key_is_0600_in_a_0700_dir_and_loads_again() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("relay/daemon");
    let path = dir.join("machine-identity.pk8");
    let (key, outcome) = SigningKey::load_or_create(&path).unwrap();
    assert_eq!(outcome, KeyFileOutcome::Created);
    assert_eq!(mode_of(&path), 0o600);
    assert_eq!(mode_of(&dir), 0o700);
    let (again, outcome) = SigningKey::load_or_create(&path).unwrap();
    assert_eq!(outcome, KeyFileOutcome::Loaded);
    assert_eq!(again.public_key(), key.public_key());
    assert_eq!(
        SigningKey::load(&path).unwrap().public_key(),
        key.public_key()
    );
}

#[test]
fn key_file_0644_is_refused_like_ssh() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("machine-identity.pk8");
    SigningKey::load_or_create(&path).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    let err = SigningKey::load_or_create(&path).unwrap_err();
    assert!(
        matches!(err, KeyError::TooOpen { mode: 0o644, .. }),
        "{err}"
    );
    let shown = path.display().to_string();
    assert_eq!(
        err.to_string(),
        format!(
            "permissions 0644 for {shown} are too open; it must not be accessible by others: run chmod 600 {shown}"
        )
    );
    // The file is left as it was: refusing is not repairing.
    assert_eq!(mode_of(&path), 0o644);
}

#[test]
fn group_readable_key_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("k.pk8");
    SigningKey::load_or_create(&path).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
    assert!(matches!(
        SigningKey::load(&path),
        Err(KeyError::TooOpen { mode: 0o640, .. })
    ));
}

#[test]
fn symlinked_key_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let real = tmp.path().join("real.pk8");
    SigningKey::load_or_create(&real).unwrap();
    let link = tmp.path().join("machine-identity.pk8");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let err = SigningKey::load_or_create(&link).unwrap_err();
    assert!(matches!(err, KeyError::Symlink { .. }), "{err}");
    assert!(err.to_string().contains(&link.display().to_string()));
    // A dangling link is refused too, never replaced by a new key.
    fs::remove_file(&real).unwrap();
    assert!(matches!(
        SigningKey::load_or_create(&link),
        Err(KeyError::Symlink { .. })
    ));
}

#[test]
fn key_of_another_user_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("k.pk8");
    SigningKey::load_or_create(&path).unwrap();
    let facts = FileFacts::from_metadata(&fs::metadata(&path).unwrap());
    let err = check_key_file(&path, &facts, facts.uid + 1).unwrap_err();
    assert!(matches!(err, KeyError::NotOwned { .. }), "{err}");
    assert!(err.to_string().contains("chown"), "{err}");
    if store::current_euid() == 0 {
        // Root can hand the file to someone else and see the real check refuse it.
        std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
        assert!(matches!(
            SigningKey::load(&path),
            Err(KeyError::NotOwned { owner: 65534, .. })
        ));
    }
}

#[test]
fn directory_and_garbage_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir_path = tmp.path().join("dir.pk8");
    fs::create_dir(&dir_path).unwrap();
    assert!(matches!(
        SigningKey::load_or_create(&dir_path),
        Err(KeyError::NotRegularFile { .. })
    ));
    let garbage = tmp.path().join("garbage.pk8");
    store::create_new_linked(&garbage, b"not a key", 0o600).unwrap();
    assert!(matches!(
        SigningKey::load_or_create(&garbage),
        Err(KeyError::Corrupt { .. })
    ));
    assert_eq!(fs::read(&garbage).unwrap(), b"not a key", "never replaced");
}

#[test]
fn sixteen_concurrent_first_uses_end_with_one_key() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("relay/daemon/machine-identity.pk8");
    let results: Vec<(PublicKey, KeyFileOutcome)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..16)
            .map(|_| {
                let path = &path;
                scope.spawn(move || {
                    let (key, outcome) = SigningKey::load_or_create(path).unwrap();
                    (key.public_key(), outcome)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let first = results[0].0;
    assert!(results.iter().all(|(key, _)| *key == first));
    let created = results
        .iter()
        .filter(|(_, outcome)| *outcome == KeyFileOutcome::Created)
        .count();
    assert_eq!(created, 1);
    assert_eq!(SigningKey::load(&path).unwrap().public_key(), first);
}

#[test]
fn signatures_verify_only_for_their_message_and_key() {
    let key = SigningKey::generate().unwrap();
    let other = SigningKey::generate().unwrap();
    let signature = key.sign(b"message");
    assert_eq!(key.public_key().verify(b"message", &signature), Ok(()));
    assert_eq!(
        key.public_key().verify(b"messagE", &signature),
        Err(BadSignature)
    );
    assert_eq!(
        other.public_key().verify(b"message", &signature),
        Err(BadSignature)
    );
    assert_eq!(
        key.public_key().verify(b"message", &signature[..63]),
        Err(BadSignature)
    );
}

#[test]
fn debug_shows_only_the_fingerprint_prefix() {
    let key = SigningKey::generate().unwrap();
    let debug = format!("{key:?}");
    assert!(debug.contains(&key.fingerprint().short()), "{debug}");
    assert!(!debug.contains(&key.public_key().to_string()), "{debug}");
    assert!(!debug.contains(&key.fingerprint().to_string()), "{debug}");
}

#[test]
fn fingerprint_is_sha256_of_the_public_key_in_hex() {
    let key = SigningKey::generate().unwrap();
    let fingerprint = key.fingerprint();
    let expected = ring::digest::digest(&ring::digest::SHA256, key.public_key().as_bytes());
    assert_eq!(fingerprint.as_bytes().as_slice(), expected.as_ref());
    let text = fingerprint.to_string();
    assert_eq!(text.len(), 64);
    assert_eq!(text, text.to_ascii_lowercase());
    assert_eq!(fingerprint.short(), text[..12]);
    assert_eq!(Fingerprint::parse_hex(&text), Ok(fingerprint));
    assert_eq!(
        Fingerprint::parse_hex(&text.to_ascii_uppercase()),
        Ok(fingerprint)
    );
    assert!(Fingerprint::parse_hex(&text[..63]).is_err());
    assert!(Fingerprint::parse_hex(&format!("{}g", &text[..63])).is_err());
}

#[test]
fn public_key_hex_round_trips_and_is_lowercase_only() {
    let key = SigningKey::generate().unwrap().public_key();
    let text = key.to_string();
    assert_eq!(PublicKey::parse_hex(&text), Ok(key));
    assert_eq!(
        PublicKey::parse_hex(&text.to_ascii_uppercase()),
        if text.bytes().any(|b| b.is_ascii_alphabetic()) {
            Err(HexError::NotLowercaseHex)
        } else {
            Ok(key)
        }
    );
}
