//! `relay-hook`: the command a coding agent runs for each hook event (SPEC §2.3, §7.1).
//!
//! It reads one native hook payload on stdin, posts it unchanged to the daemon's hook route
//! with this user's route credential and exits with the status the agent understands. Relay
//! only ever denies or stays silent (SPEC §7.2): stdout is the agent's silent answer, built
//! here and never copied from the daemon's body, and a block is exit 2 with the reason on
//! stderr. It never starts anything, never resends a payload (except after a 503 that proves
//! nothing was forwarded), reads no configuration file, sets up no logging and never prints
//! the credential. Without a credential it answers for the daemon and contacts nothing.
//!
//! The pieces, in the order a run uses them: [`cli::Cli`] (flags and the timeout override),
//! [`payload::read_within`] (stdin and the event name), [`credential::resolve`],
//! [`client::HookPost`] (the exchange) and [`outcome::exit_for`] (what to print and the exit
//! status, with [`outcome::Failure`] for everything that goes wrong).

use std::io::{self, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser as _;
use relay_identity::{Env as _, ProcessEnv, names, store};

use crate::cli::{Agent, Cli, FailurePolicy};
use crate::client::HookPost;
use crate::outcome::{Failure, Outcome, exit_for};
use crate::payload::{Arrived, MAX_PAYLOAD_BYTES, Payload};

mod cli;
mod client;
mod credential;
mod outcome;
mod payload;

/// The name in every usage error line.
const BINARY: &str = "relay-hook";

fn main() -> ExitCode {
    // The timeout counts from here: the agent's own limit (Codex kills SessionEnd hooks after
    // 3 s) runs from when it started this process.
    let started = Instant::now();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return relay_logging::clap_exit(BINARY, &err),
    };
    let env = ProcessEnv;
    let timeout_override = cli::timeout_override(&env);
    // An agent that keeps stdin open is not waited for past the hook's timeout.
    let timeout_of = |event: Option<&str>| match &timeout_override {
        Ok(Some(timeout)) => *timeout,
        _ => cli.agent.default_timeout(event),
    };
    let arrived = payload::read_within(io::stdin(), MAX_PAYLOAD_BYTES, |event| {
        started + timeout_of(event)
    });

    let Some(token) = credential::resolve(&env, store::current_euid()) else {
        // No credential: the daemon is not contacted. Relay is not in this user's path, so the
        // answer is the one the daemon gives when no worker handles the event, whatever the
        // payload; only an explicit --fail-closed blocks a blocking event instead.
        let event = arrived.ok().and_then(|arrived| arrived.payload.event);
        return finish(
            Outcome::NoCredential,
            cli.agent,
            event.as_deref(),
            cli.failure_policy(),
        );
    };

    let (outcome, event) = match (arrived, timeout_override) {
        (Err(source), _) => (Outcome::Failure(Failure::Stdin { source }), None),
        (
            Ok(Arrived {
                payload:
                    Payload {
                        is_oversize: true,
                        event,
                        ..
                    },
                ..
            }),
            _,
        ) => (
            Outcome::Failure(Failure::PayloadTooLarge {
                limit: MAX_PAYLOAD_BYTES,
            }),
            event,
        ),
        // A timeout that cannot be read is a failure like any other, not a usage error: exit
        // 64 would let Claude Code and Codex run a tool the policy never saw.
        (Ok(Arrived { payload, .. }), Err(source)) => (
            Outcome::Failure(Failure::TimeoutSetting { source }),
            payload.event,
        ),
        (
            Ok(Arrived {
                payload: Payload { body, event, .. },
                late,
            }),
            Ok(timeout_override),
        ) => {
            let timeout =
                timeout_override.unwrap_or_else(|| cli.agent.default_timeout(event.as_deref()));
            // An agent that keeps stdin open past the timeout: say so, rather than blame a
            // daemon that was never asked.
            if late || started.elapsed() >= timeout {
                let outcome = Outcome::Failure(Failure::PayloadLate { timeout });
                return finish(outcome, cli.agent, event.as_deref(), cli.failure_policy());
            }
            let extra_ca_file = env.non_empty(names::RELAY_EXTRA_CA_FILE).map(PathBuf::from);
            let post = HookPost {
                address: &cli.daemon_address,
                route: cli.agent.route(),
                token: &token,
                body,
                deadline: started + timeout,
                timeout,
                extra_ca_file: extra_ca_file.as_deref(),
            };
            (post.send(), event)
        }
    };
    finish(outcome, cli.agent, event.as_deref(), cli.failure_policy())
}

/// Prints what the outcome calls for and turns it into the exit status.
fn finish(outcome: Outcome, agent: Agent, event: Option<&str>, policy: FailurePolicy) -> ExitCode {
    let exit = exit_for(outcome, agent, event, policy);
    if let Some(body) = &exit.stdout
        && let Err(source) = write_stdout(body)
    {
        return finish(
            Outcome::Failure(Failure::Stdout { source }),
            agent,
            event,
            policy,
        );
    }
    if let Some(line) = &exit.stderr {
        relay_logging::say!("{line}");
    }
    ExitCode::from(exit.code)
}

fn write_stdout(answer: &str) -> io::Result<()> {
    let mut stdout = io::stdout().lock();
    stdout.write_all(answer.as_bytes())?;
    stdout.flush()
}
