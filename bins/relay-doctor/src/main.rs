//! `relay-doctor`: checks a machine-user's Relay set-up (§2.5, §10.4).
//!
//! Implemented so far: `relay-doctor token ensure`, which creates the per-user route token file
//! (§4.1), and `--managed-bundle`, the offline bundle check (§10.2). The environment report
//! and `--live` parse but say they are not implemented yet; `--help` does not list `--live`.

use std::process::ExitCode;

use clap::Parser as _;

mod bundle;
mod cli;
mod token;

fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return relay_logging::clap_exit("relay-doctor", &err),
    };
    match run(cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(err) => {
            eprintln!("relay-doctor: {err:#}");
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
        None if cli.live => anyhow::bail!("--live is not implemented yet"),
        None => anyhow::bail!("the environment report is not implemented yet"),
    }
}
