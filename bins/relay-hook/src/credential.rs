//! Step 2 of SPEC §7.1: the route credential (§4.1), and the redacted warning line for each
//! source that was present but skipped.

use std::path::Path;

use relay_identity::{
    CredentialSource, Env, ResolvedCredential, RouteToken, StatePaths, TokenFileReason, names,
    resolve_credential,
};
use relay_logging::{CredentialSkipReason, Lifecycle};

/// The token to send, if any. Each skipped source gets one warning line on stderr, which names
/// the source and the reason, never the value.
pub(crate) fn resolve(env: &impl Env, euid: u32) -> Option<RouteToken> {
    // Without a state directory base there is no token file to read; the env token still counts.
    let paths = StatePaths::resolve(env).ok();
    let resolved = match &paths {
        Some(paths) => resolve_credential(env, paths, euid),
        None => env_only(env),
    };
    for (source, reason) in &resolved.skipped {
        let path = match source {
            CredentialSource::File => paths.as_ref().map(StatePaths::token_file),
            CredentialSource::Env => None,
        };
        relay_logging::say!(
            "relay-hook: warning: {}",
            skipped_line(*source, *reason, path.as_deref())
        );
    }
    resolved.token.map(|(token, _)| token)
}

/// The first half of `resolve_credential`, for a process with no state directory base (no
/// `XDG_CONFIG_HOME`, `HOME` or `USERPROFILE`): only `RELAY_CLIENT_TOKEN` can be found.
fn env_only(env: &impl Env) -> ResolvedCredential {
    let mut skipped = Vec::new();
    let token = env.non_empty(names::RELAY_CLIENT_TOKEN).and_then(|value| {
        match value.to_str().map(RouteToken::parse) {
            Some(Ok(token)) => Some((token, CredentialSource::Env)),
            _ => {
                skipped.push((CredentialSource::Env, TokenFileReason::InvalidContents));
                None
            }
        }
    });
    ResolvedCredential { token, skipped }
}

/// `route_credential_skipped source=… reason=…[ path=…]`: the lifecycle event of SPEC §10.3 as
/// one plain line (`relay-hook` sets up no logging, SPEC §7.1).
pub(crate) fn skipped_line(
    source: CredentialSource,
    reason: TokenFileReason,
    path: Option<&Path>,
) -> String {
    let event = Lifecycle::RouteCredentialSkipped {
        source: log_source(source),
        reason: log_reason(reason),
        path,
    };
    let mut line = format!(
        "{} source={} reason={}",
        event.name(),
        log_source(source).as_str(),
        log_reason(reason).as_str()
    );
    if let Some(path) = path {
        line.push_str(&format!(" path={}", path.display()));
    }
    line
}

fn log_source(source: CredentialSource) -> relay_logging::CredentialSource {
    match source {
        CredentialSource::Env => relay_logging::CredentialSource::Env,
        CredentialSource::File => relay_logging::CredentialSource::File,
    }
}

fn log_reason(reason: TokenFileReason) -> CredentialSkipReason {
    match reason {
        TokenFileReason::Symlink => CredentialSkipReason::Symlink,
        TokenFileReason::NotRegularFile => CredentialSkipReason::NotRegularFile,
        TokenFileReason::NotOwnedByCurrentUser => CredentialSkipReason::NotOwnedByCurrentUser,
        TokenFileReason::InsecurePermissions => CredentialSkipReason::InsecurePermissions,
        TokenFileReason::TooLarge => CredentialSkipReason::TooLarge,
        TokenFileReason::InvalidContents => CredentialSkipReason::InvalidContents,
        TokenFileReason::Unreadable => CredentialSkipReason::Unreadable,
    }
}

#[cfg(test)]
mod tests;
