//! `relay-doctor`: checks a machine-user's Relay set-up (§2.5, §10.4).
//!
//! Implemented so far: `relay-doctor token ensure`, which creates the per-user route token file
//! (§4.1). The other modes parse, so `--help` lists them, and report that they are not
//! implemented yet.

use std::process::ExitCode;

use clap::Parser as _;

mod cli;
mod token;

fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return relay_logging::clap_exit("relay-doctor", &err),
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("relay-doctor: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: cli::Cli) -> anyhow::Result<()> {
    match cli.command {
        Some(cli::Command::Token {
            command: cli::TokenCommand::Ensure { json },
        }) => token::ensure(json),
        None if cli.managed_bundle.is_some() => {
            anyhow::bail!("--managed-bundle is not implemented yet")
        }
        None if cli.live => anyhow::bail!("--live is not implemented yet"),
        None => anyhow::bail!("the environment report is not implemented yet"),
    }
}
