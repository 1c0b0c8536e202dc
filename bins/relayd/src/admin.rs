//! `relayd [--state-dir DIR] bindings list | revoke | block | unblock` (SPEC §2.1, §5.4 last
//! row): through the admin socket when a daemon answers on it, otherwise on the state file
//! of the stopped daemon, under the state lock.

mod offline;
mod text;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use relay_broker::Fingerprint;
use relay_identity::{ProcessEnv, StatePaths};
use relay_proxy::admin::{
    Action, ActionOutcome, AdminClient, AdminClientError, AdminError, BindingsList,
};
use relay_proxy::state::StateError;

use crate::cli::BindingsCommand;
use offline::{Edit, LOCK_WAIT, daemon_broker_config, edit_stopped, list_stopped};
use text::{describe_offline, describe_online, list_lines};

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
        // A directory named on the command line that is not there is the flag's error.
        Some(dir) if !dir.is_dir() => {
            return relay_logging::usage_exit(
                "relayd",
                &format!("--state-dir {}: no such directory", dir.display()),
            );
        }
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
            relay_logging::usage_exit("relayd", &relay_proxy::error_chain(&error))
        }
        Err(error) => {
            relay_logging::say!("relayd: {}", relay_proxy::error_chain(&error));
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
            let text: String = list_lines(list)
                .iter()
                .map(|line| format!("{line}\n"))
                .collect();
            let printed = crate::print_stdout(&text);
            if list.bindings.is_empty() && list.blocked.is_empty() {
                relay_logging::say!("(no bindings)");
            }
            if !daemon_running {
                relay_logging::say!("(daemon not running)");
            }
            printed
        }
        Done::Acted(outcome) => {
            let printed = crate::print_stdout(&format!("{}\n", describe_online(outcome)));
            if !outcome.persisted {
                let error = BindingsError::NotPersisted {
                    error: outcome.persist_error.clone().unwrap_or_default(),
                };
                relay_logging::say!("relayd: {error}");
                return ExitCode::FAILURE;
            }
            printed
        }
        Done::Edited {
            action,
            fingerprint,
            outcome,
        } => crate::print_stdout(&format!(
            "{}\n",
            describe_offline(*action, fingerprint, outcome)
        )),
    }
}

#[cfg(test)]
mod tests;
