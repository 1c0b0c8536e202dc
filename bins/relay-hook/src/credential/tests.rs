use std::path::Path;

use relay_identity::MapEnv;

use super::*;

#[test]
fn the_warning_names_source_and_reason_only() {
    assert_eq!(
        skipped_line(
            CredentialSource::Env,
            TokenFileReason::InvalidContents,
            None
        ),
        "route_credential_skipped source=env reason=invalid_contents"
    );
    assert_eq!(
        skipped_line(
            CredentialSource::File,
            TokenFileReason::InsecurePermissions,
            Some(Path::new("/home/dev/.config/relay/.client-token")),
        ),
        "route_credential_skipped source=file reason=insecure_permissions path=/home/dev/.config/relay/.client-token"
    );
}

#[test]
fn every_reason_keeps_its_code() {
    for reason in TokenFileReason::ALL {
        assert_eq!(log_reason(reason).as_str(), reason.as_str());
    }
    for source in [CredentialSource::Env, CredentialSource::File] {
        assert_eq!(log_source(source).as_str(), source.as_str());
    }
}

#[test]
fn without_a_state_directory_only_the_env_token_counts() {
    let token = RouteToken::generate().unwrap();
    let env = MapEnv::new().with(names::RELAY_CLIENT_TOKEN, token.encode());
    let resolved = env_only(&env);
    assert_eq!(resolved.token, Some((token, CredentialSource::Env)));
    assert!(resolved.skipped.is_empty());

    let env = MapEnv::new().with(names::RELAY_CLIENT_TOKEN, "not-a-token");
    let resolved = env_only(&env);
    assert_eq!(resolved.token, None);
    assert_eq!(
        resolved.skipped,
        vec![(CredentialSource::Env, TokenFileReason::InvalidContents)]
    );

    let resolved = env_only(&MapEnv::new().with(names::RELAY_CLIENT_TOKEN, ""));
    assert_eq!(resolved.token, None);
    assert!(resolved.skipped.is_empty());
}

#[test]
fn a_valid_env_token_wins_over_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let token = RouteToken::generate().unwrap();
    let env = MapEnv::new()
        .with(names::XDG_CONFIG_HOME, dir.path())
        .with(names::RELAY_CLIENT_TOKEN, token.encode());
    assert_eq!(
        resolve(&env, relay_identity::store::current_euid()),
        Some(token)
    );
}
