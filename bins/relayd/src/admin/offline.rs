//! A stopped daemon's state, read and changed by the daemon's own broker under the state
//! lock.

use std::path::Path;
use std::time::{Duration, Instant};

use relay_broker::{Broker, BrokerConfig, Fingerprint, Input, PersistedState};
use relay_identity::Env;
use relay_proxy::admin::{Action, AdminError, BindingsList, Probe, StateLock};
use relay_proxy::config::ConfigSources;
use relay_proxy::front::Mode;
use relay_proxy::shell::OsEntropy;
use relay_proxy::state::StateStore;

use super::BindingsError;

/// How long an edit waits for another bindings command, or a stopping daemon, to release
/// the state lock.
pub(super) const LOCK_WAIT: Duration = Duration::from_secs(10);
const LOCK_POLL: Duration = Duration::from_millis(50);

/// What an edit of a stopped daemon's state changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Edit {
    /// Live bindings that became tombstones.
    pub(crate) bindings: usize,
    /// Generation ledger entries dropped, so their workers are not resumed.
    pub(crate) generations: usize,
    pub(crate) was_blocked: bool,
    pub(crate) is_blocked: bool,
}

/// A stopped daemon's state after the broker handled an action on it.
#[derive(Debug)]
pub(crate) struct Applied {
    /// The broker's snapshot, as the daemon would write it.
    pub(crate) state: PersistedState,
    pub(crate) edit: Edit,
    /// Whether the snapshot differs from the one of the restored state: only then is the
    /// state file rewritten.
    pub(crate) changed: bool,
}

/// The bindings of a stopped daemon, as a running one would list them.
pub(super) fn list_stopped(dir: &Path) -> Result<BindingsList, BindingsError> {
    let store = StateStore::new(dir);
    let state = store.load()?;
    // What the view shows does not depend on the broker's settings, so a configuration
    // file that does not parse does not keep an administrator from listing. Without
    // limits, the restored broker keeps every tombstone of the file, as many as the
    // daemon's own limits let it write.
    Ok(list_of(
        BrokerConfig {
            max_routes: usize::MAX,
            max_tokens_per_identity: usize::MAX,
            ..BrokerConfig::default()
        },
        Instant::now(),
        state,
        |at| store.wall_ms(at),
    ))
}

/// The list of a persisted state, made from the bindings view of a broker that restored
/// it, as the running daemon's admin socket answers; tombstones that expired by `now` are
/// left out, as the daemon forgets them when it starts.
pub(crate) fn list_of(
    config: BrokerConfig,
    now: Instant,
    state: PersistedState,
    wall_ms: impl Fn(Instant) -> u64,
) -> BindingsList {
    let broker = restored(config, now, state);
    BindingsList::from_views(&broker.bindings(), &broker.snapshot().blocked, wall_ms)
}

fn restored(config: BrokerConfig, now: Instant, state: PersistedState) -> Broker {
    // Restoring and revoking draw no fresh id or secret; should a later broker draw one,
    // it gets the daemon's own generator.
    let mut broker = Broker::new(config, Box::new(OsEntropy));
    broker.restore(now, state);
    broker
}

/// Revokes, blocks or unblocks in the state file of a stopped daemon, holding the state
/// lock (which a running daemon holds for its whole life).
pub(super) fn edit_stopped(
    dir: &Path,
    action: Action,
    fingerprint: Fingerprint,
    config: BrokerConfig,
    lock_wait: Duration,
) -> Result<Edit, BindingsError> {
    let deadline = Instant::now() + lock_wait;
    let _lock = loop {
        if let Some(lock) = StateLock::try_acquire(dir)? {
            break lock;
        }
        if relay_proxy::admin::probe(dir)? == Probe::Answers {
            return Err(BindingsError::DaemonStarted {
                dir: dir.to_owned(),
            });
        }
        if Instant::now() >= deadline {
            return Err(AdminError::LockBusy {
                path: dir.join(relay_proxy::admin::LOCK_FILE),
                waited: lock_wait,
            }
            .into());
        }
        std::thread::sleep(LOCK_POLL);
    };
    if relay_proxy::admin::probe(dir)? == Probe::Answers {
        return Err(BindingsError::DaemonStarted {
            dir: dir.to_owned(),
        });
    }
    let store = StateStore::new(dir);
    let applied = apply(config, Instant::now(), store.load()?, action, fingerprint);
    if applied.changed {
        store.save(&applied.state)?;
        let path = store.path();
        let ownership = |source| BindingsError::Ownership {
            path: path.to_owned(),
            source,
        };
        let file = relay_identity::store::open_nofollow(path).map_err(ownership)?;
        relay_proxy::admin::give_to_directory_owner(dir, &file).map_err(ownership)?;
    }
    Ok(applied.edit)
}

/// What §5.4's revoke/block row does to a route, decided by the broker itself: a broker
/// with the daemon's settings restores the persisted state, handles the revocation, block
/// or unblock as the running daemon's does, and its snapshot is the new state. Offline
/// nothing is connected, so the outputs (refusals, log events, the write request) have
/// nobody to go to; the caller writes the snapshot.
pub(crate) fn apply(
    config: BrokerConfig,
    now: Instant,
    state: PersistedState,
    action: Action,
    fingerprint: Fingerprint,
) -> Applied {
    let mut broker = restored(config, now, state);
    let before = broker.snapshot();
    let input = match action {
        Action::Revoke => Input::Revoke {
            fingerprint,
            block: false,
        },
        Action::Block => Input::Revoke {
            fingerprint,
            block: true,
        },
        Action::Unblock => Input::Unblock { fingerprint },
    };
    broker.handle(now, input);
    while broker.poll_output().is_some() {}
    let after = broker.snapshot();
    let live = |state: &PersistedState| {
        state
            .bindings
            .iter()
            .filter(|b| b.fingerprint == fingerprint && b.tombstone_until.is_none())
            .count()
    };
    let edit = Edit {
        bindings: live(&before).saturating_sub(live(&after)),
        generations: before
            .generations
            .len()
            .saturating_sub(after.generations.len()),
        was_blocked: before.blocked.contains(&fingerprint),
        is_blocked: after.blocked.contains(&fingerprint),
    };
    Applied {
        changed: after != before,
        state: after,
        edit,
    }
}

/// The broker settings of the daemon of `dir`, built as relayd builds them: from the files
/// it reads (the user file beside its state directory, `<base>/relay/config.toml`, and the
/// system file) and `RELAY_DAEMON_MAX_TOKENS_PER_IDENTITY`. The daemon's command-line flags
/// are not known here; none of them but `--max-tokens-per-identity` and `--config` changes
/// what a revocation writes (docs/operations.md says so).
pub(super) fn daemon_broker_config(
    dir: &Path,
    system_dir: &Path,
    env: &impl Env,
) -> Result<BrokerConfig, BindingsError> {
    let sources = ConfigSources::standard(dir.parent(), system_dir);
    let config = crate::daemon::load_config(&sources, None, env)
        .map_err(|message| BindingsError::Config { message })?;
    Ok(crate::daemon::broker_config(&config, Mode::Managed))
}

#[cfg(test)]
mod tests;
