use super::*;

const FP: Fingerprint = Fingerprint([0xab; 32]);

#[test]
fn outcomes_are_one_line_saying_what_was_done() {
    let fp = FP.to_hex();
    let outcome = ActionOutcome {
        action: Action::Revoke,
        fingerprint: fp.clone(),
        bindings: 2,
        sessions: 1,
        worker_retired: true,
        launch_cancelled: false,
        was_blocked: false,
        persisted: true,
        persist_error: None,
    };
    assert_eq!(
        describe_online(&outcome),
        format!("revoked {fp}: 2 bindings, 1 session closed, worker retired")
    );
    let blocked = ActionOutcome {
        action: Action::Block,
        bindings: 1,
        sessions: 0,
        worker_retired: false,
        launch_cancelled: true,
        was_blocked: true,
        ..outcome.clone()
    };
    assert_eq!(
        describe_online(&blocked),
        format!(
            "blocked {fp}: 1 binding, 0 sessions closed, worker launch cancelled (was already blocked)"
        )
    );
    let unblock = ActionOutcome {
        action: Action::Unblock,
        was_blocked: true,
        ..outcome.clone()
    };
    assert_eq!(describe_online(&unblock), format!("unblocked {fp}"));
    let not_blocked = ActionOutcome {
        was_blocked: false,
        ..unblock
    };
    assert_eq!(
        describe_online(&not_blocked),
        format!("{fp} was not blocked")
    );

    let edit = Edit {
        bindings: 1,
        generations: 2,
        was_blocked: false,
        is_blocked: true,
    };
    assert_eq!(
        describe_offline(Action::Block, &FP, &edit),
        format!("blocked {fp}: 1 binding, 2 worker generations dropped (daemon not running)")
    );
    assert_eq!(
        describe_offline(Action::Revoke, &FP, &Edit::default()),
        format!("revoked {fp}: 0 bindings, 0 worker generations dropped (daemon not running)")
    );
    assert_eq!(
        describe_offline(
            Action::Unblock,
            &FP,
            &Edit {
                was_blocked: true,
                ..Edit::default()
            }
        ),
        format!("unblocked {fp} (daemon not running)")
    );
}

#[test]
fn last_use_is_rfc3339_utc() {
    assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
    assert_eq!(rfc3339_utc(951_782_400_000), "2000-02-29T00:00:00Z");
    assert_eq!(rfc3339_utc(1_709_251_199_999), "2024-02-29T23:59:59Z");
    assert_eq!(rfc3339_utc(1_764_460_800_000), "2025-11-30T00:00:00Z");
    assert_eq!(rfc3339_utc(4_102_444_799_000), "2099-12-31T23:59:59Z");
    assert_eq!(rfc3339_utc(253_402_300_799_999), "9999-12-31T23:59:59Z");
    assert_eq!(rfc3339_utc(253_402_300_800_000), "253402300800000");
    assert_eq!(rfc3339_utc(u64::MAX), u64::MAX.to_string());
}
