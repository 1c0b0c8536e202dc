//! `relay-doctor`: checks a machine-user's Relay set-up (§2.5, §10.4).
//!
//! Implemented so far: `relay-doctor token ensure`, which creates the per-user route token file
//! (§4.1). The other modes parse, so `--help` lists them, and report that they are not
//! implemented yet.

use std::process::ExitCode;

use clap::Parser as _;

mod cli;
mod token;

/// Exit status for usage and configuration errors (SPEC §2).
const EXIT_USAGE: u8 = 64;

fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return usage_error(&err),
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

/// Help and version go to stdout with status 0; every other parse error is one line on stderr
/// with status 64: clap's first paragraph (which names the flag at fault) joined into one line.
fn usage_error(err: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            // Nothing sensible is left to do if stdout is closed.
            let _ = err.print();
            ExitCode::SUCCESS
        }
        _ => {
            let rendered = err.render().to_string();
            let line: Vec<&str> = rendered
                .lines()
                .map(str::trim)
                .skip_while(|line| line.is_empty())
                .take_while(|line| !line.is_empty())
                .collect();
            let line = if line.is_empty() {
                "invalid usage".to_owned()
            } else {
                line.join(" ")
            };
            eprintln!("relay-doctor: {line}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}
