//! `relay-doctor`: checks a machine-user's Relay set-up (§2.5, §10.4).
//!
//! Modes: the environment report (no option, [`environment`]), `--live` against a running
//! daemon ([`live`]), `--managed-bundle`, the offline bundle check (§10.2), and
//! `relay-doctor token ensure`, which creates the per-user route token file (§4.1). The
//! report and its JSON are documented in `docs/doctor.md`.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser as _;

mod bundle;
mod cli;
mod environment;
mod live;
mod report;
mod token;
mod wiring;

fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return relay_logging::clap_exit("relay-doctor", &err),
    };
    match run(cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(err) => {
            relay_logging::say!("relay-doctor: {}", relay_proxy::error_chain(err.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// Runs the selected mode; `Ok(false)` is a check that found a problem (exit 1).
fn run(cli: cli::Cli) -> anyhow::Result<bool> {
    match cli.command {
        Some(cli::Command::Token {
            command: cli::TokenCommand::Ensure { json },
        }) => token::ensure(json).map(|()| true),
        None if cli.managed_bundle.is_some() => {
            match (&cli.managed_bundle, &cli.managed_bundle_sha256) {
                (Some(dir), Some(sha256)) => bundle::run(dir, sha256, cli.json),
                // clap's `requires` makes the two flags go together.
                _ => anyhow::bail!("--managed-bundle needs --managed-bundle-sha256"),
            }
        }
        None => {
            let env = relay_identity::ProcessEnv;
            let inputs = environment::Inputs::new(&env, relay_identity::store::current_euid());
            let report = match (&cli.daemon_address, cli.live) {
                (Some(daemon), true) => live::run(&inputs, daemon)?,
                // clap's `requires` makes --live and --daemon-address go together.
                (None, true) => anyhow::bail!("--live needs --daemon-address"),
                _ => environment::report(&inputs),
            };
            let text = if cli.json {
                format!("{}\n", report.to_json())
            } else {
                report.to_text()
            };
            print_report(&text)?;
            Ok(report.passed())
        }
    }
}

/// Prints a report; a report that cannot be written is a failure, not a panic.
fn print_report(text: &str) -> anyhow::Result<()> {
    relay_logging::print_out(text).context("writing the report to stdout")
}
