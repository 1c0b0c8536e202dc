use std::fs;

use super::*;
use crate::keys::SigningKey;

fn key() -> PublicKey {
    SigningKey::generate().unwrap().public_key()
}

fn origin(text: &str) -> Origin {
    Origin::parse(text).unwrap()
}

#[test]
fn format_is_exactly_two_lines_and_parses_back() {
    let key = PublicKey::from_bytes([0xab; 32]);
    let origin = origin("HTTP://LocalHost:47632/");
    let text = format_pin(&origin, &key);
    assert_eq!(
        text,
        format!(
            "origin http://localhost:47632\ned25519 {}\n",
            "ab".repeat(32)
        )
    );
    assert_eq!(parse_pin(&text), Ok(Pin { origin, key }));
}

#[test]
fn parse_refuses_anything_but_the_exact_format() {
    let good = format_pin(&origin("https://relay.example.com:8443"), &key());
    let (line1, line2) = good.split_once('\n').unwrap();
    let cases = [
        (good.trim_end().to_owned(), PinFormatError::MissingNewline),
        (
            good.replace('\n', "\r\n"),
            PinFormatError::Origin(AddressError::InvalidPort {
                port: "8443\r".into(),
            }),
        ),
        (format!("{good}\n"), PinFormatError::TrailingData),
        (format!("{line2}\n{line1}\n"), PinFormatError::OriginLine),
        (
            format!("{line1}\n{}\n", line2.to_ascii_uppercase()),
            PinFormatError::KeyLine,
        ),
        (
            format!("{line1}\ned25519 {}\n", "AB".repeat(32)),
            PinFormatError::Key(HexError::NotLowercaseHex),
        ),
        (
            format!("origin https://Relay.example.com:8443\n{line2}\n"),
            PinFormatError::OriginNotNormalized {
                found: "https://Relay.example.com:8443".into(),
                normalized: "https://relay.example.com:8443".into(),
            },
        ),
        (
            format!("origin https://relay.example.com\n{line2}\n"),
            PinFormatError::OriginNotNormalized {
                found: "https://relay.example.com".into(),
                normalized: "https://relay.example.com:443".into(),
            },
        ),
        (String::new(), PinFormatError::OriginLine),
    ];
    for (text, expected) in cases {
        assert_eq!(parse_pin(&text), Err(expected), "{text:?}");
    }
}

#[test]
fn first_use_pins_then_matches() {
    let tmp = tempfile::tempdir().unwrap();
    let store = PinStore::new(tmp.path().join("pins"), None);
    let origin = origin("http://127.0.0.1:47632");
    let daemon = key();
    assert_eq!(
        store.check_or_pin(&origin, &daemon).unwrap(),
        PinOutcome::PinnedNow
    );
    let file = store.pin_file(&origin);
    let expected_name = hex::encode(
        ring::digest::digest(&ring::digest::SHA256, b"http://127.0.0.1:47632").as_ref(),
    );
    assert_eq!(file, tmp.path().join("pins").join(expected_name));
    assert_eq!(
        fs::read_to_string(&file).unwrap(),
        format_pin(&origin, &daemon)
    );
    assert_eq!(
        store.check_or_pin(&origin, &daemon).unwrap(),
        PinOutcome::Matched
    );
    assert_eq!(
        store.pinned(&origin).unwrap(),
        Some(Pin {
            origin: origin.clone(),
            key: daemon
        })
    );
}

#[test]
fn mismatch_fails_naming_the_origin_and_the_file_and_keeps_the_pin() {
    let tmp = tempfile::tempdir().unwrap();
    let store = PinStore::new(tmp.path().join("pins"), None);
    let origin = origin("https://relay.example.com:8443");
    let daemon = key();
    store.check_or_pin(&origin, &daemon).unwrap();
    let pin_file = store.pin_file(&origin);
    let before = fs::read(&pin_file).unwrap();
    let err = store.check_or_pin(&origin, &key()).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, PinError::Mismatch { .. }), "{message}");
    assert!(
        message.contains("https://relay.example.com:8443"),
        "{message}"
    );
    assert!(
        message.contains(&pin_file.display().to_string()),
        "{message}"
    );
    assert_eq!(fs::read(&pin_file).unwrap(), before);
}

#[test]
fn origins_are_pinned_separately() {
    let tmp = tempfile::tempdir().unwrap();
    let store = PinStore::new(tmp.path().join("pins"), None);
    let daemon = key();
    let other = key();
    store
        .check_or_pin(&origin("http://127.0.0.1:1"), &daemon)
        .unwrap();
    assert_eq!(
        store
            .check_or_pin(&origin("http://localhost:1"), &other)
            .unwrap(),
        PinOutcome::PinnedNow
    );
}

#[test]
fn corrupt_pin_fails_and_is_never_rewritten() {
    let tmp = tempfile::tempdir().unwrap();
    let store = PinStore::new(tmp.path().join("pins"), None);
    let origin = origin("http://127.0.0.1:47632");
    store.check_or_pin(&origin, &key()).unwrap();
    let pin_file = store.pin_file(&origin);
    for corrupt in [&b"garbage"[..], b"", &[0xff, 0xfe]] {
        fs::write(&pin_file, corrupt).unwrap();
        let err = store.check_or_pin(&origin, &key()).unwrap_err();
        assert!(matches!(err, PinError::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains(&pin_file.display().to_string()));
        assert_eq!(fs::read(&pin_file).unwrap(), corrupt, "left as it was");
    }
    // A valid pin of another origin under this origin's name is corrupt too.
    let moved = format_pin(
        &crate::Origin::parse("http://localhost:47632").unwrap(),
        &key(),
    );
    fs::write(&pin_file, &moved).unwrap();
    assert!(matches!(
        store.check_or_pin(&origin, &key()),
        Err(PinError::Corrupt {
            reason: PinFormatError::WrongOrigin { .. },
            ..
        })
    ));
    assert_eq!(fs::read_to_string(&pin_file).unwrap(), moved);
}

#[test]
fn symlinked_pin_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let store = PinStore::new(tmp.path().join("pins"), None);
    let origin = origin("http://127.0.0.1:47632");
    let daemon = key();
    let elsewhere = tmp.path().join("elsewhere");
    fs::write(&elsewhere, format_pin(&origin, &daemon)).unwrap();
    fs::create_dir(tmp.path().join("pins")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, store.pin_file(&origin)).unwrap();
    assert!(matches!(
        store.check_or_pin(&origin, &daemon),
        Err(PinError::Unreadable { .. })
    ));
}

#[test]
fn provisioned_key_overrides_first_use_for_its_origin() {
    let tmp = tempfile::tempdir().unwrap();
    let provisioned_file = tmp.path().join("daemon-identity.pub");
    let origin = origin("https://relay.example.com:8443");
    let admin_key = key();
    fs::write(&provisioned_file, format_pin(&origin, &admin_key)).unwrap();
    let store = PinStore::new(tmp.path().join("pins"), Some(provisioned_file.clone()));

    assert_eq!(
        store.check_or_pin(&origin, &admin_key).unwrap(),
        PinOutcome::Provisioned
    );
    assert!(!store.pin_file(&origin).exists(), "no user pin is written");

    // Another key is refused even though the user has no pin yet: no first-use trust here.
    let err = store.check_or_pin(&origin, &key()).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, PinError::Mismatch { .. }), "{message}");
    assert!(
        message.contains(&provisioned_file.display().to_string()),
        "{message}"
    );
    assert!(
        message.contains("https://relay.example.com:8443"),
        "{message}"
    );

    // Other origins still use first-use trust.
    let other = crate::Origin::parse("http://127.0.0.1:47632").unwrap();
    assert_eq!(
        store.check_or_pin(&other, &key()).unwrap(),
        PinOutcome::PinnedNow
    );
    assert_eq!(
        store.provisioned().unwrap(),
        Some(Pin {
            origin,
            key: admin_key
        })
    );
}

#[test]
fn provisioned_key_wins_over_an_older_user_pin() {
    let tmp = tempfile::tempdir().unwrap();
    let origin = origin("https://relay.example.com:8443");
    let user_store = PinStore::new(tmp.path().join("pins"), None);
    user_store.check_or_pin(&origin, &key()).unwrap();
    let admin_key = key();
    let provisioned_file = tmp.path().join("daemon-identity.pub");
    fs::write(&provisioned_file, format_pin(&origin, &admin_key)).unwrap();
    let store = PinStore::new(tmp.path().join("pins"), Some(provisioned_file));
    assert_eq!(
        store.check_or_pin(&origin, &admin_key).unwrap(),
        PinOutcome::Provisioned
    );
}

#[test]
fn missing_provisioned_file_means_first_use_and_a_corrupt_one_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let provisioned_file = tmp.path().join("daemon-identity.pub");
    let store = PinStore::new(tmp.path().join("pins"), Some(provisioned_file.clone()));
    let origin = origin("http://127.0.0.1:47632");
    let daemon = key();
    assert_eq!(
        store.check_or_pin(&origin, &daemon).unwrap(),
        PinOutcome::PinnedNow
    );
    fs::write(&provisioned_file, "ed25519 nonsense\n").unwrap();
    let err = store.check_or_pin(&origin, &daemon).unwrap_err();
    assert!(
        matches!(err, PinError::Corrupt { ref pin_file, .. } if *pin_file == provisioned_file),
        "{err}"
    );
}

#[test]
fn racing_first_contacts_agree_on_one_pin() {
    let tmp = tempfile::tempdir().unwrap();
    let store = PinStore::new(tmp.path().join("pins"), None);
    let origin = origin("http://127.0.0.1:47632");
    let daemon = key();
    let outcomes: Vec<PinOutcome> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|_| scope.spawn(|| store.check_or_pin(&origin, &daemon).unwrap()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let pinned_now = outcomes
        .iter()
        .filter(|o| **o == PinOutcome::PinnedNow)
        .count();
    assert_eq!(pinned_now, 1, "{outcomes:?}");
}

/// Another user who could have written the provisioned pin must not decide which daemon this
/// user trusts: the planted key is refused, not accepted in place of first-use trust.
#[test]
fn a_provisioned_pin_another_user_could_have_planted_is_refused() {
    use std::os::unix::fs::PermissionsExt as _;
    let tmp = tempfile::tempdir().unwrap();
    let provisioned_file = tmp.path().join("daemon-identity.pub");
    let origin = origin("http://127.0.0.1:47632");
    let impostor = key();
    fs::write(&provisioned_file, format_pin(&origin, &impostor)).unwrap();
    let store = PinStore::new(tmp.path().join("pins"), Some(provisioned_file.clone()));
    let refused = |store: &PinStore| {
        let err = store.check_or_pin(&origin, &impostor).unwrap_err();
        assert!(
            matches!(err, PinError::Unreadable { ref pin_file, .. } if *pin_file == provisioned_file),
            "{err}"
        );
        err.to_string()
    };

    // Writable by every user.
    fs::set_permissions(&provisioned_file, fs::Permissions::from_mode(0o666)).unwrap();
    assert!(refused(&store).contains("writable by every user"));

    // In a shared sticky directory (a system directory pointed at /tmp), owned by a user
    // who is neither root nor this one: only root can make such a file here.
    fs::set_permissions(&provisioned_file, fs::Permissions::from_mode(0o644)).unwrap();
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o1777)).unwrap();
    if crate::store::current_euid() == 0 {
        std::os::unix::fs::chown(&provisioned_file, Some(4242), Some(4242)).unwrap();
        assert!(refused(&store).contains("belongs to uid 4242"));
        // Root's own file there is the administrator's.
        std::os::unix::fs::chown(&provisioned_file, Some(0), Some(0)).unwrap();
    }
    assert_eq!(
        store.check_or_pin(&origin, &impostor).unwrap(),
        PinOutcome::Provisioned
    );

    // A symlink put there by another user is refused, though it leads to a file in a
    // directory only its owner may write (in a world-writable directory without the sticky
    // bit, whoever made it).
    let elsewhere = tempfile::tempdir().unwrap();
    let planted = elsewhere.path().join("pin");
    fs::write(&planted, format_pin(&origin, &impostor)).unwrap();
    fs::remove_file(&provisioned_file).unwrap();
    std::os::unix::fs::symlink(&planted, &provisioned_file).unwrap();
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o777)).unwrap();
    assert!(refused(&store).contains("who could replace"));
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o1777)).unwrap();
    if crate::store::current_euid() == 0 {
        rustix::fs::chownat(
            rustix::fs::CWD,
            &provisioned_file,
            Some(rustix::process::Uid::from_raw(4242)),
            None,
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        )
        .unwrap();
        // Where the kernel protects symlinks (`fs.protected_symlinks`), it refuses to
        // follow such a link itself.
        let message = refused(&store);
        assert!(
            message.contains("belongs to uid 4242") || message.contains("os error 13"),
            "{message}"
        );
    }
    // A FIFO put there is refused at once rather than hanging the client that opens it.
    fs::remove_file(&provisioned_file).unwrap();
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        &provisioned_file,
        rustix::fs::Mode::from_raw_mode(0o644),
    )
    .unwrap();
    assert!(refused(&store).contains("not a regular file"));
}
