use super::*;

const FP: Fingerprint = Fingerprint([0xab; 32]);
const OTHER: Fingerprint = Fingerprint([0x11; 32]);

#[test]
fn the_fingerprint_argument_is_validated_and_lowered() {
    assert_eq!(command_fingerprint(&BindingsCommand::List), Ok(None));
    let upper = BindingsCommand::Revoke {
        fingerprint: "AB".repeat(32),
    };
    assert_eq!(command_fingerprint(&upper), Ok(Some((Action::Revoke, FP))));
    let block = BindingsCommand::Block {
        fingerprint: "ab".repeat(32),
    };
    assert_eq!(command_fingerprint(&block), Ok(Some((Action::Block, FP))));
    let unblock = BindingsCommand::Unblock {
        fingerprint: "11".repeat(32),
    };
    assert_eq!(
        command_fingerprint(&unblock),
        Ok(Some((Action::Unblock, OTHER)))
    );
    for bad in [
        "ab".repeat(31),
        "ab".repeat(33),
        "xy".repeat(32),
        // A token is 43 base64url characters: never a fingerprint.
        "q".repeat(43),
    ] {
        let command = BindingsCommand::Revoke { fingerprint: bad };
        assert!(command_fingerprint(&command).is_err(), "{command:?}");
    }
}

#[test]
fn a_missing_state_directory_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let error = execute(&missing, None).unwrap_err();
    assert!(matches!(error, BindingsError::NoStateDir { .. }));
    assert!(error.to_string().contains("--state-dir"), "{error}");
}
