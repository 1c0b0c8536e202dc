//! `relayd [--state-dir DIR] bindings list | revoke | block | unblock` (SPEC §2.1, §5.4 last
//! row): through the admin socket when a daemon answers on it, otherwise on the state file
//! of the stopped daemon, under the state lock.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use relay_broker::{Fingerprint, PersistedState};
use relay_identity::{ProcessEnv, StatePaths};
use relay_proxy::admin::{
    Action, ActionOutcome, AdminClient, AdminClientError, AdminError, BindingEntry, BindingsList,
    Probe, StateLock,
};
use relay_proxy::config::{Config, ConfigError, ConfigSources};
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
    #[error("reading the daemon configuration for binding_tombstone_days")]
    Config(#[source] ConfigError),
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

impl Edit {
    fn changed(&self) -> bool {
        self.bindings > 0 || self.generations > 0 || self.was_blocked != self.is_blocked
    }
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
        Err(BindingsError::Config(error)) => {
            relay_logging::usage_exit("relayd", &one_line(&BindingsError::Config(error)))
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
            let tombstone = tombstone_period(dir, &system_dir)?;
            Ok(Done::Edited {
                action,
                fingerprint,
                outcome: edit_stopped(dir, action, fingerprint, tombstone, LOCK_WAIT)?,
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
    Ok(list_of(&state, Instant::now(), |at| store.wall_ms(at)))
}

/// The list of a persisted state; tombstones that expired by `now` are left out, as the
/// daemon forgets them when it starts.
pub(crate) fn list_of(
    state: &PersistedState,
    now: Instant,
    wall_ms: impl Fn(Instant) -> u64,
) -> BindingsList {
    let mut bindings: Vec<BindingEntry> = state
        .bindings
        .iter()
        .filter(|b| b.tombstone_until.is_none_or(|until| until > now))
        .map(|b| BindingEntry {
            fingerprint: b.fingerprint.to_hex(),
            digest_prefix: b.digest.to_hex()[..12].to_owned(),
            last_use_unix_ms: wall_ms(b.last_use),
            tombstone: b.tombstone_until.is_some(),
            blocked: state.blocked.contains(&b.fingerprint),
        })
        .collect();
    bindings.sort_by(|a, b| {
        (&a.fingerprint, &a.digest_prefix).cmp(&(&b.fingerprint, &b.digest_prefix))
    });
    let mut blocked: Vec<String> = state.blocked.iter().map(Fingerprint::to_hex).collect();
    blocked.sort();
    BindingsList { bindings, blocked }
}

/// Revokes, blocks or unblocks in the state file of a stopped daemon, holding the state
/// lock (which a running daemon holds for its whole life).
fn edit_stopped(
    dir: &Path,
    action: Action,
    fingerprint: Fingerprint,
    tombstone: Duration,
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
    let mut state = store.load()?;
    let now = Instant::now();
    let edit = apply(&mut state, action, fingerprint, now + tombstone);
    if edit.changed() {
        store.save(&state)?;
        let path = store.path();
        let ownership = |source| BindingsError::Ownership {
            path: path.to_owned(),
            source,
        };
        let file = relay_identity::store::open_nofollow(path).map_err(ownership)?;
        relay_proxy::admin::give_to_directory_owner(dir, &file).map_err(ownership)?;
    }
    Ok(edit)
}

/// What §5.4's revoke/block row does to a running route, done to the persisted state: the
/// fingerprint's live bindings become tombstones until `tombstone_until`, its generation
/// ledger entries are dropped so no worker resumes, and `blocked` gains or loses it.
pub(crate) fn apply(
    state: &mut PersistedState,
    action: Action,
    fingerprint: Fingerprint,
    tombstone_until: Instant,
) -> Edit {
    let was_blocked = state.blocked.contains(&fingerprint);
    let mut edit = Edit {
        was_blocked,
        is_blocked: was_blocked,
        ..Edit::default()
    };
    if action == Action::Unblock {
        state.blocked.retain(|fp| *fp != fingerprint);
        edit.is_blocked = false;
        return edit;
    }
    for binding in &mut state.bindings {
        if binding.fingerprint == fingerprint && binding.tombstone_until.is_none() {
            binding.tombstone_until = Some(tombstone_until);
            edit.bindings += 1;
        }
    }
    let before = state.generations.len();
    state.generations.retain(|g| g.fingerprint != fingerprint);
    edit.generations = before - state.generations.len();
    if action == Action::Block && !was_blocked {
        state.blocked.push(fingerprint);
        state.blocked.sort();
        edit.is_blocked = true;
    }
    edit
}

/// `[daemon] binding_tombstone_days` from the files the daemon of `dir` reads: the user
/// file beside its state directory (`<base>/relay/config.toml`) and the system file.
fn tombstone_period(dir: &Path, system_dir: &Path) -> Result<Duration, BindingsError> {
    let sources = ConfigSources::standard(dir.parent(), system_dir);
    let config = Config::load_daemon(&sources).map_err(BindingsError::Config)?;
    Ok(Duration::from_secs(
        u64::from(config.daemon.binding_tombstone_days) * 24 * 3600,
    ))
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
