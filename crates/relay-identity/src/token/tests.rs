use std::fs;
use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::env::MapEnv;

const VALID: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";

fn facts() -> FileFacts {
    FileFacts {
        is_symlink: false,
        is_regular_file: true,
        uid: 1000,
        mode: 0o600,
        len: 44,
    }
}

#[test]
fn generated_token_is_43_base64url_chars_and_parses_back() {
    let token = RouteToken::generate().unwrap();
    let text = token.encode();
    assert_eq!(text.len(), 43);
    assert!(
        text.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    );
    assert_eq!(RouteToken::parse(&text), Ok(token.clone()));
    assert_ne!(RouteToken::generate().unwrap(), token);
}

#[test]
fn parse_accepts_only_the_canonical_encoding_of_32_bytes() {
    let token = RouteToken::parse(VALID).unwrap();
    let expected: Vec<u8> = (0u8..32).collect();
    assert_eq!(token.expose_bytes().as_slice(), expected.as_slice());
    assert_eq!(RouteToken::parse(""), Err(TokenError::Length { len: 0 }));
    assert_eq!(
        RouteToken::parse(&VALID[..42]),
        Err(TokenError::Length { len: 42 })
    );
    assert_eq!(
        RouteToken::parse(&format!("{VALID}=")),
        Err(TokenError::Length { len: 44 })
    );
    assert_eq!(
        RouteToken::parse(&format!("{VALID}\n")),
        Err(TokenError::Length { len: 44 })
    );
    let with_plus = format!("+{}", &VALID[1..]);
    assert_eq!(RouteToken::parse(&with_plus), Err(TokenError::Alphabet));
    let with_space = format!(" {}", &VALID[1..]);
    assert_eq!(RouteToken::parse(&with_space), Err(TokenError::Alphabet));
    // Every character outside the alphabet, first, in the middle and last, and a
    // two-byte character in place of two.
    for c in (0u8..128).map(char::from) {
        if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
            continue;
        }
        for at in [0, 21, 42] {
            let text = format!("{}{c}{}", &VALID[..at], &VALID[at + 1..]);
            assert_eq!(
                RouteToken::parse(&text),
                Err(TokenError::Alphabet),
                "{text:?}"
            );
        }
    }
    let accented = format!("é{}", &VALID[2..]);
    assert_eq!(RouteToken::parse(&accented), Err(TokenError::Alphabet));
    // "8" ends in 4 bits that must be zero; "9" sets one of them: same bytes, other spelling.
    let non_canonical = format!("{}9", &VALID[..42]);
    assert_eq!(
        RouteToken::parse(&non_canonical),
        Err(TokenError::NonCanonical)
    );
}

#[test]
fn each_token_has_exactly_one_spelling() {
    // Every base64url character in the last place: the 16 whose 2 unused bits are zero give
    // 16 different tokens, each spelled back the same; the other 48 are refused, so no two
    // spellings name one token.
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut accepted = Vec::new();
    for (value, last) in alphabet.iter().enumerate() {
        let text = format!("{}{}", &VALID[..42], *last as char);
        match RouteToken::parse(&text) {
            Ok(token) => {
                assert_eq!(value % 4, 0, "{text}");
                assert_eq!(token.encode(), text);
                accepted.push(token);
            }
            Err(error) => {
                assert_ne!(value % 4, 0, "{text}");
                assert_eq!(error, TokenError::NonCanonical);
            }
        }
    }
    assert_eq!(accepted.len(), 16);
    for (i, a) in accepted.iter().enumerate() {
        assert!(accepted[i + 1..].iter().all(|b| b != a));
    }
}

#[test]
fn debug_never_shows_the_token() {
    let token = RouteToken::parse(VALID).unwrap();
    let debug = format!("{token:?}");
    assert_eq!(debug, "RouteToken(..)");
    assert!(!debug.contains(VALID));
    let resolved = ResolvedCredential {
        token: Some((token, CredentialSource::Env)),
        skipped: vec![],
    };
    assert!(!format!("{resolved:?}").contains(VALID));
}

#[test]
fn digest_is_sha256_of_the_raw_bytes() {
    let token = RouteToken::parse(VALID).unwrap();
    let digest = token.digest();
    let expected = ring::digest::digest(&ring::digest::SHA256, token.expose_bytes());
    assert_eq!(digest.as_bytes().as_slice(), expected.as_ref());
    assert_eq!(digest.to_string().len(), 64);
    assert_eq!(digest.short(), digest.to_string()[..12]);
    assert_eq!(TokenDigest::parse_hex(&digest.to_string()), Ok(digest));
}

#[test]
fn every_reason_code_has_its_spec_name() {
    let codes: Vec<&str> = TokenFileReason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        codes,
        [
            "symlink",
            "not_regular_file",
            "not_owned_by_current_user",
            "insecure_permissions",
            "too_large",
            "invalid_contents",
            "unreadable"
        ]
    );
}

/// systemd writes a service credential owned by root, mode 0400, readable by the service
/// through an ACL whose mask shows as the group's bits: accepted there, and nothing looser.
#[test]
fn a_service_credential_may_be_roots_and_group_read_but_never_other_read() {
    let systemd = FileFacts {
        uid: 0,
        mode: 0o440,
        ..facts()
    };
    assert_eq!(check_service_credential(&systemd, 1000, 128), Ok(()));
    assert_eq!(check_service_credential(&facts(), 1000, 128), Ok(()));
    let cases = [
        (
            FileFacts {
                mode: 0o444,
                ..systemd
            },
            TokenFileReason::InsecurePermissions,
        ),
        (
            FileFacts {
                uid: 1001,
                ..systemd
            },
            TokenFileReason::NotOwnedByCurrentUser,
        ),
        (
            FileFacts {
                is_symlink: true,
                is_regular_file: false,
                ..systemd
            },
            TokenFileReason::Symlink,
        ),
        (
            FileFacts {
                len: 129,
                ..systemd
            },
            TokenFileReason::TooLarge,
        ),
    ];
    for (facts, reason) in cases {
        assert_eq!(
            check_service_credential(&facts, 1000, 128),
            Err(reason),
            "{facts:?}"
        );
    }
    // The same root-owned, group-readable file anywhere else is refused.
    assert_eq!(
        check_private_file(&systemd, 1000, 128),
        Err(TokenFileReason::NotOwnedByCurrentUser)
    );
}

#[test]
fn pure_checks_produce_every_metadata_reason() {
    assert_eq!(check_token_file(&facts(), 1000), Ok(()));
    let cases = [
        (
            FileFacts {
                is_symlink: true,
                is_regular_file: false,
                ..facts()
            },
            TokenFileReason::Symlink,
        ),
        (
            FileFacts {
                is_regular_file: false,
                ..facts()
            },
            TokenFileReason::NotRegularFile,
        ),
        (
            FileFacts { uid: 0, ..facts() },
            TokenFileReason::NotOwnedByCurrentUser,
        ),
        (
            FileFacts {
                mode: 0o640,
                ..facts()
            },
            TokenFileReason::InsecurePermissions,
        ),
        (
            FileFacts {
                mode: 0o601,
                ..facts()
            },
            TokenFileReason::InsecurePermissions,
        ),
        (
            FileFacts {
                len: 129,
                ..facts()
            },
            TokenFileReason::TooLarge,
        ),
    ];
    for (facts, reason) in cases {
        assert_eq!(check_token_file(&facts, 1000), Err(reason), "{facts:?}");
    }
    // 0400 and setuid-free 0700 have no group or other bits.
    for mode in [0o400, 0o600, 0o700] {
        assert_eq!(
            check_token_file(&FileFacts { mode, ..facts() }, 1000),
            Ok(())
        );
    }
    assert_eq!(
        check_token_file(
            &FileFacts {
                len: 128,
                ..facts()
            },
            1000
        ),
        Ok(())
    );
}

#[test]
fn pure_content_check() {
    let token = RouteToken::parse(VALID).unwrap();
    for ok in [
        VALID.to_owned(),
        format!("{VALID}\n"),
        format!("{VALID}\r\n"),
    ] {
        assert_eq!(
            parse_token_contents(ok.as_bytes()),
            Ok(token.clone()),
            "{ok:?}"
        );
    }
    for bad in [
        String::new(),
        "\n".to_owned(),
        format!("{VALID}\n\n"),
        format!("{VALID}\r"),
        format!("{VALID} "),
        format!(" {VALID}"),
        format!("{VALID}\n{VALID}\n"),
        format!("\u{feff}{VALID}"),
        "garbage".to_owned(),
    ] {
        assert_eq!(
            parse_token_contents(bad.as_bytes()),
            Err(TokenFileReason::InvalidContents),
            "{bad:?}"
        );
    }
    assert_eq!(
        parse_token_contents(&[0xff; 43]),
        Err(TokenFileReason::InvalidContents)
    );
    assert_eq!(
        parse_token_contents(&[b'A'; 200]),
        Err(TokenFileReason::TooLarge)
    );
}

fn write_token(path: &Path, contents: &[u8], mode: u32) {
    fs::write(path, contents).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn real_files_produce_the_reasons_root_can_produce() {
    let tmp = tempfile::tempdir().unwrap();
    let euid = store::current_euid();
    let good = tmp.path().join("good");
    write_token(&good, format!("{VALID}\n").as_bytes(), 0o600);
    assert_eq!(
        read_token_file(&good, euid),
        Ok(Some(RouteToken::parse(VALID).unwrap()))
    );

    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&good, &link).unwrap();
    assert_eq!(read_token_file(&link, euid), Err(TokenFileReason::Symlink));

    let group_readable = tmp.path().join("group");
    write_token(&group_readable, VALID.as_bytes(), 0o640);
    assert_eq!(
        read_token_file(&group_readable, euid),
        Err(TokenFileReason::InsecurePermissions)
    );

    let dir = tmp.path().join("dir");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(
        read_token_file(&dir, euid),
        Err(TokenFileReason::NotRegularFile)
    );

    let big = tmp.path().join("big");
    write_token(&big, &[b'A'; 200], 0o600);
    assert_eq!(read_token_file(&big, euid), Err(TokenFileReason::TooLarge));

    let garbage = tmp.path().join("garbage");
    write_token(&garbage, b"this is not a token\n", 0o600);
    assert_eq!(
        read_token_file(&garbage, euid),
        Err(TokenFileReason::InvalidContents)
    );

    let missing = tmp.path().join("missing");
    assert_eq!(read_token_file(&missing, euid), Ok(None));

    if euid == 0 {
        let theirs = tmp.path().join("theirs");
        write_token(&theirs, VALID.as_bytes(), 0o600);
        std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
        assert_eq!(
            read_token_file(&theirs, 0),
            Err(TokenFileReason::NotOwnedByCurrentUser)
        );
    }
}

#[test]
fn a_fifo_is_not_a_regular_file_and_does_not_block() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("fifo");
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .unwrap();
    assert_eq!(
        read_token_file(&fifo, store::current_euid()),
        Err(TokenFileReason::NotRegularFile)
    );
}

fn paths_with_token(contents: Option<&[u8]>) -> (tempfile::TempDir, StatePaths) {
    let tmp = tempfile::tempdir().unwrap();
    let paths = StatePaths::from_base(tmp.path());
    if let Some(contents) = contents {
        fs::create_dir_all(paths.relay_dir()).unwrap();
        write_token(&paths.token_file(), contents, 0o600);
    }
    (tmp, paths)
}

#[test]
fn env_token_wins_and_the_file_is_not_read() {
    let (_tmp, paths) = paths_with_token(Some(b"garbage"));
    let env = MapEnv::new().with(names::RELAY_CLIENT_TOKEN, VALID);
    let resolved = resolve_credential(&env, &paths, store::current_euid());
    assert_eq!(
        resolved.token,
        Some((RouteToken::parse(VALID).unwrap(), CredentialSource::Env))
    );
    assert_eq!(resolved.skipped, []);
}

#[test]
fn invalid_env_is_skipped_for_the_file() {
    let file_token = RouteToken::generate().unwrap();
    let (_tmp, paths) = paths_with_token(Some(format!("{}\n", file_token.encode()).as_bytes()));
    let env = MapEnv::new().with(names::RELAY_CLIENT_TOKEN, "not-a-token");
    let resolved = resolve_credential(&env, &paths, store::current_euid());
    assert_eq!(resolved.token, Some((file_token, CredentialSource::File)));
    assert_eq!(
        resolved.skipped,
        [(CredentialSource::Env, TokenFileReason::InvalidContents)]
    );
}

#[test]
fn empty_env_is_unset_and_missing_file_is_not_skipped() {
    let (_tmp, paths) = paths_with_token(None);
    let env = MapEnv::new().with(names::RELAY_CLIENT_TOKEN, "");
    let resolved = resolve_credential(&env, &paths, store::current_euid());
    assert_eq!(resolved.token, None);
    assert_eq!(resolved.skipped, []);
}

#[test]
fn both_sources_bad_reports_both() {
    let (_tmp, paths) = paths_with_token(Some(&[b'x'; 200]));
    let env = MapEnv::new().with(names::RELAY_CLIENT_TOKEN, "x");
    let resolved = resolve_credential(&env, &paths, store::current_euid());
    assert_eq!(resolved.token, None);
    assert_eq!(
        resolved.skipped,
        [
            (CredentialSource::Env, TokenFileReason::InvalidContents),
            (CredentialSource::File, TokenFileReason::TooLarge)
        ]
    );
}

#[test]
fn ensure_refuses_root() {
    let (_tmp, paths) = paths_with_token(None);
    assert!(matches!(
        ensure_token_file(&paths, 0),
        Err(EnsureError::Root)
    ));
    assert!(!paths.relay_dir().exists(), "nothing is created for root");
}

// Creating the file needs an unprivileged user (ensure refuses root, and CI runs as root):
// relay-doctor's tests run it under setpriv.

#[test]
fn ensure_never_overwrites_an_invalid_file() {
    let (_tmp, paths) = paths_with_token(Some(b"garbage\n"));
    fs::set_permissions(paths.relay_dir(), fs::Permissions::from_mode(0o700)).unwrap();
    // Pretend to be the file's owner, who is not root, so the real checks run.
    let owner = std::os::unix::fs::MetadataExt::uid(&fs::metadata(paths.token_file()).unwrap());
    if owner == 0 {
        std::os::unix::fs::chown(paths.relay_dir(), Some(65534), None).unwrap();
        std::os::unix::fs::chown(paths.token_file(), Some(65534), None).unwrap();
    }
    let euid = if owner == 0 { 65534 } else { owner };
    let err = ensure_token_file(&paths, euid).unwrap_err();
    assert!(
        matches!(
            err,
            EnsureError::Invalid {
                reason: TokenFileReason::InvalidContents,
                ..
            }
        ),
        "{err}"
    );
    let message = err.to_string();
    assert!(
        message.contains(&paths.token_file().display().to_string()),
        "{message}"
    );
    assert!(message.contains("invalid_contents"), "{message}");
    assert_eq!(fs::read(paths.token_file()).unwrap(), b"garbage\n");
}

#[test]
fn ensure_reports_an_insecure_dir() {
    let (_tmp, paths) = paths_with_token(None);
    fs::create_dir_all(paths.relay_dir()).unwrap();
    fs::set_permissions(paths.relay_dir(), fs::Permissions::from_mode(0o777)).unwrap();
    let owner = std::os::unix::fs::MetadataExt::uid(&fs::metadata(paths.relay_dir()).unwrap());
    let euid = if owner == 0 { 65534 } else { owner };
    if owner == 0 {
        std::os::unix::fs::chown(paths.relay_dir(), Some(euid), None).unwrap();
    }
    let err = ensure_token_file(&paths, euid).unwrap_err();
    assert!(
        matches!(
            err,
            EnsureError::Dir(StoreError::DirWritableByOthers { .. })
        ),
        "{err}"
    );
}
