//! `relayd [--state-dir DIR] bindings list | revoke | block | unblock` (SPEC §2.1, §5.4 last
//! row): through the admin socket when a daemon answers on it, otherwise on the state file
//! of the stopped daemon, under the state lock.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use relay_broker::{Broker, BrokerConfig, Fingerprint, Input, PersistedState};
use relay_identity::{Env, ProcessEnv, StatePaths};
use relay_proxy::admin::{
    Action, ActionOutcome, AdminClient, AdminClientError, AdminError, BindingsList, Probe,
    StateLock,
};
use relay_proxy::config::ConfigSources;
use relay_proxy::front::Mode;
use relay_proxy::shell::OsEntropy;
use relay_proxy::state::{StateError, StateStore};

use crate::cli::BindingsCommand;

/// How long an edit waits for another bindings command, or a stopping daemon, to release
/// the state lock.
const LOCK_WAIT: Duration = Duration::from_secs(10);
const LOCK_POLL: Duration = Duration::from_millis(50);

/// Why a bindings command failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BindingsError {
    #[error(
        "state directory {} does not exist: pass --state-dir with the daemon's state directory",
        dir.display()
    )]
    NoStateDir { dir: PathBuf },
    #[error(transparent)]
    Client(#[from] AdminClientError),
    #[error(transparent)]
    Admin(#[from] AdminError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error("a daemon started on {} meanwhile: run the command again", dir.display())]
    DaemonStarted { dir: PathBuf },
    #[error("cannot give {} to the state directory's owner", path.display())]
    Ownership {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("reading the daemon configuration: {message}")]
    Config { message: String },
    #[error("cannot start the async runtime")]
    Runtime(#[source] std::io::Error),
    #[error(
        "the running daemon made the change but could not write its state file yet ({error}); it keeps retrying"
    )]
    NotPersisted { error: String },
}

/// What a command did, for printing.
#[derive(Debug)]
enum Done {
    Listed {
        list: BindingsList,
        daemon_running: bool,
    },
    Acted(ActionOutcome),
    Edited {
        action: Action,
        fingerprint: Fingerprint,
        outcome: Edit,
    },
}

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

/// The fingerprint argument, validated: 64 hex characters, uppercase lowered.
pub(crate) fn command_fingerprint(
    command: &BindingsCommand,
) -> Result<Option<(Action, Fingerprint)>, relay_proxy::admin::FingerprintError> {
    let (action, text) = match command {
        BindingsCommand::List => return Ok(None),
        BindingsCommand::Revoke { fingerprint } => (Action::Revoke, fingerprint),
        BindingsCommand::Block { fingerprint } => (Action::Block, fingerprint),
        BindingsCommand::Unblock { fingerprint } => (Action::Unblock, fingerprint),
    };
    relay_proxy::admin::parse_fingerprint(text).map(|fp| Some((action, fp)))
}

/// Runs a bindings command: 0 on success, 1 on failure, 64 on a usage error.
pub(crate) fn run(state_dir: Option<&Path>, command: &BindingsCommand) -> ExitCode {
    let target = match command_fingerprint(command) {
        Ok(target) => target,
        Err(error) => return relay_logging::usage_exit("relayd", &format!("FINGERPRINT {error}")),
    };
    let dir = match state_dir {
        Some(dir) => dir.to_owned(),
        None => match StatePaths::resolve(&ProcessEnv) {
            Ok(paths) => paths.daemon_dir(),
            Err(error) => {
                return relay_logging::usage_exit(
                    "relayd",
                    &format!("cannot find the state directory: {error}; or pass --state-dir"),
                );
            }
        },
    };
    match execute(&dir, target) {
        Ok(done) => report(&done),
        Err(error @ BindingsError::Config { .. }) => {
            relay_logging::usage_exit("relayd", &one_line(&error))
        }
        Err(error) => {
            eprintln!("relayd: {}", one_line(&error));
            ExitCode::FAILURE
        }
    }
}

fn execute(dir: &Path, target: Option<(Action, Fingerprint)>) -> Result<Done, BindingsError> {
    if !dir.is_dir() {
        return Err(BindingsError::NoStateDir {
            dir: dir.to_owned(),
        });
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(BindingsError::Runtime)?;
    let online = runtime.block_on(async {
        let Some(mut client) = AdminClient::connect(dir).await? else {
            return Ok::<_, BindingsError>(None);
        };
        Ok(Some(match target {
            None => Done::Listed {
                list: client.bindings().await?,
                daemon_running: true,
            },
            Some((action, fingerprint)) => Done::Acted(client.act(action, &fingerprint).await?),
        }))
    })?;
    if let Some(done) = online {
        return Ok(done);
    }
    match target {
        None => Ok(Done::Listed {
            list: list_stopped(dir)?,
            daemon_running: false,
        }),
        Some((action, fingerprint)) => {
            let system_dir = relay_identity::system_config_dir(&ProcessEnv);
            let config = daemon_broker_config(dir, &system_dir, &ProcessEnv)?;
            Ok(Done::Edited {
                action,
                fingerprint,
                outcome: edit_stopped(dir, action, fingerprint, config, LOCK_WAIT)?,
            })
        }
    }
}

fn report(done: &Done) -> ExitCode {
    match done {
        Done::Listed {
            list,
            daemon_running,
        } => {
            for line in list_lines(list) {
                println!("{line}");
            }
            if list.bindings.is_empty() && list.blocked.is_empty() {
                eprintln!("(no bindings)");
            }
            if !daemon_running {
                eprintln!("(daemon not running)");
            }
            ExitCode::SUCCESS
        }
        Done::Acted(outcome) => {
            println!("{}", describe_online(outcome));
            if !outcome.persisted {
                let error = BindingsError::NotPersisted {
                    error: outcome.persist_error.clone().unwrap_or_default(),
                };
                eprintln!("relayd: {error}");
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Done::Edited {
            action,
            fingerprint,
            outcome,
        } => {
            println!("{}", describe_offline(*action, fingerprint, outcome));
            ExitCode::SUCCESS
        }
    }
}

/// The bindings of a stopped daemon, as a running one would list them.
fn list_stopped(dir: &Path) -> Result<BindingsList, BindingsError> {
    let store = StateStore::new(dir);
    let state = store.load()?;
    // What the view shows does not depend on the broker's settings, so a configuration
    // file that does not parse does not keep an administrator from listing.
    Ok(list_of(
        BrokerConfig::default(),
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
fn edit_stopped(
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
fn daemon_broker_config(
    dir: &Path,
    system_dir: &Path,
    env: &impl Env,
) -> Result<BrokerConfig, BindingsError> {
    let sources = ConfigSources::standard(dir.parent(), system_dir);
    let config = crate::daemon::load_config(&sources, None, env)
        .map_err(|message| BindingsError::Config { message })?;
    Ok(crate::daemon::broker_config(&config, Mode::Managed))
}

/// One line per binding, then one per blocked fingerprint without a binding.
pub(crate) fn list_lines(list: &BindingsList) -> Vec<String> {
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    let mut lines: Vec<String> = list
        .bindings
        .iter()
        .map(|b| {
            format!(
                "{} digest={} last_use={} tombstone={} blocked={}",
                b.fingerprint,
                b.digest_prefix,
                rfc3339_utc(b.last_use_unix_ms),
                yes_no(b.tombstone),
                yes_no(b.blocked)
            )
        })
        .collect();
    for fp in &list.blocked {
        if !list.bindings.iter().any(|b| &b.fingerprint == fp) {
            lines.push(format!("{fp} digest=- last_use=- tombstone=- blocked=yes"));
        }
    }
    lines
}

fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

pub(crate) fn describe_online(outcome: &ActionOutcome) -> String {
    let fp = &outcome.fingerprint;
    match outcome.action {
        Action::Unblock if outcome.was_blocked => format!("unblocked {fp}"),
        Action::Unblock => format!("{fp} was not blocked"),
        Action::Revoke | Action::Block => {
            let worker = if outcome.worker_retired {
                "worker retired"
            } else if outcome.launch_cancelled {
                "worker launch cancelled"
            } else {
                "no worker"
            };
            let verb = if outcome.action == Action::Block {
                "blocked"
            } else {
                "revoked"
            };
            let already = if outcome.action == Action::Block && outcome.was_blocked {
                " (was already blocked)"
            } else {
                ""
            };
            format!(
                "{verb} {fp}: {}, {} closed, {worker}{already}",
                count(outcome.bindings, "binding", "bindings"),
                count(outcome.sessions, "session", "sessions"),
            )
        }
    }
}

pub(crate) fn describe_offline(action: Action, fingerprint: &Fingerprint, edit: &Edit) -> String {
    let fp = fingerprint.to_hex();
    match action {
        Action::Unblock if edit.was_blocked => format!("unblocked {fp} (daemon not running)"),
        Action::Unblock => format!("{fp} was not blocked (daemon not running)"),
        Action::Revoke | Action::Block => {
            let verb = if action == Action::Block {
                "blocked"
            } else {
                "revoked"
            };
            let already = if action == Action::Block && edit.was_blocked {
                ", was already blocked"
            } else {
                ""
            };
            format!(
                "{verb} {fp}: {}, {} dropped{already} (daemon not running)",
                count(edit.bindings, "binding", "bindings"),
                count(edit.generations, "worker generation", "worker generations"),
            )
        }
    }
}

/// Milliseconds since the Unix epoch as RFC 3339 UTC with whole seconds.
pub(crate) fn rfc3339_utc(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01, counted in 400-year eras that
/// start on 1 March so the leap day is the last day of an era's year.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let shifted = days + 719_468; // days from 0000-03-01 to 1970-01-01
    let era = shifted / 146_097;
    let day_of_era = shifted % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153; // 0 = March
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// An error and its causes on one line.
fn one_line(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text.replace('\n', " ")
}

#[cfg(test)]
mod tests;
