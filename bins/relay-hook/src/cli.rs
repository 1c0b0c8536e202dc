//! The command line of SPEC §2.3 and the one environment setting that changes behaviour,
//! `RELAY_HOOK_TIMEOUT_MS` (the route credential is read by [`crate::credential`]).

use std::time::Duration;

use relay_identity::{DaemonAddress, Env, names};

/// Forwards one coding-agent hook event to the Relay daemon.
///
/// Reads the agent's hook payload on stdin (at most 1 MiB), posts it to the daemon with this
/// user's route credential (RELAY_CLIENT_TOKEN, else the token file) and exits with the
/// status the agent understands: 0 to go on, printing the agent's silent answer
/// ({"continue":true} for Claude Code, {} for Codex and pi), or 2 to block (blocking events
/// and policy rejections only, with the reason on stderr).
/// Nothing the daemon's answer says is ever printed. Without a credential it contacts
/// nothing and lets the agent go on, except that --fail-closed blocks a blocking event.
/// RELAY_HOOK_TIMEOUT_MS overrides the timeout (5000 ms, 2500 ms for SessionEnd).
#[derive(Debug, clap::Parser)]
#[command(name = "relay-hook", version)]
pub(crate) struct Cli {
    /// The coding agent whose hook payload arrives on stdin.
    #[arg(value_enum)]
    pub(crate) agent: Agent,

    /// The daemon origin, e.g. http://127.0.0.1:47632 (http only for 127.0.0.1 and
    /// localhost).
    #[arg(long, value_name = "URL", value_parser = DaemonAddress::parse)]
    pub(crate) daemon_address: DaemonAddress,

    /// On a failure (daemon down, timeout, unexpected answer) exit 0 with empty stdout, for
    /// every event [default: only for non-blocking events].
    #[arg(long, conflicts_with = "fail_closed")]
    pub(crate) fail_open: bool,

    /// On a failure print one line to stderr and exit 2 for blocking events, 1 for others;
    /// a blocking event without a Relay credential exits 2 too [default: fail closed only for
    /// blocking events (PreToolUse, PermissionRequest, UserPromptSubmit; pi tool_call,
    /// user_bash), and without a credential let every event go on].
    #[arg(long)]
    pub(crate) fail_closed: bool,
}

impl Cli {
    /// The failure policy the flags select.
    pub(crate) fn failure_policy(&self) -> FailurePolicy {
        if self.fail_open {
            FailurePolicy::Open
        } else if self.fail_closed {
            FailurePolicy::Closed
        } else {
            FailurePolicy::Default
        }
    }
}

/// The coding agents `relay-hook` speaks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Agent {
    /// Claude Code command hooks.
    Claude,
    /// Codex CLI hooks (same stdin contract as Claude Code).
    Codex,
    /// pi, through the Relay pi extension.
    Pi,
}

impl Agent {
    /// The daemon's hook route for this agent (SPEC §3.4).
    pub(crate) fn route(self) -> &'static str {
        match self {
            Agent::Claude => "/hooks/claude-code",
            Agent::Codex => "/hooks/codex",
            Agent::Pi => "/hooks/pi",
        }
    }

    /// The agent's silent answer: what the daemon answers when no worker handles the event
    /// (SPEC §3.4) and what a worker answers when policy does not deny (SPEC §7.2). It is all
    /// relay-hook ever prints on stdout.
    pub(crate) fn silent_answer(self) -> &'static str {
        match self {
            Agent::Claude => r#"{"continue":true}"#,
            Agent::Codex | Agent::Pi => "{}",
        }
    }

    /// Whether exit 2 means "do not do this" for `event` (SPEC §7.1). Everywhere else exit 2
    /// means something else (keep going on `Stop`, feedback on `PostToolUse`), so Relay never
    /// produces it there.
    pub(crate) fn is_blocking_event(self, event: Option<&str>) -> bool {
        let Some(event) = event else {
            return false;
        };
        match self {
            Agent::Claude | Agent::Codex => {
                matches!(
                    event,
                    "PreToolUse" | "PermissionRequest" | "UserPromptSubmit"
                )
            }
            Agent::Pi => matches!(event, "tool_call" | "user_bash"),
        }
    }

    /// The timeout for one event when `RELAY_HOOK_TIMEOUT_MS` is not set: 2.5 s for Claude
    /// Code and Codex `SessionEnd` (Codex kills SessionEnd hooks after 3 s), else 5 s.
    pub(crate) fn default_timeout(self, event: Option<&str>) -> Duration {
        match (self, event) {
            (Agent::Claude | Agent::Codex, Some("SessionEnd")) => SESSION_END_TIMEOUT,
            _ => DEFAULT_TIMEOUT,
        }
    }
}

/// The timeout of every event but `SessionEnd`.
const DEFAULT_TIMEOUT: Duration = Duration::from_millis(5000);
/// The timeout of Claude Code and Codex `SessionEnd`.
const SESSION_END_TIMEOUT: Duration = Duration::from_millis(2500);
/// The largest accepted `RELAY_HOOK_TIMEOUT_MS`: an hour is already longer than any harness
/// waits for a hook.
const MAX_TIMEOUT_MS: u64 = 3_600_000;

/// What a failure (step 6 of SPEC §7.1) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailurePolicy {
    /// No flag: fail closed for blocking events, open for every other event.
    Default,
    /// `--fail-open`: exit 0 with empty stdout.
    Open,
    /// `--fail-closed`: exit 2 for blocking events, 1 for the others.
    Closed,
}

/// `RELAY_HOOK_TIMEOUT_MS` is set but is not a whole number of milliseconds in range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{} must be a whole number of milliseconds from 1 to {MAX_TIMEOUT_MS}, not {value:?}",
    names::RELAY_HOOK_TIMEOUT_MS
)]
pub(crate) struct TimeoutEnvError {
    /// The value found (lossily decoded).
    pub(crate) value: String,
}

/// The timeout override from `RELAY_HOOK_TIMEOUT_MS`; unset or empty means none.
pub(crate) fn timeout_override(env: &impl Env) -> Result<Option<Duration>, TimeoutEnvError> {
    let Some(raw) = env.non_empty(names::RELAY_HOOK_TIMEOUT_MS) else {
        return Ok(None);
    };
    let invalid = || TimeoutEnvError {
        value: raw.to_string_lossy().into_owned(),
    };
    let text = raw.to_str().ok_or_else(invalid)?;
    if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(invalid());
    }
    match text.parse::<u64>() {
        Ok(ms) if (1..=MAX_TIMEOUT_MS).contains(&ms) => Ok(Some(Duration::from_millis(ms))),
        _ => Err(invalid()),
    }
}

#[cfg(test)]
mod tests;
